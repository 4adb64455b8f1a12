/// <reference types="node" />
/**
 * Port forwarding for Node (`@sandboxd/sdk/node`): a raw TCP connection to a port inside a sandbox as a
 * Node `Duplex` ({@link dialPort}), and a local listener that relays each connection it accepts to such
 * a port ({@link forwardPort}), as `sbx port-forward` does. Each connection is one WebSocket
 * (`GET /v1/sandboxes/{sandboxId}/ports/{port}/tcp`, subprotocol `sandboxd.tcp`, capability
 * portForwarding) whose binary messages carry its bytes both ways.
 *
 * This entry point is the package's only code that uses Node's own API (sockets and streams) and the
 * `ws` package (Node 20 has no WebSocket client, and a WHATWG WebSocket cannot send the bearer token's
 * header); the main entry point stays free of both, for browsers, Deno and Bun.
 *
 * ```ts
 * import { Client } from "@sandboxd/sdk";
 * import { forwardPort } from "@sandboxd/sdk/node";
 *
 * const client = new Client();
 * await using fwd = await forwardPort(client, "sbx_...", 8000);
 * console.log(await (await fetch(`http://127.0.0.1:${fwd.port}/`)).text());
 * ```
 *
 * @module
 */

import { createServer, type AddressInfo, type Socket } from "node:net";
import { Duplex } from "node:stream";
import WebSocket from "ws";
import type { Client } from "./client.js";
import { ConnectionError, SandboxdError, errorFromResponse } from "./errors.js";
// For the links of the comments.
import type { InvalidState, NotFound, PortUnreachable, UnsupportedCapability, ValidationError } from "./errors.js";
import { parsePort } from "./extensions/ports.js";

const subprotocol = "sandboxd.tcp";
/** The largest message sent: the daemon reads up to 1 MiB a message, and sends 256 KiB ones. */
const frameBytes = 256 << 10;
/** The largest message taken from the daemon. */
const maxMessageBytes = 1 << 20;

// Symbol.asyncDispose where the runtime has it; elsewhere the registered symbol that polyfills use.
const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** How {@link dialPort} connects. */
export interface DialOptions {
  /** Aborts the dial (not the connection, which `destroy()` ends). */
  signal?: AbortSignal | undefined;
  /** How long the dial may take, the daemon's connect to the port included. Default: the client's `requestTimeoutMs`. */
  timeoutMs?: number | undefined;
}

/**
 * Opens a TCP connection to 127.0.0.1:`port` inside the sandbox and resolves with it as a `Duplex` of
 * its bytes, once the daemon has connected to the port. Reading follows the connection's pace (the
 * socket is paused while what was read is not taken); a write resolves its callback once sent.
 *
 * The protocol carries no half-close: `end()` sends what was written and leaves the connection open
 * for reading; the readable side ends when the sandbox's side closes the connection, and `destroy()`
 * closes it from this side (its `close` event comes once the WebSocket is closed). A connection the
 * daemon ends otherwise (the port failed, the daemon stops, the sandbox went away) ends the stream
 * with a {@link ConnectionError}.
 *
 * ```ts
 * const conn = await dialPort(client, sb, 6379);
 * conn.write("PING\r\n");
 * conn.once("data", (b) => console.log(b.toString())); // +PONG
 * ```
 * @param sandbox the sandbox, or its id
 * @throws RangeError for a port that is not 1-65535 in plain decimal; and, rejected with, a
 * {@link PortUnreachable} (nothing listens on the port), {@link NotFound}, {@link InvalidState} (the
 * sandbox is not ready), {@link UnsupportedCapability} (no portForwarding, such as `host`),
 * {@link ValidationError}, or a {@link ConnectionError} (no answer, or an answer that is no
 * `sandboxd.tcp` WebSocket)
 */
