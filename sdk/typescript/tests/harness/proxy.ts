// A loopback proxy in front of the daemon that injects network faults on request: it drops an answer
// after the daemon handled the request, rewrites an answer, or cuts or stalls an event stream. Everything
// else passes through untouched, and every request is logged.

import http from "node:http";
import type { AddressInfo } from "node:net";

/** One request the proxy saw. */
export interface Seen {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** What to do with the requests a rule matches. */
export type Fault =
  /** Pass the request on, read the daemon's whole answer, then close the client's connection unanswered. */
  | { kind: "drop" }
  /** Pass the answer on with its JSON body changed by edit. */
  | { kind: "rewrite"; edit: (body: unknown, status: number) => { body: unknown; status?: number } }
  /** Pass an event stream on for `events` events, then close the connection. */
  | { kind: "cut"; events: number }
  /** Pass an event stream on for `events` events, then pass nothing more, leaving the connection open. */
  | { kind: "stall"; events: number };

interface Rule {
  match: (req: Seen) => boolean;
  fault: Fault;
  times: number;
}

/** The proxy. */
export class FaultProxy {
  readonly url: string;
  readonly seen: Seen[] = [];
  readonly #server: http.Server;
  readonly #rules: Rule[] = [];
  readonly #upstream: URL;
  readonly #agent = new http.Agent({ keepAlive: true });

  private constructor(server: http.Server, upstream: string) {
    this.#server = server;
    this.#upstream = new URL(upstream);
    const { port } = server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
  }

  /** Starts a proxy of the daemon at upstream. */
  static async start(upstream: string): Promise<FaultProxy> {
    const server = http.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const proxy = new FaultProxy(server, upstream);
    server.on("request", (req, res) => proxy.#handle(req, res));
    return proxy;
  }

  /** Applies fault to the next `times` requests that match. */
  inject(match: (req: Seen) => boolean, fault: Fault, times = 1): void {
    this.#rules.push({ match, fault, times });
  }

  /** Drops the rules not used up. */
  clear(): void {
    this.#rules.length = 0;
  }

  /** How many requests matched. */
  count(match: (req: Seen) => boolean): number {
    return this.seen.filter(match).length;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#agent.destroy();
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const seen: Seen = {
        method: req.method ?? "GET",
        path: req.url ?? "/",
        headers: req.headers,
        body: body.toString(),
      };
      this.seen.push(seen);
      const rule = this.#rules.find((r) => r.times > 0 && r.match(seen));
      if (rule) rule.times--;
      const headers = { ...req.headers, host: this.#upstream.host };
      const up = http.request(
        {
          host: this.#upstream.hostname,
          port: this.#upstream.port,
          method: req.method,
          path: req.url,
          headers,
          agent: this.#agent,
        },
        (upRes) => this.#answer(req, res, upRes, rule?.fault),
      );
      up.on("error", () => res.destroy());
      res.on("close", () => up.destroy());
      up.end(body);
    });
  }

  #answer(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    upRes: http.IncomingMessage,
    fault: Fault | undefined,
  ): void {
    switch (fault?.kind) {
      case undefined:
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        upRes.pipe(res);
        return;
      case "drop":
        upRes.resume();
        upRes.on("end", () => req.socket.destroy());
        return;
      case "rewrite": {
        const chunks: Buffer[] = [];
        upRes.on("data", (c: Buffer) => chunks.push(c));
        upRes.on("end", () => {
          const out = fault.edit(JSON.parse(Buffer.concat(chunks).toString()), upRes.statusCode ?? 502);
          const text = JSON.stringify(out.body);
          res.writeHead(out.status ?? upRes.statusCode ?? 502, {
            ...upRes.headers,
            "content-length": Buffer.byteLength(text),
          });
          res.end(text);
        });
        return;
      }
      case "cut":
      case "stall": {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        let pending = "";
        let events = 0;
        let stopped = false;
        upRes.on("data", (c: Buffer) => {
          if (stopped) return;
          pending += c.toString();
          // Pass whole messages on, counting those that carry an event.
          let end: number;
          while (!stopped && (end = pending.indexOf("\n\n")) >= 0) {
            const msg = pending.slice(0, end + 2);
            pending = pending.slice(end + 2);
            res.write(msg);
            if (msg.includes("\nid: ") || msg.startsWith("id: ")) events++;
            if (events >= fault.events) {
              stopped = true;
              if (fault.kind === "cut") {
                // A FIN once what was written is sent: the client reads the events, then the stream
                // breaks off in the middle of its chunked body.
                req.socket.end();
                upRes.destroy();
              }
            }
          }
        });
        upRes.on("end", () => {
          if (!stopped) res.end();
        });
        return;
      }
    }
  }
}
