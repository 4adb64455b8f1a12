// A sandbox as an object: it knows its generation and sends it with every call, and waits for states
// through the event stream.

import {
  FileWatchStream,
  download as downloadFile,
  openFile as openRawFile,
  upload as uploadFile,
  type FileTarget,
  type RawFile,
  type RawFileWritten,
  type UploadOptions,
  type WatchOptions,
} from "./extensions/files.js";
import type { CallOptions, Client } from "./client.js";
import { CommandResult, withStdin, type RunOptions } from "./commands.js";
import {
  GenerationConflict,
  InvalidState,
  NotFound,
  SandboxFailed,
  SandboxdError,
  ValidationError,
  WaitTimeout,
} from "./errors.js";
import { SandboxFiles } from "./files.js";
import { LIFETIME_KEY, recordedLifetime, type RecordedLifetime } from "./extensions/lifetime.js";
import {
  NETWORK_KEY,
  NetworkDenialStream,
  type NetworkDenialsOptions,
  type NetworkPolicy,
  type NetworkStatus,
} from "./extensions/network.js";
import {
  ProcessOutputStream,
  type Process,
  type ProcessOutputOptions,
  type ProcessSignal,
  type ProcessStart,
  type TerminalOptions,
  type TerminalSize,
} from "./extensions/processes.js";
import type { SandboxStats } from "./extensions/stats.js";
import { parsePort, type PreviewToken, type PreviewTokenOptions } from "./extensions/ports.js";
import type { Checkpoint } from "./extensions/checkpoints.js";
import { encodeBase64 } from "./base64.js";
import { VOLUMES_KEY } from "./extensions/volumes.js";
import type { CommandResultBody, CreateSpec, SandboxResource, SandboxSpec, SandboxState } from "./types.js";

/** How {@link Sandbox.create} creates. */
export interface CreateOptions extends CallOptions {
  /** Wait until the sandbox is ready. Default true. */
  wait?: boolean | undefined;
  /** How long the create and the wait for `ready` may take together. Default 60 s. */
  timeoutMs?: number | undefined;
}

/** How a lifecycle action runs. */
export interface ActionOptions extends CallOptions {
  /** Wait until the sandbox is in the action's resulting state. Default true. */
  wait?: boolean | undefined;
  /** How long the action and the wait may take together. Default 60 s. */
  timeoutMs?: number | undefined;
}

/** How {@link Sandbox.waitForState} waits. */
export interface WaitOptions extends CallOptions {
  /** How long to wait. Default 60 s. */
  timeoutMs?: number | undefined;
}

const transitional: ReadonlySet<SandboxState> = new Set<SandboxState>([
  "requested",
  "starting",
  "pausing",
  "resuming",
  "terminating",
]);

