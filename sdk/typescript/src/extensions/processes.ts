// The group "processes" of api/extensions.yaml: background processes in a ready sandbox
// (/v1/sandboxes/{sandboxId}/processes), their stdin, signals and the Server-Sent Events stream of their
// output (Sandbox.startProcess and the methods beside it, Sandbox.processOutput).

import { decodeBase64 } from "../base64.js";
import { ConnectionError, SandboxdError } from "../errors.js";
import type { components } from "../generated/extensions.js";
import type { RequestOptions } from "../transport.js";
import { connection, parseHeartbeat, type StreamHeartbeat } from "./sse.js";

/**
 * A background process: `exitCode` is null while it runs and 128+n when signal n killed it; its output
 * is kept from `outputOldest` to `outputEnd` (byte offsets from its first byte).
 */
export type Process = components["schemas"]["Process"];

/**
 * What {@link Sandbox.startProcess} starts: `argv` (executed directly), in `cwd` (relative to the
 * working directory), with `env` on top of the sandbox's; `stdin` is written to its stdin first (at
 * most 1 MiB), which `closeStdin` then closes; `tag` is the client's name for it, returned as is.
 */
export interface ProcessStart {
  argv: string[];
  cwd?: string | undefined;
  env?: Record<string, string> | undefined;
  stdin?: string | Uint8Array | undefined;
  closeStdin?: boolean | undefined;
  tag?: string | undefined;
  /**
   * Run it on a pseudo-terminal of this size (needs interactiveTerminal): its output is the terminal's,
   * its stdin the terminal's keys ({@link Sandbox.resizeProcess}, {@link Sandbox.terminalUrl}).
   */
  pty?: TerminalSize | undefined;
}

/** The size of a process's pseudo-terminal, in character cells (each 1..65535). */
export type TerminalSize = components["schemas"]["TerminalSize"];

/** Who a terminal attach is ({@link Sandbox.terminalUrl}). */
export interface TerminalOptions {
  /** The output offset to start from: 0 (the default) replays what the sandbox kept. */
  after?: number | undefined;
  /** `control` (the default) may write and takes control; `watch` only reads. */
  mode?: "control" | "watch" | undefined;
}

/** The signals a process's group may be sent ({@link Sandbox.signalProcess}). */
export type ProcessSignal = "HUP" | "INT" | "QUIT" | "KILL" | "USR1" | "USR2" | "TERM" | "CONT" | "STOP" | "WINCH";

/** Bytes of a process's output (stdout and stderr combined) from `offset`. */
export interface OutputChunk {
  offset: number;
  data: Uint8Array;
}

/** The bytes from `from` to `to` were no longer kept when asked for; the output went on at `to`. */
export type OutputDropped = components["schemas"]["ProcessDroppedEvent"];

/**
 * Why an output stream ended: `reason` is `exited` (every byte was read; `exitCode` is the process's),
 * `paused`, `terminated`, `recreated`, `agent_unavailable`, `daemon_stopping` or `error`; `offset` is
 * where a new stream would resume.
 */
export type ProcessEnd = components["schemas"]["ProcessEndEvent"];

// Symbol.asyncDispose where the runtime has it; elsewhere the registered symbol that polyfills use.
const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** How {@link Sandbox.processOutput} reads. */
export interface ProcessOutputOptions {
  /** The byte offset to start from. Default 0, the first byte. */
  after?: number | undefined;
  /** Ends the iteration (without an error) when aborted. */
  signal?: AbortSignal | undefined;
  /**
   * How long a connection may stay silent (no output, no heartbeat) before it is taken for dead and a
   * new one is opened from the offset reached. Default 45 s, three of the daemon's 15 s heartbeats.
   */
  heartbeatTimeoutMs?: number | undefined;
  /** How long the daemon may take to answer. Default: the client's `requestTimeoutMs`. */
  connectTimeoutMs?: number | undefined;
  /**
   * Called with each heartbeat event: `paused` as the sandbox pauses and every heartbeat interval
   * after, `running` once after the resume (see {@link ProcessOutputStream.paused}). What it throws
   * ends the stream with that error.
   */
  onHeartbeat?: ((beat: StreamHeartbeat) => void) | undefined;
}

/** What a {@link ProcessOutputStream} needs of its sandbox. @hidden */
export interface OutputSource {
  open(request: RequestOptions): Promise<Response>;
  path: string;
  generation: number;
  /** Connections in a row that may fail without giving anything. */
  attempts: number;
  backoff(attempt: number): number;
}

/** End reasons after which the stream opens again from its offset by itself (the client fell behind). */
const resumed = new Set(["slow_client"]);

/**
 * A background process's output, as an async iterator of {@link OutputChunk}: the bytes from the
 * offset asked for, each chunk where the last one ended. A connection that breaks, or stays silent
 * for `heartbeatTimeoutMs`, is opened again from the offset reached, so nothing the sandbox kept is
 * lost or given twice; a {@link ConnectionError} is thrown once the client's retry attempts in a row
 * gave nothing. It ends with the stream's end event, in {@link ProcessOutputStream.end}. Bytes no
 * longer kept are skipped and listed in {@link ProcessOutputStream.dropped}. The daemon's refusal of
 * the stream (404, 409, 422) is thrown by the first `next`. A pause of the sandbox holds the stream on
 * its connection, without a reconnect: {@link ProcessOutputStream.paused} says so (and
 * `onHeartbeat` hears each heartbeat), and after the resume the output goes on where it was, every byte
 * once; a terminate or recreate during the pause ends it with its end event. Breaking out of a
 * `for await` loop, {@link ProcessOutputStream.close} or the `signal` closes it.
 *
 * ```ts
 * const p = await sb.startProcess({ argv: ["make", "test"] });
 * for await (const chunk of sb.processOutput(p.pid)) console.log(new TextDecoder().decode(chunk.data));
 * ```
 */
