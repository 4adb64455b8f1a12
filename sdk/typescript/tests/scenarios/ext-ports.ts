// The group "ports" of api/extensions.yaml against a real daemon: Sandbox.portUrl and
// Sandbox.previewToken (a 422 on the host provider, whose 127.0.0.1 is not a sandbox's; a server in
// the sandbox reached through the proxy and a preview URL on oci), and the TCP relay of
// @sandboxd/sdk/node (dialPort, forwardPort) to provider/oci/testdata/portserver.py in a sandbox.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { connect } from "node:net";
import path from "node:path";
import type { Duplex } from "node:stream";
import { after, before, describe, it } from "node:test";
import {
  NotFound,
  PortUnreachable,
  Sandbox,
  SandboxdError,
  UnsupportedCapability,
  ValidationError,
  parsePort,
} from "@sandboxd/sdk";
import { dialPort, forwardPort } from "@sandboxd/sdk/node";
import type { Context } from "../harness/context.js";
import { provider, repoDir } from "../harness/daemon.js";

const waitFor = (port: number) => `import socket, time
for i in range(200):
    try:
        socket.create_connection(("127.0.0.1", ${port})).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    raise SystemExit(1)
`;
const wait = waitFor(8000);

export function extPorts(ctx: Context): void {
  describe("extensions: ports", () => {
    it("names ports canonically", () => {
      assert.equal(parsePort("8080"), 8080);
      for (const bad of ["02280", "+80", "0", "65536", "80 ", "", 0, 65536, 1.5])
        assert.throws(() => parsePort(bad), RangeError, String(bad));
    });

    it("proxies a port and mints preview tokens, or says the provider cannot", async () => {
      const sb = await Sandbox.create(ctx.client);
      try {
        assert.equal(sb.portUrl(8000), `${ctx.daemon.url}/v1/sandboxes/${sb.id}/ports/8000/`);
        const auth = { authorization: `Bearer ${ctx.daemon.token}` };
        if (ctx.daemon.provider === "host") {
          await assert.rejects(sb.previewToken(8000), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            return true;
          });
          assert.equal((await fetch(sb.portUrl(8000), { headers: auth })).status, 422);
          return;
        }
        await sb.files.write("/workspace/www/hello.txt", "hello");
        await sb.startProcess({
          argv: ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/www"],
        });
        await sb.run(["python3", "-c", wait]);
        const r = await fetch(sb.portUrl(8000) + "hello.txt", { headers: auth });
        assert.equal(r.status, 200);
        assert.equal(await r.text(), "hello");
        assert.equal((await fetch(sb.portUrl(8000) + "hello.txt")).status, 401);
        const tok = await sb.previewToken(8000, { ttlSeconds: 60 });
        assert.equal(tok.port, 8000);
        assert.equal(tok.generation, sb.generation);
        const base = tok.url.split("?")[0]!;
        const p = await fetch(base + "hello.txt", { headers: { "x-sandboxd-preview-token": tok.token } });
        assert.equal(p.status, 200);
        assert.equal(await p.text(), "hello");
        assert.equal((await fetch(base + "hello.txt")).status, 401);
        await assert.rejects(sb.previewToken(8000, { ttlSeconds: 0 }), ValidationError);
      } finally {
        await sb.terminate();
      }
    });
    it("says dialPort and forwardPort need a port of a sandbox that is there", async () => {
      await assert.rejects(dialPort(ctx.client, "sbx_nosuchsandbox", 8000), NotFound);
      assert.throws(() => dialPort(ctx.client, "sbx_nosuchsandbox", "080"), RangeError);
      await assert.rejects(forwardPort(ctx.client, "sbx_nosuchsandbox", 0), RangeError);
      if (provider !== "host") return;
      const sb = await Sandbox.create(ctx.client);
      try {
        await assert.rejects(dialPort(ctx.client, sb, 8000), (e: unknown) => {
          assert.ok(e instanceof UnsupportedCapability, String(e));
          assert.equal(e.status, 422);
          return true;
        });
      } finally {
        await sb.terminate();
      }
    });

    // The host provider cannot reach a sandbox's ports: the test above has its refusal.
    if (provider !== "host") relay(ctx);
  });
}