// Symbol.asyncDispose where the runtime has it; elsewhere the registered symbol that polyfills use.
const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** A random clientRequestId: `req-` and 24 hex digits. */
export function newRequestId(): string {
  const b = new Uint8Array(12);
  globalThis.crypto.getRandomValues(b);
  return "req-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * One sandbox. It remembers the generation it last saw and sends it as `expectedGeneration` with every
 * call, so a call never reaches a generation it did not mean: once the sandbox has been recreated
 * elsewhere, calls fail with {@link GenerationConflict} (whose `currentGeneration` says the new one)
 * until {@link Sandbox.refresh} catches up.
 *
 * ```ts
 * await using sb = await Sandbox.create(client);
 * const r = await sb.run(["echo", "hi"]);
 * ```
 */
export class Sandbox {
  /** The client it talks through. */
  readonly client: Client;
  /** Its id, stable across generations. */
  readonly id: string;
  /** Its files. */
  readonly files: SandboxFiles;
  #resource: SandboxResource;

  /**
   * Wraps a sandbox resource as the daemon reported it (from {@link Client.request}, say). Most code
   * gets its sandboxes from {@link Sandbox.create}, {@link Sandbox.connect} or {@link Client.listSandboxes}.
   */
  constructor(client: Client, resource: SandboxResource) {
    this.client = client;
    this.id = resource.id;
    this.#resource = resource;
    this.files = new SandboxFiles(this);
  }

  /**
   * Creates a sandbox and, unless `wait` is false, waits until it is ready, by the event stream from a
   * cursor taken before the create (so a fast sandbox is not missed), filtered to this sandbox.
   *
   * The create carries a `clientRequestId` (the spec's, or a new one for this call) and is retried with
   * the same one after a lost answer, so it never makes two sandboxes.
   *
   * @throws {@link SandboxFailed} when the sandbox fails while starting, with the daemon's reason;
   * {@link WaitTimeout} past `timeoutMs` (its `sandbox` says which one, still there); and the daemon's
   * refusals: {@link ValidationError}, {@link UnsupportedCapability}, {@link IdempotencyConflict},
   * {@link ProviderUnavailable}.
   */
  static async create(client: Client, spec: CreateSpec = {}, options: CreateOptions = {}): Promise<Sandbox> {
    const full = specOf(spec, spec.clientRequestId ?? newRequestId());
    return within(options, async (signal) => {
      const after = options.wait === false ? 0 : await client.startCursor(signal);
      const res = await client.transport.call<SandboxResource>({
        method: "POST",
        path: "/v1/sandboxes",
        body: full,
        retry: "safe",
        signal,
      });
      const sb = new Sandbox(client, res);
      if (options.wait !== false) await sb.#wait("ready", after, signal, options.timeoutMs, true);
      return sb;
    });
  }

  /**
   * The sandbox with this id, as it is now.
   * @throws {@link NotFound}
   */
  static async connect(client: Client, id: string, options: CallOptions = {}): Promise<Sandbox> {
    return new Sandbox(client, await getResource(client, id, options.signal));
  }

  /** The generation this object fences its calls with. */
  get generation(): number {
    return this.#resource.generation;
  }

  /** The state as last seen. */
  get state(): SandboxState {
    return this.#resource.state;
  }

  /** The spec of the current generation. */
  get spec(): SandboxSpec {
    return this.#resource.spec;
  }

  /** Why it failed, when it is `failed`. */
  get failure(): { code: string; message: string } | undefined {
    return this.#resource.failure;
  }

  /** The resource as last seen. */
  get resource(): Readonly<SandboxResource> {
    return this.#resource;
  }

  /**
   * The lifetime that holds for this generation as last seen (its time to live, with the deadline as
   * a time, and its idle bound), from `providerExtensions["sandboxd.lifetime"]`; undefined when it
   * has none.
   */
  get lifetime(): RecordedLifetime | undefined {
    return recordedLifetime(this.#resource.providerExtensions);
  }

  /**
   * What the sandbox uses now (`GET /v1/sandboxes/{id}/stats`): CPU time, memory, processes and disk,
   * read from its cgroups and its disk; a figure the provider cannot read is left out. It needs no
   * generation: the answer says which generation, and state, it read.
   * @throws {@link UnsupportedCapability} on a provider that cannot read them (such as `host`),
   * {@link InvalidState} when the sandbox is neither ready nor paused, {@link NotFound},
   * {@link ProviderUnavailable}
   */
  stats(options: CallOptions = {}): Promise<SandboxStats> {
    return this.client.transport.call<SandboxStats>({
      method: "GET",
      path: `${this.#path}/stats`,
      signal: options.signal,
    });
  }

  /**
   * The base URL of the proxy to 127.0.0.1:`port` inside the sandbox, ending in "/": a request to it
   * plus a path reaches that path there, with the client's bearer token (which the proxy does not pass
   * on), whatever the sandbox's egress policy.
   * @throws RangeError for a port that is not 1-65535 in plain decimal
   */
  portUrl(port: number | string): string {
    return `${this.client.url.replace(/\/+$/, "")}${this.#path}/ports/${parsePort(port)}/`;
  }

  /**
   * A token and preview URL for `port` of this generation
   * (`POST /v1/sandboxes/{id}/ports/{port}/preview-tokens`). Recreating the sandbox revokes it.
   * @throws {@link UnsupportedCapability} (no preview listener, or no `portForwarding`, such as `host`),
   * {@link InvalidState} when the sandbox is not ready, {@link ValidationError}, {@link NotFound}
   */
  previewToken(port: number | string, options: PreviewTokenOptions = {}): Promise<PreviewToken> {
    return this.client.transport.call<PreviewToken>({
      method: "POST",
      path: `${this.#path}/ports/${parsePort(port)}/preview-tokens`,
      body: options.ttlSeconds === undefined ? {} : { ttlSeconds: options.ttlSeconds },
      signal: options.signal,
    });
  }

  /**
   * Writes the ready sandbox's memory, processes and /workspace to a checkpoint
   * (`POST /v1/sandboxes/{id}/actions/checkpoint`). Without `leaveRunning` the sandbox is paused at it
   * and {@link Sandbox.resume} restores it; the state seen here is refreshed. A new sandbox starts from
   * it with `extensions: fromCheckpoint(id, checkpoint.id)`. Fenced by the generation.
   * @throws {@link UnsupportedCapability} (no `memorySnapshot`), {@link InvalidState},
   * {@link GenerationConflict}, {@link ProviderUnavailable}
   */
  async checkpoint(options: CallOptions & { leaveRunning?: boolean } = {}): Promise<Checkpoint> {
    const res = await this.client.transport.call<{ checkpoint: Checkpoint; state: string }>({
      method: "POST",
      path: `${this.#path}/actions/checkpoint`,
      body: { expectedGeneration: this.generation, leaveRunning: options.leaveRunning ?? false },
      signal: options.signal,
    });
    await this.refresh({ signal: options.signal });
    return res.checkpoint;
  }

  /**
   * The checkpoints taken of the sandbox, oldest first (`GET /v1/sandboxes/{id}/checkpoints`).
   * @throws {@link UnsupportedCapability}, {@link NotFound}
   */
  async checkpoints(options: CallOptions = {}): Promise<Checkpoint[]> {
    const res = await this.client.transport.call<{ checkpoints: Checkpoint[] }>({
      method: "GET",
      path: `${this.#path}/checkpoints`,
      signal: options.signal,
    });
    return res.checkpoints;
  }

  /**
   * The sandbox's network now (`GET /v1/sandboxes/{id}/network`): the policy that holds (the last one
   * set, or the spec's, with the daemon's default egress made explicit), the connections it let out
   * and refused, and its recent denials.
   * @throws {@link UnsupportedCapability} (no `networkPolicy`, such as `host`), {@link InvalidState}
   * when the sandbox is neither ready nor paused, {@link NotFound}, {@link ProviderUnavailable}
   */
  network(options: CallOptions = {}): Promise<NetworkStatus> {
    return this.client.transport.call<NetworkStatus>({
      method: "GET",
      path: `${this.#path}/network`,
      signal: options.signal,
    });
  }

  /**
   * Replaces the policy of a ready sandbox (`PUT /v1/sandboxes/{id}/network`) for every new
   * connection; those open go on. The spec keeps the policy asked at create. Fenced by this object's
   * generation; safe to repeat (the same policy set again changes nothing).
   * @throws {@link GenerationConflict}, {@link InvalidState}, {@link ValidationError} (a rule the
   * daemon refuses), {@link UnsupportedCapability} (no `networkPolicy`, or a name rule where names are
   * not resolved), {@link ProviderUnavailable}
   */
  setNetwork(policy: NetworkPolicy, options: CallOptions = {}): Promise<NetworkStatus> {
    return this.client.transport.call<NetworkStatus>({
      method: "PUT",
      path: `${this.#path}/network`,
      body: { expectedGeneration: this.generation, policy },
      retry: "safe",
      signal: options.signal,
    });
  }

  /**
   * Follows what the sandbox's policy refuses (`GET /v1/sandboxes/{id}/network/denials`): see
   * {@link NetworkDenialStream}. It ends when this generation is no longer ready or paused.
   */
  networkDenials(options: NetworkDenialsOptions = {}): NetworkDenialStream {
    const transport = this.client.transport;
    return new NetworkDenialStream((r) => transport.open(r), `${this.#path}/network/denials`, options);
  }

  /**
   * Writes a file of any size (`PUT /v1/sandboxes/{id}/files/raw`), atomically, streamed, its SHA-256
   * checked end to end; bytes and blobs resume after a broken connection. See {@link upload}.
   */
  upload(
    path: string,
    data: Uint8Array | Blob | ReadableStream<Uint8Array>,
    options: UploadOptions = {},
  ): Promise<RawFileWritten> {
    return uploadFile(this.#files(), path, data, options);
  }

  /** Reads the file at `path` whole, its SHA-256 checked (`GET .../files/raw`). */
  download(path: string, options: CallOptions = {}): Promise<Uint8Array> {
    return downloadFile(this.#files(), path, options.signal);
  }

  /** Opens the file at `path` as a stream, from byte `start` (a Range read). */
  openFile(path: string, start = 0, options: CallOptions = {}): Promise<RawFile> {
    return openRawFile(this.#files(), path, start, options.signal);
  }

  /** The changes under the directory `path` (`GET .../files/watch`): see {@link FileWatchStream}. */
  watch(path: string, options: WatchOptions = {}): FileWatchStream {
    const transport = this.client.transport;
    return new FileWatchStream((r) => transport.open(r), this.#files(), path, options);
  }

  #files(): FileTarget {
    const tr = this.client.transport;
    const headers: Record<string, string> = { ...tr.config.headers };
    if (tr.config.token) headers["Authorization"] = `Bearer ${tr.config.token}`;
    return {
      fetch: tr.config.fetch,
      url: (p, q) => tr.url(p, q),
      headers,
      backoff: (n) => tr.backoff(n),
      call: (o) => tr.call(o),
      path: `${this.#path}/files`,
      generation: this.generation,
    };
  }

  /**
   * Starts a background process (`POST /v1/sandboxes/{id}/processes`), fenced by this object's
   * generation. It runs until it exits or is signalled, whatever happens to this client; its stdout and
   * stderr, combined, are kept in the sandbox (the last 64 MiB) and read with
   * {@link Sandbox.processOutput}. Never repeated once sent (it would start twice).
   * @throws {@link ValidationError} (also when 256 processes run already), {@link GenerationConflict},
   * {@link InvalidState} (not ready), {@link NotFound}, {@link UnsupportedCapability},
   * {@link ProviderUnavailable}
   */
  startProcess(start: ProcessStart, options: CallOptions = {}): Promise<Process> {
    const { stdin, ...rest } = start;
    const body: Record<string, unknown> = { expectedGeneration: this.generation, ...rest };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    if (stdin !== undefined) {
      body["stdinBase64"] = encodeBase64(typeof stdin === "string" ? new TextEncoder().encode(stdin) : stdin);
    }
    return this.client.transport.call<Process>({
      method: "POST",
      path: `${this.#path}/processes`,
      body,
      signal: options.signal,
    });
  }

  /** The sandbox's processes, oldest first (the 256 it keeps at most, running or ended). */
  async processes(options: CallOptions = {}): Promise<Process[]> {
    const out = await this.client.transport.call<{ processes: Process[] }>({
      method: "GET",
      path: `${this.#path}/processes`,
      query: { expectedGeneration: this.generation },
      signal: options.signal,
    });
    return out.processes;
  }

  /**
   * The process `pid`.
   * @throws {@link NotFound}, {@link GenerationConflict}, {@link InvalidState}
   */
  process(pid: number, options: CallOptions = {}): Promise<Process> {
    return this.client.transport.call<Process>({
      method: "GET",
      path: `${this.#path}/processes/${pid}`,
      query: { expectedGeneration: this.generation },
      signal: options.signal,
    });
  }

  /**
   * The process once it has ended, or as it is when `timeoutMs` (default 60 s, at most an hour) passed
   * first: its `running` says which. Safe to repeat.
   * @throws {@link NotFound}, {@link GenerationConflict}, {@link InvalidState}
   */
  waitProcess(pid: number, options: CallOptions & { timeoutMs?: number | undefined } = {}): Promise<Process> {
    const timeoutMs = Math.max(0, Math.min(3_600_000, Math.floor(options.timeoutMs ?? 60_000)));
    return this.client.transport.call<Process>({
      method: "POST",
      path: `${this.#path}/processes/${pid}/wait`,
      body: { expectedGeneration: this.generation, timeoutMs },
      retry: "safe",
      signal: options.signal,
      timeoutMs: timeoutMs + this.client.transport.config.requestTimeoutMs,
    });
  }

  /**
   * Writes `data` (at most 1 MiB a call) to the process's stdin, then closes it when `close`; returns
   * the bytes written. Never repeated once sent.
   * @throws {@link ValidationError}, {@link NotFound}, {@link GenerationConflict}, {@link InvalidState}
   * (the process did not read it in time, or its stdin is closed)
   */
  async writeStdin(
    pid: number,
    data: string | Uint8Array = "",
    options: CallOptions & { close?: boolean | undefined } = {},
  ): Promise<number> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const body: Record<string, unknown> = { expectedGeneration: this.generation };
    if (bytes.length > 0) body["dataBase64"] = encodeBase64(bytes);
    if (options.close) body["close"] = true;
    const out = await this.client.transport.call<{ written: number; closed: boolean }>({
      method: "POST",
      path: `${this.#path}/processes/${pid}/stdin`,
      body,
      signal: options.signal,
    });
    return out.written;
  }

  /**
   * Sends `signal` to the process's group.
   * @throws {@link ValidationError}, {@link NotFound}, {@link GenerationConflict}, {@link InvalidState}
   * (the process has ended)
   */
  async signalProcess(pid: number, signal: ProcessSignal, options: CallOptions = {}): Promise<void> {
    await this.client.transport.call<{ signal: string }>({
      method: "POST",
      path: `${this.#path}/processes/${pid}/signal`,
      body: { expectedGeneration: this.generation, signal },
      signal: options.signal,
    });
  }

  /**
   * Sets the size of the terminal of a process started with `pty`; its foreground group gets SIGWINCH.
   * Safe to repeat.
   * @throws {@link ValidationError} (rows and cols are each 1..65535), {@link NotFound},
   * {@link GenerationConflict}, {@link InvalidState} (no terminal, or it has ended),
   * {@link UnsupportedCapability}
   */
  resizeProcess(pid: number, size: TerminalSize, options: CallOptions = {}): Promise<TerminalSize> {
    return this.client.transport.call<TerminalSize>({
      method: "POST",
      path: `${this.#path}/processes/${pid}/resize`,
      body: { expectedGeneration: this.generation, rows: size.rows, cols: size.cols },
      retry: "safe",
      signal: options.signal,
    });
  }

  /**
   * The ws:// URL of the process's terminal attach (`GET .../processes/{pid}/terminal`, a WebSocket:
   * binary frames are its output from `after` one way and keys the other, JSON text frames the rest;
   * docs/processes.md). Node 20 has no WebSocket without `--experimental-websocket` (Node 22 has one),
   * and this package depends on no WebSocket library: attach with the one of your choosing, sending the
   * client's Authorization header.
   */
  terminalUrl(pid: number, options: TerminalOptions = {}): string {
    const url = this.client.transport.url(`${this.#path}/processes/${pid}/terminal`, {
      expectedGeneration: this.generation,
      after: options.after ?? 0,
      mode: options.mode ?? "control",
    });
    return url.replace(/^http/, "ws");
  }

  /**
   * The process's output (`GET .../processes/{pid}/output`) from byte offset `after`, read under this
   * object's generation: see {@link ProcessOutputStream}, which resumes by itself after a dropped
   * connection and ends with the stream's end event.
   */
  processOutput(pid: number, options: ProcessOutputOptions = {}): ProcessOutputStream {
    const transport = this.client.transport;
    return new ProcessOutputStream(
      {
        open: (r) => transport.open(r),
        path: `${this.#path}/processes/${pid}/output`,
        generation: this.generation,
        attempts: transport.config.retry.attempts,
        backoff: (n) => transport.backoff(n),
      },
      options,
    );
  }

  /**
   * Reads the sandbox again and adopts what it finds, a newer generation included.
   * @throws {@link NotFound}
   */
  async refresh(options: CallOptions = {}): Promise<this> {
    this.#adopt(await getResource(this.client, this.id, options.signal));
    return this;
  }

  /**
   * Asks the daemon to observe the sandbox's provider resource afresh and apply what it sees.
   * @throws {@link NotFound}, {@link ProviderUnavailable}, {@link ProviderProtocolError}
   */
  async reconcile(options: CallOptions = {}): Promise<this> {
    this.#adopt(
      await this.client.transport.call<SandboxResource>({
        method: "POST",
        path: `${this.#path}/actions/reconcile`,
        retry: "safe",
        signal: options.signal,
      }),
    );
    return this;
  }

  /**
   * Pauses the sandbox (its processes are frozen) and waits until it is `paused`.
   * @throws {@link UnsupportedCapability} without `pauseResume`, {@link InvalidState}, {@link GenerationConflict}
   */
  pause(options: ActionOptions = {}): Promise<this> {
    return this.#action("pause", "paused", options);
  }

  /**
   * Resumes a paused sandbox and waits until it is `ready`.
   * @throws {@link UnsupportedCapability}, {@link InvalidState}, {@link GenerationConflict}
   */
  resume(options: ActionOptions = {}): Promise<this> {
    return this.#action("resume", "ready", options);
  }

  /**
   * Terminates the sandbox (from any state; terminating a terminated one changes nothing) and waits
   * until it is `terminated`.
   * @throws {@link GenerationConflict}
   */
  terminate(options: ActionOptions = {}): Promise<this> {
    return this.#action("terminate", "terminated", options);
  }

  /**
   * Makes the next generation of a terminated sandbox, from `spec` (default: the current spec under a
   * new `clientRequestId`), and waits until it is ready. This object then fences with the new
   * generation. A retried recreate whose first try took effect is recognised by its clientRequestId.
   * @throws {@link InvalidState} when the sandbox is not terminated, {@link GenerationConflict},
   * {@link IdempotencyConflict}, {@link SandboxFailed}, {@link WaitTimeout}
   */
  async recreate(spec?: CreateSpec, options: ActionOptions = {}): Promise<this> {
    const { clientRequestId: _old, ...current } = this.#resource.spec;
    const next = specOf(spec ?? current, spec?.clientRequestId ?? newRequestId());
    const expected = this.generation;
    return within(options, async (signal) => {
      const after = await this.client.startCursor(signal);
      const res = await this.client.transport.call<SandboxResource>({
        method: "POST",
        path: `${this.#path}/actions/recreate`,
        body: { expectedGeneration: expected, spec: next },
        retry: "safe",
        signal,
        // A retry after a lost answer finds the generation moved on: by this very recreate when the new
        // generation carries its clientRequestId.
        recover: async (err) => {
          if (!(err instanceof GenerationConflict)) return undefined;
          const cur = await getResource(this.client, this.id, signal);
          return cur.generation === expected + 1 && cur.spec.clientRequestId === next.clientRequestId ? cur : undefined;
        },
      });
      this.#adopt(res);
      if (options.wait !== false) await this.#wait("ready", after, signal, options.timeoutMs, true);
      return this;
    });
  }

  /**
   * Waits until the sandbox is in `state`, by the event stream filtered to this sandbox (not by
   * polling), and returns it.
   * @throws {@link SandboxFailed} when it fails meanwhile; {@link InvalidState} when it settles in another
   * state it will not leave by itself; {@link GenerationConflict} when it is recreated meanwhile;
   * {@link WaitTimeout} past `timeoutMs`.
   */
  async waitForState(state: SandboxState, options: WaitOptions = {}): Promise<this> {
    return within(options, async (signal) => {
      await this.#wait(state, await this.client.startCursor(signal), signal, options.timeoutMs);
      return this;
    });
  }

  /**
   * Runs a command: `argv` is executed directly, never through a shell (use `["sh", "-c", "..."]` for
   * one). Never retried, since a command may not be safe to run twice.
   * @throws {@link InvalidState} when the sandbox is not ready, {@link GenerationConflict},
   * {@link ValidationError} for a bad request.
   */
  async run(argv: readonly string[], options: RunOptions = {}): Promise<CommandResult> {
    let cmd: readonly string[] = argv;
    let cwd = options.cwd;
    if (options.stdin !== undefined) {
      const path = `.sandboxd-stdin-${newRequestId().slice(4)}`;
      await this.files.write(path, options.stdin, { signal: options.signal });
      cmd = withStdin(argv, path, cwd);
      cwd = undefined;
    }
    const timeoutSeconds = options.timeoutSeconds;
    const body = await this.client.transport.call<CommandResultBody>({
      method: "POST",
      path: `${this.#path}/commands`,
      body: {
        expectedGeneration: this.generation,
        argv: cmd,
        cwd,
        env: options.env,
        timeoutSeconds,
        maxOutputBytes: options.maxOutputBytes,
      },
      signal: options.signal,
      timeoutMs:
        this.client.transport.config.requestTimeoutMs > 0
          ? (timeoutSeconds ?? 60) * 1000 + this.client.transport.config.requestTimeoutMs
          : 0,
    });
    return new CommandResult(argv, body);
  }

  /** Terminates the sandbox without waiting, unless it is terminated or gone already; `await using` calls it. */
  async [asyncDispose](): Promise<void> {
    if (this.#resource.state === "terminated") return;
    try {
      await this.terminate({ wait: false });
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  get #path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  #adopt(res: SandboxResource): void {
    if (res.id === this.id && res.generation >= this.#resource.generation) this.#resource = res;
  }

  async #action(action: "pause" | "resume" | "terminate", target: SandboxState, options: ActionOptions): Promise<this> {
    return within(options, async (signal) => {
      const after = options.wait === false ? 0 : await this.client.startCursor(signal);
      // Safe to retry: the action answers 200 with the sandbox when it is done or under way already.
      this.#adopt(
        await this.client.transport.call<SandboxResource>({
          method: "POST",
          path: `${this.#path}/actions/${action}`,
          body: { expectedGeneration: this.generation },
          retry: "safe",
          signal,
        }),
      );
      if (options.wait !== false) await this.#wait(target, after, signal, options.timeoutMs);
      return this;
    });
  }

  /**
   * Waits until the current generation is in target, following this sandbox's events after `after`
   * (a cursor at or below every event to come). On each connection it first reads the sandbox, so that
   * a change between `after` and the connection is not missed. After a create (`created`), when the
   * stream begins with the generation's `sandbox.created`, it holds the generation's whole history from
   * its start and its state changes are taken as they come; otherwise a change that may end the wait
   * is checked by reading the sandbox.
   */
  async #wait(
    target: SandboxState,
    after: number,
    signal: AbortSignal,
    timeoutMs: number | undefined,
    created = false,
  ): Promise<void> {
    const generation = this.generation;
    // settled: true when the wait is over, false to go on; throws when target cannot come by itself.
    const settled = (res: SandboxResource): boolean => {
      if (res.generation !== generation) {
        throw new GenerationConflict(
          `sandbox ${this.id} was recreated as generation ${res.generation} while waiting for ${target}`,
          { code: "generation_conflict", currentGeneration: res.generation },
        );
      }
      if (res.state === target) return true;
      if (res.state === "failed") throw new SandboxFailed(res);
      if (transitional.has(res.state)) return false;
      throw new InvalidState(`sandbox ${this.id} is ${res.state}, not ${target}`, { code: "invalid_state" });
    };
    let done = false;
    const check = async (): Promise<boolean> => {
      const res = await getResource(this.client, this.id, signal);
      this.#adopt(res);
      return (done = settled(res));
    };
    try {
      if (settled(this.#resource)) return;
      while (!done) {
        let whole = false;
        let seen = false;
        const stream = this.client.events({ after, sandbox: this.id, signal, onOpen: check });
        try {
          for await (const ev of stream) {
            if (ev.generation !== generation) {
              if (ev.generation > generation && (await check())) return;
              continue;
            }
            if (!seen) whole = created && ev.type === "sandbox.created";
            seen = true;
            if (ev.type !== "sandbox.state_changed") continue;
            const to = (ev.data as { to?: SandboxState }).to;
            if (to === undefined) continue;
            if (whole && to !== "failed") {
              this.#resource = { ...this.#resource, state: to, updatedAt: ev.timestamp };
              if (settled(this.#resource)) return;
            } else if ((to === target || !transitional.has(to)) && (await check())) {
              return;
            }
          }
          // The stream ends when the check on a new connection found the state, or at the signal.
          if (done) return;
          break;
        } catch (e) {
          if (!(e instanceof SandboxdError && e.code === "event_history_unavailable")) throw e;
          // The cursor fell out of the daemon's history: start again from the oldest it keeps; the
          // check on the new connection covers what was dropped.
          after = await this.client.startCursor(signal, true);
        } finally {
          await stream.close();
        }
      }
      if (done) return;
    } catch (e) {
      if (!signal.aborted) throw e;
    }
    throw timeoutOr(signal, this.#resource, target, timeoutMs);
  }
}

async function getResource(client: Client, id: string, signal?: AbortSignal): Promise<SandboxResource> {
  return client.transport.call<SandboxResource>({
    method: "GET",
    path: `/v1/sandboxes/${encodeURIComponent(id)}`,
    signal,
  });
}

const defaultTimeoutMs = 60_000;

/** Why the work of `within` was aborted: marks the timeout apart from the caller's own abort. */
class Deadline extends Error {}

/** Runs work with a signal that aborts at the caller's signal or after timeoutMs, whichever comes first. */
async function within<T>(
  options: { signal?: AbortSignal | undefined; timeoutMs?: number | undefined },
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const ms = options.timeoutMs ?? defaultTimeoutMs;
  const ctl = new AbortController();
  const parent = options.signal;
  const onAbort = () => ctl.abort(parent?.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  const timer = ms > 0 ? setTimeout(() => ctl.abort(new Deadline(`no result within ${ms} ms`)), ms) : undefined;
  try {
    return await work(ctl.signal);
  } catch (e) {
    if (ctl.signal.reason instanceof Deadline && (e === ctl.signal.reason || e instanceof Deadline)) {
      throw new WaitTimeout(`timed out after ${ms} ms`, { cause: e });
    }
    throw e;
  } finally {
    if (timer !== undefined) clearTimeout(timer);
    parent?.removeEventListener("abort", onAbort);
  }
}

/** The error a wait ends with when its signal aborted: a WaitTimeout naming the sandbox, or the caller's abort. */
function timeoutOr(
  signal: AbortSignal,
  sandbox: SandboxResource,
  target: SandboxState,
  ms: number | undefined,
): unknown {
  if (signal.reason instanceof Deadline) {
    return new WaitTimeout(
      `sandbox ${sandbox.id} is ${sandbox.state}, not ${target}, after ${ms ?? defaultTimeoutMs} ms`,
      { sandbox, cause: signal.reason },
    );
  }
  return signal.reason;
}

/** The wire spec of a create or recreate: its lifetime, volumes and network moved into its extensions. */
function specOf(spec: CreateSpec, clientRequestId: string): SandboxSpec {
  const { lifetime, volumes, network, ...rest } = spec;
  let extensions = withExtension(rest.extensions, LIFETIME_KEY, "lifetime", lifetime);
  extensions = withExtension(extensions, VOLUMES_KEY, "volumes", volumes);
  extensions = withExtension(extensions, NETWORK_KEY, "network", network);
  return extensions === undefined ? { ...rest, clientRequestId } : { ...rest, extensions, clientRequestId };
}

/** extensions with value under key, unless value is undefined; given both ways, it is refused. */
function withExtension(
  extensions: Record<string, unknown> | undefined,
  key: string,
  option: string,
  value: unknown,
): Record<string, unknown> | undefined {
  if (value === undefined) return extensions;
  if (extensions && key in extensions) {
    throw new ValidationError(`${option} given twice: as ${option} and as extensions["${key}"]`, {
      code: "invalid_request",
    });
  }
  return { ...extensions, [key]: value };
}
