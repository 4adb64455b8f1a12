// Following the event log: GET /v1/events/stream as an async iterator that reconnects by itself.

import { createParser } from "eventsource-parser";
import { ConnectionError, SandboxdError } from "./errors.js";
import type { Client } from "./client.js";
import { sleep } from "./transport.js";
import type { SandboxEvent } from "./types.js";

// Symbol.asyncDispose where the runtime has it; elsewhere the registered symbol that polyfills use.
const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** What {@link Client.events} follows. */
export interface EventsOptions {
  /** Only events with a cursor above this one. Default 0: every event the daemon still keeps. */
  after?: number | undefined;
  /** Only this sandbox's events (its id, or a {@link Sandbox}). */
  sandbox?: string | { readonly id: string } | undefined;
  /** Ends the iteration (without an error) when aborted. */
  signal?: AbortSignal | undefined;
  /**
   * How long the stream may stay silent before the connection is taken for dead and made anew. The
   * daemon sends a heartbeat every 15 s, so the default, 45 s, is three missed heartbeats.
   */
  heartbeatTimeoutMs?: number | undefined;
  /** How long a connection may take to be answered. Default: the client's `requestTimeoutMs`. */
  connectTimeoutMs?: number | undefined;
  /**
   * How many reconnects in a row may fail (no answer, or an answer that ends before an event or a
   * heartbeat) before the iteration throws a {@link ConnectionError}. Default 10.
   */
  maxReconnects?: number | undefined;
  /**
   * Called each time a connection is open, before its first event is read; when it resolves true, the
   * iteration ends there.
   * @internal
   */
  onOpen?: (() => Promise<boolean>) | undefined;
}

/**
 * The daemon's event log from a cursor on: first the events it keeps, then new ones as they happen, in
 * cursor order, each once. When the connection drops, is silent for longer than
 * `heartbeatTimeoutMs`, or the daemon ends it, the stream connects again with `Last-Event-ID` set to the
 * last cursor it handed out, so nothing is lost or repeated.
 *
 * It throws {@link EventHistoryUnavailable} when the cursor is older than the history the daemon keeps
 * (then or after a reconnect), another {@link SandboxdError} when the daemon refuses the stream (400,
 * 401), and {@link ConnectionError} when it cannot reconnect. Breaking out of a `for await` loop,
 * {@link EventStream.close}, or the `signal` closes the connection.
 *
 * ```ts
 * for await (const ev of client.events({ after: 0, sandbox: sb })) {
 *   console.log(ev.cursor, ev.type, ev.data);
 * }
 * ```
 */
export class EventStream implements AsyncIterableIterator<SandboxEvent> {
  readonly #client: Client;
  readonly #opts: EventsOptions;
  readonly #stop = new AbortController();
  readonly #events: AsyncGenerator<SandboxEvent, undefined, undefined>;
  #cursor: number;