export function dialPort(
  client: Client,
  sandbox: string | { readonly id: string },
  port: number | string,
  options: DialOptions = {},
): Promise<Duplex> {
  const id = typeof sandbox === "string" ? sandbox : sandbox.id;
  const p = parsePort(port);
  const what = `port ${p} of ${id}`;
  const config = client.transport.config;
  const url = new URL(`${config.url}/v1/sandboxes/${encodeURIComponent(id)}/ports/${p}/tcp`);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const headers: Record<string, string> = { ...config.headers };
  if (config.token) headers["Authorization"] = `Bearer ${config.token}`;
  const timeoutMs = options.timeoutMs ?? config.requestTimeoutMs;
  const signal = options.signal;
  return new Promise<Duplex>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const ws = new WebSocket(url, [subprotocol], {
      headers,
      perMessageDeflate: false,
      maxPayload: maxMessageBytes,
      followRedirects: false,
      ...(timeoutMs > 0 ? { handshakeTimeout: timeoutMs } : {}),
    });
    let settled = false;
    const settle = (err: unknown, conn?: Duplex) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      ws.off("error", onError);
      if (conn) return resolve(conn);
      ws.on("error", () => {}); // what the end of the handshake still reports
      ws.terminate();
      reject(err);
    };
    const onAbort = () => settle(signal?.reason);
    const onError = (e: Error) => settle(new ConnectionError(`${what}: ${e.message}`, { cause: e }));
    signal?.addEventListener("abort", onAbort, { once: true });
    ws.on("error", onError);
    ws.on("unexpected-response", (_req, res) => {
      // The daemon's refusal: an ErrorResponse, read whole (it is small) into the class of its code.
      const parts: Buffer[] = [];
      let size = 0;
      res.on("data", (b: Buffer) => {
        if (size < 64 << 10) parts.push(b);
        size += b.length;
      });
      res.on("error", (e) => settle(new ConnectionError(`${what}: ${e.message}`, { cause: e })));
      res.on("end", () => settle(errorFromResponse(res.statusCode ?? 0, Buffer.concat(parts).toString("utf8"))));
    });
    ws.on("open", () => {
      if (ws.protocol !== subprotocol) {
        return settle(
          new SandboxdError(`${what}: the daemon answered with a WebSocket that is no ${subprotocol}`, {
            code: "unexpected_response",
          }),
        );
      }
      settle(undefined, new PortConnection(ws, what));
    });
  });
}

/** One connection of {@link dialPort}: a Duplex over its WebSocket. */
class PortConnection extends Duplex {
  readonly #ws: WebSocket;
  readonly #what: string;

  constructor(ws: WebSocket, what: string) {
    super({ allowHalfOpen: true, readableHighWaterMark: maxMessageBytes });
    this.#ws = ws;
    this.#what = what;
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (this.destroyed) return;
      if (!isBinary) {
        this.destroy(
          new SandboxdError(`${what}: a text message on a ${subprotocol} WebSocket`, { code: "unexpected_response" }),
        );
        return;
      }
      if (!this.push(data)) ws.pause();
    });
    ws.on("close", (code: number, reason: Buffer) => {
      if (this.destroyed) return;
      if (code === 1000) {
        this.push(null);
        return;
      }
      const why = reason.length > 0 ? `: ${reason.toString("utf8")}` : "";
      this.destroy(new ConnectionError(`${what}: the daemon closed the connection with ${code}${why}`, {}));
    });
    ws.on("error", (e: Error) => {
      if (!this.destroyed) this.destroy(new ConnectionError(`${what}: ${e.message}`, { cause: e }));
    });
  }

  override _read(): void {
    if (this.#ws.isPaused) this.#ws.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.#ws.readyState !== WebSocket.OPEN) {
      callback(new ConnectionError(`${this.#what}: the connection is closed`, {}));
      return;
    }
    // Messages of at most frameBytes, in order; the callback once the last is written to the socket.
    let at = 0;
    do {
      const piece = chunk.subarray(at, at + frameBytes);
      at += piece.length;
      const last = at >= chunk.length;
      this.#ws.send(piece, { binary: true }, (err) => {
        if (err) callback(new ConnectionError(`${this.#what}: ${err.message}`, { cause: err }));
        else if (last) callback();
      });
      if (!last && this.#ws.readyState !== WebSocket.OPEN) return; // the error comes through send's callback
    } while (at < chunk.length);
  }

  override _final(callback: (error?: Error | null) => void): void {
    callback(); // no half-close: the connection stays open for reading
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    const ws = this.#ws;
    if (ws.readyState === WebSocket.CLOSED) return callback(error);
    ws.once("close", () => callback(error));
    if (error || ws.readyState !== WebSocket.OPEN) return ws.terminate();
    // The daemon's close frame comes after what it sent meanwhile, which is read (and dropped) to reach it.
    ws.resume();
    ws.close(1000);
  }
}

