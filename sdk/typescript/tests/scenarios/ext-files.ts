// The group "raw files and watch" of api/extensions.yaml against a real daemon: Sandbox.upload and
// download of files past the contract's 24 MiB, a streamed upload, a Range read, and Sandbox.watch.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { NotFound, Sandbox, type FileChange } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

export function extFiles(ctx: Context): void {
  describe("extensions: raw files and watch", () => {
    it("moves files of any size in and out, their digests checked", async () => {
      const sb = await Sandbox.create(ctx.client);
      try {
        const data = new Uint8Array(randomBytes(30 << 20));
        const w = await sb.upload("big.bin", data);
        assert.equal(w.size, data.length);
        assert.equal(w.digest, `sha-256=:${createHash("sha256").update(data).digest("base64")}:`);
        const back = await sb.download("big.bin");
        assert.ok(Buffer.from(back).equals(Buffer.from(data)));
        // A stream, sent as it comes.
        const stream = new Blob([data.subarray(0, 1 << 20)]).stream();
        assert.equal((await sb.upload("streamed.bin", stream)).size, 1 << 20);
        // A Range read from an offset.
        const f = await sb.openFile("big.bin", data.length - 10);
        const tail = new Uint8Array(await new Response(f.body).arrayBuffer());
        assert.ok(Buffer.from(tail).equals(Buffer.from(data.subarray(data.length - 10))));
        assert.equal(f.digest, w.digest);
        await assert.rejects(sb.download("missing.bin"), NotFound);
      } finally {
        await sb.terminate();
      }
    });

    it("watches a directory's changes", async () => {
      const sb = await Sandbox.create(ctx.client);
      try {
        await sb.run(["mkdir", "-p", "w"]);
        const watch = sb.watch("w", { recursive: true });
        const seen: FileChange[] = [];
        const done = (async () => {
          for await (const c of watch) {
            seen.push(c);
            if (c.kind === "deleted") break;
          }
        })();
        await new Promise((r) => setTimeout(r, 300));
        await sb.run(["sh", "-c", "echo x > w/a.txt && rm w/a.txt"]);
        await done;
        assert.ok(
          seen.some((c) => c.kind === "created" && c.path === "w/a.txt"),
          JSON.stringify(seen),
        );
        const gone = sb.watch("nowhere");
        await assert.rejects(gone.next(), NotFound);
      } finally {
        await sb.terminate();
      }
    });
  });
}
