// The group "network" of api/extensions.yaml: a sandbox's egress policy
// (spec.extensions["sandboxd.network"], capability networkPolicy), the policy now with what it counted
// (GET|PUT /v1/sandboxes/{sandboxId}/network, Sandbox.network and Sandbox.setNetwork) and the stream
// of its denials (GET /v1/sandboxes/{sandboxId}/network/denials, Sandbox.networkDenials).

import { SandboxdError, type ConnectionError } from "../errors.js";
import type { components } from "../generated/extensions.js";
import type { RequestOptions } from "../transport.js";
import { connection } from "./sse.js";

/** The spec.extensions key of a sandbox's egress policy. */
export const NETWORK_KEY = "sandboxd.network";

/**
 * An egress policy, given to {@link Sandbox.create} as `{ network: { egress: "deny", allow: [...] } }`
 * and to {@link Sandbox.setNetwork}. `egress` is what a destination no rule names gets (left out: the
 * daemon's default, deny unless it is told otherwise); `allow` and `deny` are CIDRs in canonical
 * form (`"203.0.113.0/24"`, `"2001:db8::/32"`: an IPv6 allow rule is 422 where sandboxes have no
 * IPv6), addresses, or names (`"pypi.org"`, `"*.example.com"`, where the provider resolves names for
 * its sandboxes), at most 256 each. Deny beats allow. Whatever the policy says, a
 * sandbox never reaches another one, and reaches the host or a link-local address only through an allow
 * rule naming it; one whose egress is denied and which allows nothing has loopback only.
 */
export type NetworkPolicy = components["schemas"]["NetworkPolicy"];

/**
 * A ready or paused sandbox's network ({@link Sandbox.network}): the policy that holds (the daemon's
 * default egress made explicit), the connections it let out and refused, and its recent denials,
 * newest first (at most 50).
 */
export type NetworkStatus = components["schemas"]["NetworkStatus"];

/**
 * A destination the policy refused, last at `time`: `destination` is the IPv4 address (absent for a
 * refused name), `name` the name it was resolved from, or the name refused.
 */
export type NetworkDenial = components["schemas"]["NetworkDenial"];

/**
 * Why a stream of denials ended: `reason` is the error code the sandbox's network now answers
 * (`invalid_state` once terminated, `generation_conflict` once recreated, `not_found`, ...).
 */
export type NetworkDenialsEnd = components["schemas"]["NetworkDenialsEnd"];

// Symbol.asyncDispose where the runtime has it; elsewhere the registered symbol that polyfills use.
const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** How {@link Sandbox.networkDenials} follows. */
export interface NetworkDenialsOptions {
  /** Ends the iteration (without an error) when aborted. */
  signal?: AbortSignal | undefined;
  /**
   * How long the stream may stay silent (no denial, no heartbeat) before it is taken for dead and the
   * iteration throws a {@link ConnectionError}. Default 45 s, three of the daemon's 15 s heartbeats.
   */
  heartbeatTimeoutMs?: number | undefined;
  /** How long the daemon may take to answer. Default: the client's `requestTimeoutMs`. */
  connectTimeoutMs?: number | undefined;
}

/**
 * What a sandbox's policy refuses, as an async iterator of {@link NetworkDenial}: first the recent
 * denials, oldest first, then each new one as it is seen (a destination refused again comes again).
 * It ends when the generation it began on is no longer ready or paused (terminated, recreated, failed),
 * with the reason in {@link NetworkDenialStream.end}. The daemon's refusal of the stream (404, 409, 422)
 * is thrown by the first `next`; a connection that breaks, or stays silent for `heartbeatTimeoutMs`,
 * throws a {@link ConnectionError}. Breaking out of a `for await` loop,
 * {@link NetworkDenialStream.close} or the `signal` closes it.
 *
 * ```ts
 * for await (const d of sb.networkDenials()) console.log(d.time, d.destination ?? d.name);
 * ```
 */
export class NetworkDenialStream implements AsyncIterableIterator<NetworkDenial> {
  readonly #open: (request: RequestOptions) => Promise<Response>;
  readonly #path: string;
  readonly #opts: NetworkDenialsOptions;
  readonly #stop = new AbortController();
  readonly #denials: AsyncGenerator<NetworkDenial, undefined, undefined>;
  #end: NetworkDenialsEnd | undefined;

  /** Made by {@link Sandbox.networkDenials}. @hidden */
  constructor(open: (request: RequestOptions) => Promise<Response>, path: string, opts: NetworkDenialsOptions = {}) {
    this.#open = open;
    this.#path = path;
    this.#opts = opts;
    const signal = opts.signal;
    if (signal?.aborted) this.#stop.abort();
    else signal?.addEventListener("abort", () => this.#stop.abort(), { once: true });
    this.#denials = this.#run();
  }

  /** Why the stream ended, once it has; undefined before, and when it was closed by this side. */
  get end(): NetworkDenialsEnd | undefined {
    return this.#end;
  }

  /** The next denial. */
  next(): Promise<IteratorResult<NetworkDenial, undefined>> {
    return this.#denials.next();
  }

  /** Closes the stream; called by `break` in a `for await` loop. */
  async return(): Promise<IteratorResult<NetworkDenial, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /** Closes the connection; a pending {@link NetworkDenialStream.next} ends with `done`. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#denials.return(undefined);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Closes the stream; `await using` calls it. */
  async [asyncDispose](): Promise<void> {
    await this.close();
  }

  #run(): AsyncGenerator<NetworkDenial, undefined, undefined> {
    return connection<NetworkDenial>({
      open: this.#open,
      request: { method: "GET", path: this.#path, timeoutMs: this.#opts.connectTimeoutMs },
      stop: this.#stop.signal,
      silentMs: this.#opts.heartbeatTimeoutMs ?? 45_000,
      what: "network denials",
      take: (event, data, queue) => {
        if (event !== "denial" && event !== "end") return; // an event this client does not know
        const v = parseData(event, data);
        if (event === "end") this.#end = v as NetworkDenialsEnd;
        else queue.push(v as NetworkDenial);
      },
      ended: () => this.#end !== undefined,
    });
  }
}

/** The data of a "denial" or "end" event; anything else is an `unexpected_response`. */
function parseData(event: "denial" | "end", data: string): NetworkDenial | NetworkDenialsEnd {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    v = undefined;
  }
  const o = v as Record<string, unknown> | undefined;
  const ok =
    typeof o === "object" &&
    o !== null &&
    (event === "denial"
      ? typeof o["time"] === "string"
      : typeof o["reason"] === "string" && typeof o["message"] === "string");
  if (!ok) {
    throw new SandboxdError(`network denials sent a ${event} that is not one: ${data.slice(0, 200)}`, {
      code: "unexpected_response",
    });
  }
  return v as NetworkDenial | NetworkDenialsEnd;
}
