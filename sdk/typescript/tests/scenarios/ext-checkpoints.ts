// The group "memory snapshots" of api/extensions.yaml against a real daemon: Sandbox.checkpoint and
// Sandbox.checkpoints (a 422 where the provider has no memorySnapshot), and a fork through
// fromCheckpoint.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Sandbox, UnsupportedCapability, fromCheckpoint } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

export function extCheckpoints(ctx: Context): void {
  describe("extensions: memory snapshots", () => {
    it("checkpoints a sandbox and forks it, or says the provider cannot", async () => {
      const sb = await Sandbox.create(ctx.client);
      try {
        const info = await ctx.client.runtime();
        if (!info.provider.capabilities.memorySnapshot) {
          await assert.rejects(sb.checkpoint(), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            return true;
          });
          await assert.rejects(sb.checkpoints(), UnsupportedCapability);
          await assert.rejects(
            Sandbox.create(ctx.client, { extensions: fromCheckpoint(sb.id, "ckpt_0123456789abcdef") }),
            UnsupportedCapability,
          );
          return;
        }
        const c = await sb.checkpoint();
        assert.equal(c.sandboxId, sb.id);
        assert.equal(sb.state, "paused");
        assert.deepEqual(
          (await sb.checkpoints()).map((x) => x.id),
          [c.id],
        );
        await sb.resume();
        const fork = await Sandbox.create(ctx.client, { extensions: fromCheckpoint(sb.id, c.id) });
        await fork.terminate();
      } finally {
        await sb.terminate();
      }
    });
  });
}