export class ProcessOutputStream implements AsyncIterableIterator<OutputChunk> {
  readonly #src: OutputSource;
  readonly #opts: ProcessOutputOptions;
  readonly #stop = new AbortController();
  readonly #chunks: AsyncGenerator<OutputChunk, undefined, undefined>;
  readonly #dropped: OutputDropped[] = [];
  #offset: number;
  #end: ProcessEnd | undefined;
  #paused = false;

  /** Made by {@link Sandbox.processOutput}. @hidden */
  constructor(src: OutputSource, opts: ProcessOutputOptions = {}) {
    this.#src = src;
    this.#opts = opts;
    this.#offset = opts.after ?? 0;
    const signal = opts.signal;
    if (signal?.aborted) this.#stop.abort();
    else signal?.addEventListener("abort", () => this.#stop.abort(), { once: true });
    this.#chunks = this.#run();
  }

  /** Why the stream ended, once it has; undefined before, and when it was closed by this side. */
  get end(): ProcessEnd | undefined {
    return this.#end;
  }

  /** The offset past the last byte given: where a new stream would resume. */
  get offset(): number {
    return this.#offset;
  }

  /** The ranges of output skipped because they were no longer kept. */
  get dropped(): readonly OutputDropped[] {
    return this.#dropped;
  }

  /**
   * Whether the stream's last heartbeat said the sandbox is paused: a pending `next` waits for the
   * resume on the same connection. False again with the resume's heartbeat, the next output, or the end.
   */
  get paused(): boolean {
    return this.#paused;
  }

  /** The next chunk. */
  next(): Promise<IteratorResult<OutputChunk, undefined>> {
    return this.#chunks.next();
  }

  /** Every byte from here to the end, joined. */
  async readAll(): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    for await (const c of this) parts.push(c.data);
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  /** Closes the stream; called by `break` in a `for await` loop. */
  async return(): Promise<IteratorResult<OutputChunk, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /** Closes the connection; a pending {@link ProcessOutputStream.next} ends with `done`. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#chunks.return(undefined);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Closes the stream; `await using` calls it. */
  async [asyncDispose](): Promise<void> {
    await this.close();
  }

  async *#run(): AsyncGenerator<OutputChunk, undefined, undefined> {
    let failures = 0;
    for (;;) {
      if (this.#stop.signal.aborted) return;
      let progressed = false;
      try {
        for await (const c of this.#connection()) {
          progressed = true;
          yield c;
        }
        if (this.#end === undefined) return; // closed by this side
        if (!resumed.has(this.#end.reason)) return;
        this.#end = undefined;
        failures = 0;
        continue;
      } catch (e) {
        if (!(e instanceof ConnectionError)) throw e;
        if (this.#stop.signal.aborted) return;
        if (progressed) failures = 0;
        failures++;
        if (failures >= Math.max(1, this.#src.attempts)) throw e;
        await new Promise((r) => setTimeout(r, this.#src.backoff(failures)));
      }
    }
  }

  /** One connection from the offset reached: its chunks, until its end event or a ConnectionError. */
  #connection(): AsyncGenerator<OutputChunk, undefined, undefined> {
    return connection<OutputChunk>({
      open: this.#src.open,
      request: {
        method: "GET",
        path: this.#src.path,
        query: { expectedGeneration: this.#src.generation, after: this.#offset },
        timeoutMs: this.#opts.connectTimeoutMs,
      },
      stop: this.#stop.signal,
      silentMs: this.#opts.heartbeatTimeoutMs ?? 45_000,
      what: "process output",
      take: (event, data, queue) => this.#take(event, data, queue),
      ended: () => this.#end !== undefined,
    });
  }

  #take(event: string | undefined, data: string, queue: OutputChunk[]): void {
    if (event === "heartbeat") {
      const beat = parseHeartbeat(data);
      if (beat === undefined) return; // one that says nothing this client knows: the stream goes on
      this.#paused = beat.state === "paused";
      this.#opts.onHeartbeat?.(beat);
      return;
    }
    if (event !== "output" && event !== "dropped" && event !== "end") return; // an event this client does not know
    let o: Record<string, unknown> | undefined;
    try {
      o = JSON.parse(data) as Record<string, unknown>;
    } catch {
      o = undefined;
    }
    const int = (k: string) => typeof o?.[k] === "number" && Number.isInteger(o[k]);
    const ok =
      typeof o === "object" &&
      o !== null &&
      (event === "output"
        ? int("offset") && typeof o["dataBase64"] === "string"
        : event === "dropped"
          ? int("from") && int("to")
          : typeof o["reason"] === "string" && int("offset"));
    if (!ok) {
      throw new SandboxdError(`process output sent a ${event} that is not one: ${data.slice(0, 200)}`, {
        code: "unexpected_response",
      });
    }
    if (event === "end") {
      this.#paused = false;
      this.#end = o as ProcessEnd;
      this.#offset = Math.max(this.#offset, this.#end.offset);
      return;
    }
    if (event === "dropped") {
      const d = o as OutputDropped;
      this.#dropped.push(d);
      this.#offset = Math.max(this.#offset, d.to);
      return;
    }
    const offset = o!["offset"] as number;
    let bytes = decodeBase64(o!["dataBase64"] as string);
    if (offset + bytes.length <= this.#offset) return; // a repeat, after a reconnect, of bytes already given
    if (offset < this.#offset) bytes = bytes.subarray(this.#offset - offset);
    const c = { offset: Math.max(offset, this.#offset), data: bytes };
    this.#offset = c.offset + bytes.length;
    this.#paused = false;
    queue.push(c);
  }
}
