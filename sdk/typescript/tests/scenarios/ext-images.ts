// The group "images and templates" of api/extensions.yaml against a real daemon: the host provider
// holds no images, so every call is a 422; on oci the store's answers to what a test can do without a
// registry (the list, a pull from where nothing listens, a digest it lacks, an import of a path that is
// not an image, a prune).

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { NotFound, SandboxdError, UnsupportedCapability, ValidationError } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const digest = "sha256:" + "0".repeat(64);

export function extImages(ctx: Context): void {
  describe("extensions: images", () => {
    it("lists, inspects, imports, removes and prunes images, or says the provider cannot", async () => {
      const client = ctx.client;
      const empty = mkdtempSync(path.join(tmpdir(), "sdk-image-"));
      if (ctx.daemon.provider === "host") {
        const calls: (() => Promise<unknown>)[] = [
          () => client.listImages(),
          () => client.pullImage("localhost:1/none:latest"),
          () => client.importImage(empty, "none:latest"),
          () => client.getImage(digest),
          () => client.removeImage("none:latest"),
          () => client.pruneImages(),
        ];
        for (const call of calls) {
          await assert.rejects(call(), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            return true;
          });
        }
        return;
      }
      // A registry on a port where nothing listens: refused, with an error of the contract.
      await assert.rejects(client.pullImage("127.0.0.1:1/none:latest", { timeoutMs: 60_000 }), SandboxdError);
      const images = await client.listImages();
      for (const i of images) assert.equal((await client.getImage(i.digest)).digest, i.digest);
      await assert.rejects(client.getImage(digest), NotFound);
      await assert.rejects(client.getImage("sha256:short"), ValidationError);
      await assert.rejects(client.importImage(empty, "none:latest"), ValidationError); // no OCI layout
      await assert.rejects(client.removeImage("none:latest"), NotFound);
      assert.ok((await client.pruneImages()) >= 0);
    });
  });
}
