// The group "ports" of api/extensions.yaml against a real daemon: Sandbox.portUrl and
// Sandbox.previewToken (a 422 on the host provider, whose 127.0.0.1 is not a sandbox's; a server in
// the sandbox reached through the proxy and a preview URL on oci).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Sandbox, UnsupportedCapability, ValidationError, parsePort } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const wait = `import socket, time
for i in range(200):
    try:
        socket.create_connection(("127.0.0.1", 8000)).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    raise SystemExit(1)
`;

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
  });
}