/** dialPort and forwardPort to portserver.py's http (8000) and zeros (8001) servers in one sandbox. */
function relay(ctx: Context): void {
  let sb: Sandbox;
  before(async () => {
    sb = await Sandbox.create(ctx.client);
    await sb.files.write(
      "/workspace/portserver.py",
      readFileSync(path.join(repoDir, "provider", "oci", "testdata", "portserver.py")),
    );
    await sb.startProcess({ argv: ["python3", "/workspace/portserver.py", "http", "8000"] });
    await sb.startProcess({ argv: ["python3", "/workspace/portserver.py", "zeros", "8001"] });
    for (const port of [8000, 8001]) {
      const r = await sb.run(["python3", "-c", waitFor(port)]);
      assert.equal(r.exitCode, 0, `port ${port} did not open: ${r.stderrText}`);
    }
  });
  after(async () => {
    await sb?.terminate();
  });

  it("dials a port as a Duplex: bytes both ways, the sandbox's end, a closed port's error", async () => {
    // Two HTTP requests on the one connection, then the zeros server's count and close.
    const http = await dialPort(ctx.client, sb, 8000);
    http.write("GET /rt0 HTTP/1.1\r\nHost: x\r\n\r\nGET /rt1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const answers = (await readAll(http)).toString("latin1");
    assert.match(answers, /^HTTP\/1\.[01] 200 [^]*hello from \/rt0HTTP\/1\.[01] 200 [^]*hello from \/rt1$/);
    http.end();
    await closed(http);

    const zeros = await dialPort(ctx.client, sb.id, 8001);
    zeros.end("3000000\n"); // ending the writable side leaves the connection open for reading
    const got = await readAll(zeros);
    assert.equal(got.length, 3_000_000);
    assert.ok(got.every((b) => b === 0x78));
    await closed(zeros);

    await assert.rejects(dialPort(ctx.client, sb, 8099), (e: unknown) => {
      assert.ok(e instanceof PortUnreachable, String(e));
      assert.equal(e.status, 502);
      assert.equal(e.code, "port_unreachable");
      return true;
    });
    const wrong = ctx.newClient({ token: "not-the-token" });
    await assert.rejects(dialPort(wrong, sb, 8000), (e: unknown) => e instanceof SandboxdError && e.status === 401);
  });

  it("reads a connection only as fast as it is read", async () => {
    const conn = await dialPort(ctx.client, sb, 8001);
    conn.write(`${256 << 20}\n`); // far more than is read
    await eventually(() => assert.ok(conn.readableLength >= conn.readableHighWaterMark, "nothing arrived"));
    await new Promise((r) => setTimeout(r, 500)); // room to overrun, were the socket not paused
    assert.ok(
      conn.readableLength <= conn.readableHighWaterMark + (2 << 20),
      `${conn.readableLength} bytes held unread`,
    );
    conn.destroy();
    await closed(conn);
  });

  it("forwards a local port: HTTP, 64 MiB each way, a closed port's error, and a close that leaves no socket", async () => {
    const daemonPort = Number(new URL(ctx.daemon.url).port);
    const before = ownSockets().filter((s) => s.remotePort === daemonPort);
    const errors: SandboxdError[] = [];
    const fwd = await forwardPort(ctx.client, sb, 8000, { onError: (e) => errors.push(e) });
    assert.equal(fwd.host, "127.0.0.1");
    const base = `http://127.0.0.1:${fwd.port}`;

    const hello = await Promise.all([1, 2, 3, 4].map((i) => fetch(`${base}/p${i}`).then((r) => r.text())));
    assert.deepEqual(hello, ["hello from /p1", "hello from /p2", "hello from /p3", "hello from /p4"]);

    // 64 MiB down, checked against the same bytes made here, and 64 MiB up and back.
    const size = 64 << 20;
    const down = await fetch(`${base}/big?n=${size}`);
    assert.equal(down.status, 200);
    assert.equal(await digestOf(down.body!), createHash("sha256").update(Buffer.alloc(size, 0x78)).digest("hex"));
    const body = randomBytes(size);
    const up = await fetch(`${base}/echo`, { method: "POST", body });
    assert.equal(up.status, 200);
    assert.equal(await digestOf(up.body!), createHash("sha256").update(body).digest("hex"));
    assert.deepEqual(errors, []);

    // What is open now: the accepted connections, and a WebSocket to the daemon for each.
    const open = ownSockets();
    const relays = open.filter((s) => s.remotePort === daemonPort && !before.some((b) => b.inode === s.inode));
    assert.ok(open.some((s) => s.localPort === fwd.port) && relays.length >= 1, JSON.stringify(open));
    assert.ok(fwd.connections >= 1);

    // A port nothing listens on: the local connection is closed, and onError told why.
    const closedPort: SandboxdError[] = [];
    const dead = await forwardPort(ctx.client, sb, 8099, { onError: (e) => closedPort.push(e) });
    const sock = connect(dead.port, "127.0.0.1");
    sock.on("error", () => {});
    await once(sock, "close");
    assert.equal(closedPort.length, 1);
    assert.ok(closedPort[0] instanceof PortUnreachable, String(closedPort[0]));
    await dead.close();

    await fwd.close();
    assert.equal(fwd.connections, 0);
    const refused = connect(fwd.port, "127.0.0.1");
    await assert.rejects(once(refused, "connect"), /ECONNREFUSED/);
    // No socket of this process is left on the forward's port, nor any of its WebSockets; and the
    // sandbox's server holds no connection any more.
    await eventually(() => {
      const now = ownSockets();
      const left = now.filter(
        (s) => s.localPort === fwd.port || s.remotePort === fwd.port || relays.some((r) => r.inode === s.inode),
      );
      assert.deepEqual(left, []);
    });
    await eventually(async () => {
      const r = await sb.run(["cat", "/proc/net/tcp", "/proc/net/tcp6"]);
      const held = tcpTable(r.stdoutText).filter((s) => s.localPort === 8000 && s.state !== "0A" && s.inode !== 0); // not listening nor gone
      assert.deepEqual(held, [], "connections to the sandbox's server");
    });
  });
}

/**
 * Everything a stream gives until its readable side ends, its writable side left as it is (a `for
 * await` would destroy a half-open Duplex at the end).
 */
function readAll(s: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    s.on("data", (b: Buffer) => parts.push(b));
    s.once("end", () => resolve(Buffer.concat(parts)));
    s.once("error", reject);
  });
}

