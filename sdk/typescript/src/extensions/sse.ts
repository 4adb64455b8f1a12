// One connection of a Server-Sent Events stream of api/extensions.yaml, as the streams of the groups
// read it: the answer's type checked, each event handed to the group's decoder, a silence past the
// heartbeat bound or a broken connection a ConnectionError, and the stream's end event the end.

import { createParser } from "eventsource-parser";
import { ConnectionError, SandboxdError } from "../errors.js";
import type { components } from "../generated/extensions.js";
import type { RequestOptions } from "../transport.js";

/**
 * A heartbeat event of a process's output stream or a watch: the daemon sends one saying `paused` as
 * the sandbox pauses and every heartbeat interval (15 s) after, and one saying `running` after the
 * resume, from which the stream goes on where it was; `offset` (an output stream's) is where its output
 * goes on. A running stream's heartbeats are comments, which make no event.
 */
export type StreamHeartbeat = components["schemas"]["StreamHeartbeatEvent"];

/** What a stream's heartbeat says of its sandbox: `paused`, or `running` again. */
export type StreamState = StreamHeartbeat["state"];

/**
 * The heartbeat the data of a heartbeat event says, or undefined when it says none (not JSON, not an
 * object, a state this client does not know, an offset that is not a count of bytes). @hidden
 */
export function parseHeartbeat(data: string): StreamHeartbeat | undefined {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
  const { state, offset } = v as Record<string, unknown>;
  if (state !== "running" && state !== "paused") return undefined;
  if (offset === undefined) return { state };
  if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset < 0) return undefined;
  return { state, offset };
}

/** @hidden */
export interface Connection<T> {
  open: (request: RequestOptions) => Promise<Response>;
  /** The request, without its signal. */
  request: Omit<RequestOptions, "signal">;
  /** Closing it closes the connection; the iteration then ends without an error. */
  stop: AbortSignal;
  /** How long the connection may stay silent; 0 for no bound. */
  silentMs: number;
  /** The stream's name in errors. */
  what: string;
  /** Decodes one event into queue, or throws the SandboxdError of one that is not what it should be. */
  take: (event: string | undefined, data: string, queue: T[]) => void;
  /** Whether the end event came. */
  ended: () => boolean;
  /**
   * Reads a 2xx answer that is JSON, not a stream (a daemon that streams nothing), which must end the
   * stream; without it such an answer is an `unexpected_response`.
   */
  json?: ((resp: Response) => Promise<void>) | undefined;
}

/** The items of one connection, until its end event; a ConnectionError when it ends otherwise. @hidden */
export async function* connection<T>(c: Connection<T>): AsyncGenerator<T, undefined, undefined> {
  const { stop, silentMs, what } = c;
  if (stop.aborted) return;
  const conn = new AbortController();
  const onStop = () => conn.abort();
  stop.addEventListener("abort", onStop, { once: true });
  try {
    let resp: Response;
    try {
      resp = await c.open({ ...c.request, headers: { Accept: "text/event-stream" }, signal: conn.signal });
    } catch (e) {
      if (stop.aborted) return;
      throw e;
    }
    const type = resp.headers.get("Content-Type") ?? "";
    if (c.json && type.startsWith("application/json")) {
      await c.json(resp);
      return;
    }
    if (!type.startsWith("text/event-stream") || !resp.body) {
      await resp.body?.cancel().catch(() => {});
      throw new SandboxdError(`${what} answered as ${JSON.stringify(type)}`, {
        code: "unexpected_response",
        status: resp.status,
      });
    }
    const queue: T[] = [];
    let garbled: SandboxdError | undefined;
    const parser = createParser({
      onEvent: (msg) => {
        try {
          c.take(msg.event, msg.data, queue);
        } catch (e) {
          garbled ??= e as SandboxdError;
        }
      },
    });
    const decoder = new TextDecoder();
    const reader = resp.body.getReader();
    let timedOut = false;
    try {
      for (;;) {
        const timer =
          silentMs > 0
            ? setTimeout(() => {
                timedOut = true;
                conn.abort();
              }, silentMs)
            : undefined;
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } finally {
          if (timer !== undefined) clearTimeout(timer);
        }
        if (chunk.done) break;
        parser.feed(decoder.decode(chunk.value, { stream: true }));
        if (garbled) throw garbled;
        while (queue.length > 0) yield queue.shift()!;
        if (c.ended()) return;
      }
    } catch (e) {
      if (e === garbled) throw e;
      if (stop.aborted) return;
      const why = timedOut ? `nothing, not even a heartbeat, within ${silentMs} ms` : "the connection broke";
      throw new ConnectionError(`${what}: ${why}`, { cause: e });
    } finally {
      reader.cancel().catch(() => {});
    }
    if (!c.ended()) throw new ConnectionError(`${what}: the stream ended without its end event`, {});
  } finally {
    stop.removeEventListener("abort", onStop);
    conn.abort();
  }
}
