// The group "stats and metrics" of api/extensions.yaml against a real daemon: Sandbox.stats (a 422 on
// the host provider, real figures on oci) and Client.metrics (behind the daemon's token).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Client, InvalidState, NotFound, Sandbox, Unauthenticated, UnsupportedCapability } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

export function extStats(ctx: Context): void {
  describe("extensions: stats and metrics", () => {
    it("reads what a sandbox uses, or says the provider cannot", async () => {
      const sb = await Sandbox.create(ctx.client);
      try {
        if (ctx.daemon.provider === "host") {
          await assert.rejects(sb.stats(), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            assert.equal(e.code, "unsupported_capability");
            return true;
          });
          // The same through request(), checked against the document as getSandboxStats.
          await assert.rejects(
            ctx.client.request({ method: "GET", path: `/v1/sandboxes/${sb.id}/stats` }),
            UnsupportedCapability,
          );
          return;
        }
        await sb.run(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]);
        const st = await sb.stats();
        assert.equal(st.sandboxId, sb.id);
        assert.equal(st.generation, sb.generation);
        assert.equal(st.state, "ready");
        assert.ok(!Number.isNaN(Date.parse(st.observedAt)));
        assert.ok(st.cpuSeconds !== undefined && st.cpuSeconds > 0, `cpuSeconds ${st.cpuSeconds}`);
        assert.ok(st.memoryBytes !== undefined && st.memoryBytes > 0, `memoryBytes ${st.memoryBytes}`);
        assert.ok(st.memoryLimitBytes !== undefined && st.memoryLimitBytes >= st.memoryBytes);
        assert.ok(st.pids !== undefined && st.pids >= 1);
        assert.ok(st.diskLimitBytes !== undefined && st.diskLimitBytes > 0);
        await sb.pause();
        assert.equal((await sb.stats()).state, "paused");
        await sb.resume();
        await sb.terminate();
        await assert.rejects(sb.stats(), InvalidState);
      } finally {
        await sb.terminate();
      }
      const gone = new Sandbox(ctx.client, { ...sb.resource, id: "sbx_nosuchsandbox" });
      await assert.rejects(gone.stats(), NotFound);
    });

    it("gives the daemon's metrics as text, with the token only", async () => {
      const text = await ctx.client.metrics();
      assert.equal(typeof text, "string");
      assert.match(text, /^# TYPE sandboxd_http_requests_total /m);
      assert.match(text, /^sandboxd_http_requests_total\{/m);
      const stranger = new Client({ url: ctx.daemon.url, token: "not-the-token", fetch: ctx.conformance.fetch });
      await assert.rejects(stranger.metrics(), Unauthenticated);
      const anonymous = await fetch(ctx.daemon.url + "/metrics");
      assert.equal(anonymous.status, 401);
    });
  });
}