/** Resolves once s has emitted close, or at once when it has. */
function closed(s: Duplex): Promise<void> {
  return s.closed ? Promise.resolve() : new Promise((r) => s.once("close", () => r()));
}

async function digestOf(body: ReadableStream<Uint8Array>): Promise<string> {
  const h = createHash("sha256");
  const reader = body.getReader();
  for (let r = await reader.read(); !r.done; r = await reader.read()) h.update(r.value);
  return h.digest("hex");
}

interface TcpSocket {
  localPort: number;
  remotePort: number;
  state: string;
  inode: number;
}

/** The rows of /proc/net/tcp and tcp6. */
function tcpTable(text: string): TcpSocket[] {
  const out: TcpSocket[] = [];
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || !/^\d+:$/.test(f[0]!)) continue;
    const port = (a: string) => parseInt(a.split(":")[1]!, 16);
    out.push({ localPort: port(f[1]!), remotePort: port(f[2]!), state: f[3]!, inode: Number(f[9]) });
  }
  return out;
}

/** The TCP sockets this process holds open. */
function ownSockets(): TcpSocket[] {
  const inodes = new Set<number>();
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m) inodes.add(Number(m[1]));
    } catch {
      // closed meanwhile
    }
  }
  const table = tcpTable(readFileSync("/proc/net/tcp", "utf8") + "\n" + readFileSync("/proc/net/tcp6", "utf8"));
  return table.filter((s) => inodes.has(s.inode));
}

/** Runs check until it passes, for up to 10 s; then its last failure. */
async function eventually(check: () => void | Promise<void>): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await check();
      return;
    } catch (e) {
      if (i >= 100) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