/** How {@link forwardPort} listens. */
export interface ForwardOptions {
  /** The local port, 0 (the default) for a free one. */
  localPort?: number | string | undefined;
  /** The local address to listen on. Default `127.0.0.1`. */
  host?: string | undefined;
  /** Closes the forward when aborted. */
  signal?: AbortSignal | undefined;
  /**
   * Told why a connection could not be relayed, or broke: the {@link PortUnreachable} of a port
   * nothing listens on, say. The local connection is closed either way.
   */
  onError?: ((error: SandboxdError, local: Socket) => void) | undefined;
}

/** A local listener relaying to a sandbox's port ({@link forwardPort}). */
export interface PortForward {
  /** The local port it listens on. */
  readonly port: number;
  /** The local address it listens on. */
  readonly host: string;
  /** The connections it relays now. */
  readonly connections: number;
  /**
   * Stops listening and closes every connection it relays, both ends; resolves once their sockets and
   * WebSockets are closed.
   */
  close(): Promise<void>;
  /** {@link PortForward.close}; `await using` calls it. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Listens on a local TCP port (on 127.0.0.1 unless told otherwise) and relays each connection it
 * accepts to 127.0.0.1:`remotePort` inside the sandbox over a connection of its own
 * ({@link dialPort}), until {@link PortForward.close}. Each side's end is passed on to the other; as
 * the protocol carries no half-close, the sandbox's side sees its connection end only when the
 * local one closes whole.
 *
 * ```ts
 * await using fwd = await forwardPort(client, sb, 8000, { localPort: 8080 });
 * const page = await fetch(`http://127.0.0.1:${fwd.port}/`);
 * ```
 * @param sandbox the sandbox, or its id
 * @throws the listen's error (`EADDRINUSE`, say); RangeError for a port that is not 1-65535 in plain
 * decimal
 */
export async function forwardPort(
  client: Client,
  sandbox: string | { readonly id: string },
  remotePort: number | string,
  options: ForwardOptions = {},
): Promise<PortForward> {
  const remote = parsePort(remotePort);
  const local = options.localPort === undefined || options.localPort === 0 ? 0 : parsePort(options.localPort);
  const host = options.host ?? "127.0.0.1";
  const conns = new Set<{ local: Socket; dial: AbortController; closed: Promise<void> }>();
  let closing = false;
  const report = (e: unknown, sock: Socket) => {
    if (closing || !options.onError) return;
    const err = e instanceof SandboxdError ? e : new ConnectionError(String(e), { cause: e });
    options.onError(err, sock);
  };
  const server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (sock) => {
    sock.setNoDelay(true);
    const dial = new AbortController();
    let relayed: Duplex | undefined;
    const closed = Promise.all([
      new Promise<void>((r) => sock.once("close", () => r())),
      dialPort(client, sandbox, remote, { signal: dial.signal }).then(
        (conn) => {
          relayed = conn;
          const done = new Promise<void>((r) => conn.once("close", () => r()));
          if (sock.destroyed || closing) {
            conn.destroy();
            return done;
          }
          sock.pipe(conn);
          conn.pipe(sock);
          conn.on("error", (e) => {
            report(e, sock);
            sock.destroy();
          });
          conn.on("close", () => {
            if (!conn.readableEnded) sock.destroy();
          });
          return done;
        },
        (e: unknown) => {
          if (!dial.signal.aborted) report(e, sock);
          sock.destroy();
        },
      ),
    ]).then(() => {
      conns.delete(entry);
    });
    const entry = { local: sock, dial, closed };
    conns.add(entry);
    sock.on("error", () => {}); // a local peer's reset: the close below follows
    sock.once("close", () => {
      dial.abort();
      relayed?.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(local, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  let closedAll: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closedAll ??= (async () => {
      closing = true;
      options.signal?.removeEventListener("abort", onAbort);
      const listening = new Promise<void>((r) => server.close(() => r()));
      const all = [...conns];
      for (const c of all) {
        c.dial.abort();
        c.local.destroy();
      }
      await Promise.all([listening, ...all.map((c) => c.closed)]);
    })();
    return closedAll;
  };
  const onAbort = () => void close();
  if (options.signal?.aborted) await close();
  else options.signal?.addEventListener("abort", onAbort, { once: true });
  return {
    port: addr.port,
    host: addr.address,
    get connections() {
      return conns.size;
    },
    close,
    [asyncDispose]: close,
  };
}
