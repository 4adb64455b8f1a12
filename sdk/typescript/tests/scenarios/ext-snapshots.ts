// The snapshots and templates of api/extensions.yaml against a real daemon: the host provider takes
// no snapshots, so every call is a 422; on oci the answers to what a test can do without a registry
// (the lists, ids and names the store lacks, a sandbox on the shared root, which has no filesystem of
// its own to snapshot).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { InvalidState, NotFound, Sandbox, SandboxdError, UnsupportedCapability, ValidationError } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const digest = "sha256:" + "0".repeat(64);

export function extSnapshots(ctx: Context): void {
  describe("extensions: snapshots and templates", () => {
    it("snapshots, forks, builds, lists and removes, or says the provider cannot", async () => {
      const client = ctx.client;
      if (ctx.daemon.provider === "host") {
        const sb = await Sandbox.create(client);
        const calls: (() => Promise<unknown>)[] = [
          () => client.snapshot(sb.id, sb.generation, { name: "none" }),
          () => client.listSnapshots(),
          () => client.getSnapshot(digest),
          () => client.deleteSnapshot(digest),
          () => client.fork(digest, 2),
          () =>
            client.buildTemplate({ name: "none", baseImage: "localhost:1/none:latest", steps: [{ run: ["true"] }] }),
          () => client.listTemplates(),
          () => client.getTemplate("none"),
          () => client.deleteTemplate("none@1"),
        ];
        for (const call of calls) {
          await assert.rejects(call(), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            return true;
          });
        }
        await sb.terminate();
        return;
      }
      for (const s of await client.listSnapshots()) assert.equal((await client.getSnapshot(s.id)).digest, s.digest);
      assert.ok(Array.isArray(await client.listTemplates()));
      await assert.rejects(client.getSnapshot(digest), NotFound);
      await assert.rejects(client.deleteSnapshot(digest), NotFound);
      await assert.rejects(client.fork(digest, 2), NotFound);
      await assert.rejects(client.fork(digest, 33), ValidationError);
      await assert.rejects(client.getTemplate("no-such-template"), NotFound);
      await assert.rejects(client.getTemplate("Not A Name"), ValidationError);
      await assert.rejects(client.deleteTemplate("no-such-template@3"), NotFound);
      await assert.rejects(
        client.buildTemplate({
          name: "unbuilt",
          baseImage: "127.0.0.1:1/none:latest",
          steps: [{ file: { path: "/a", content: "x" } }],
        }),
        SandboxdError,
      );
      const sb = await Sandbox.create(client);
      await assert.rejects(client.snapshot(sb.id, sb.generation), InvalidState); // on the shared root
      await sb.terminate();
    });
  });
}