  /** Made by {@link Client.events}. @hidden */
  constructor(client: Client, opts: EventsOptions = {}) {
    this.#client = client;
    this.#opts = opts;
    this.#cursor = opts.after ?? 0;
    const signal = opts.signal;
    if (signal?.aborted) this.#stop.abort();
    else signal?.addEventListener("abort", () => this.#stop.abort(), { once: true });
    this.#events = this.#run();
  }

  /** The cursor of the last event handed out (or `after`): where a later stream resumes. */
  get cursor(): number {
    return this.#cursor;
  }

  /** The next event. */
  next(): Promise<IteratorResult<SandboxEvent, undefined>> {
    return this.#events.next();
  }

  /** Closes the stream; called by `break` in a `for await` loop. */
  async return(): Promise<IteratorResult<SandboxEvent, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /** Closes the connection; a pending {@link EventStream.next} ends with `done`. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#events.return(undefined);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Closes the stream; `await using` calls it. */
  async [asyncDispose](): Promise<void> {
    await this.close();
  }

  async *#run(): AsyncGenerator<SandboxEvent, undefined, undefined> {
    const stop = this.#stop.signal;
    const sandboxId = typeof this.#opts.sandbox === "string" ? this.#opts.sandbox : this.#opts.sandbox?.id;
    const heartbeatMs = this.#opts.heartbeatTimeoutMs ?? 45_000;
    const maxReconnects = this.#opts.maxReconnects ?? 10;
    let failures = 0;
    let resumed = false;
    while (!stop.aborted) {
      if (failures > 0) {
        if (failures > maxReconnects) {
          throw new ConnectionError(`event stream: ${failures} connections in a row failed`, {});
        }
        try {
          await sleep(this.#client.transport.backoff(failures), stop);
        } catch {
          return;
        }
      }
      // conn is this connection: closing the stream or its going silent aborts it.
      const conn = new AbortController();
      const onStop = () => conn.abort();
      stop.addEventListener("abort", onStop, { once: true });
      let healthy = false;
      try {
        let resp: Response;
        try {
          resp = await this.#client.transport.open({
            method: "GET",
            path: "/v1/events/stream",
            query: { after: this.#cursor, sandboxId },
            headers: resumed
              ? { Accept: "text/event-stream", "Last-Event-ID": String(this.#cursor) }
              : { Accept: "text/event-stream" },
            signal: conn.signal,
            timeoutMs: this.#opts.connectTimeoutMs,
          });
        } catch (e) {
          if (stop.aborted) return;
          // The daemon's refusals (410, 400, 401) stand; a failing or unreachable daemon is retried.
          if (e instanceof SandboxdError && e.status !== undefined && e.status < 500) throw e;
          if (!(e instanceof SandboxdError)) throw e;
          continue;
        } finally {
          resumed = true;
        }
        const type = resp.headers.get("Content-Type") ?? "";
        if (!type.startsWith("text/event-stream")) {
          await resp.body?.cancel().catch(() => {});
          throw new SandboxdError(`event stream answered as ${JSON.stringify(type)}`, {
            code: "unexpected_response",
            status: resp.status,
          });
        }
        if (this.#opts.onOpen && (await this.#opts.onOpen())) return;
        if (!resp.body) continue;

        const queue: SandboxEvent[] = [];
        let garbled: SandboxdError | undefined;
        let comments = 0;
        const parser = createParser({
          onEvent: (msg) => {
            try {
              queue.push(parseEvent(msg.data));
            } catch (e) {
              garbled ??= e as SandboxdError;
            }
          },
          onComment: () => {
            // The first comment is the stream's greeting; a later one, a heartbeat, shows the
            // connection lives.
            if (++comments > 1) healthy = true;
          },
        });
        const decoder = new TextDecoder();
        const reader = resp.body.getReader();
        try {
          for (;;) {
            const chunk = await readWithin(reader, heartbeatMs, conn);
            if (chunk === undefined) break;
            parser.feed(decoder.decode(chunk, { stream: true }));
            if (garbled) throw garbled;
            while (queue.length > 0) {
              const ev = queue.shift()!;
              if (ev.cursor <= this.#cursor) continue;
              this.#cursor = ev.cursor;
              this.#client.noteCursor(ev.cursor);
              healthy = true;
              yield ev;
            }
          }
        } catch (e) {
          if (e === garbled) throw e;
          if (stop.aborted) return;
          // A dropped or silent connection: reconnect below.
        } finally {
          reader.cancel().catch(() => {});
        }
      } finally {
        stop.removeEventListener("abort", onStop);
        conn.abort();
        failures = healthy ? 0 : failures + 1;
      }
      // The daemon ended the stream, or the connection broke: resume from the cursor.
    }
  }
}

/** Reads the next chunk, or aborts conn when none comes within ms. Undefined at the end of the body. */
async function readWithin(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  ms: number,
  conn: AbortController,
): Promise<Uint8Array | undefined> {
  const timer = ms > 0 ? setTimeout(() => conn.abort(), ms) : undefined;
  try {
    const { done, value } = await reader.read();
    return done ? undefined : value;
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

/** Parses one event's data; anything that is not an event is an `unexpected_response`. @internal */
export function parseEvent(data: string): SandboxEvent {
  let ev: unknown;
  try {
    ev = JSON.parse(data);
  } catch {
    ev = undefined;
  }
  const e = ev as Partial<SandboxEvent> | undefined;
  if (
    typeof e !== "object" ||
    e === null ||
    typeof e.cursor !== "number" ||
    typeof e.type !== "string" ||
    typeof e.sandboxId !== "string" ||
    typeof e.generation !== "number"
  ) {
    throw new SandboxdError(`event stream sent something that is not an event: ${data.slice(0, 200)}`, {
      code: "unexpected_response",
    });
  }
  return e as SandboxEvent;
}
