// The group "volumes" of api/extensions.yaml against a real daemon: on host the 422 of a capability it
// lacks; on oci a volume's files outlive the sandboxes that write them, one writer unless shared.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import {
  InvalidState,
  NotFound,
  Sandbox,
  SandboxFailed,
  UnsupportedCapability,
  ValidationError,
  type Volume,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const volumeName = () => "ts-" + randomBytes(6).toString("hex");

export function extVolumes(ctx: Context): void {
  describe("extensions: volumes", () => {
    it("keeps a volume's files across sandboxes, or says the provider cannot", async () => {
      const client = ctx.client;
      const name = volumeName();
      if (ctx.daemon.provider === "host") {
        const calls: (() => Promise<unknown>)[] = [
          () => client.createVolume({ name, sizeMiB: 16 }),
          () => client.listVolumes(),
          () => client.getVolume(name),
          () => client.deleteVolume(name),
          () => Sandbox.create(client, { volumes: [{ name, mountPath: "/data" }] }, { wait: false }),
          // The same through request(), checked against the document as createVolume.
          () => client.request({ method: "POST", path: "/v1/volumes", body: { name, sizeMiB: 16 } }),
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
      const vol: Volume = await client.createVolume({ name, sizeMiB: 16 });
      assert.deepEqual([vol.name, vol.sizeMiB, vol.shared, vol.attachedTo], [name, 16, false, []]);
      assert.ok(!Number.isNaN(Date.parse(vol.createdAt)));
      assert.ok((await client.listVolumes()).some((v) => v.name === name));
      await assert.rejects(client.createVolume({ name, sizeMiB: 16 }), InvalidState); // the name is taken

      const volumes = [{ name, mountPath: "/data" }];
      const first = await Sandbox.create(client, { volumes });
      try {
        assert.deepEqual(first.spec.extensions?.["sandboxd.volumes"], volumes);
        (await first.run(["sh", "-c", "echo kept > /data/note"])).check();
        assert.deepEqual((await client.getVolume(name)).attachedTo, [first.id]);

        // One writer: a second sandbox writing the volume fails with volume_in_use.
        const refused = await Sandbox.create(client, { volumes }).then(
          () => assert.fail("a second writer was made"),
          (e: unknown) => e,
        );
        assert.ok(refused instanceof SandboxFailed, String(refused));
        assert.equal(refused.failure.code, "volume_in_use");
        await (await Sandbox.connect(client, refused.sandbox.id)).terminate();
        // A reader may mount it beside the writer.
        const reader = await Sandbox.create(client, { volumes: [{ name, mountPath: "/mnt/ro", readOnly: true }] });
        try {
          assert.equal((await reader.run(["cat", "/mnt/ro/note"])).check().stdoutText, "kept\n");
          assert.notEqual((await reader.run(["sh", "-c", "echo x > /mnt/ro/other"])).exitCode, 0);
        } finally {
          await reader.terminate();
        }

        await assert.rejects(client.deleteVolume(name), (e: unknown) => {
          assert.ok(e instanceof InvalidState, String(e)); // mounted by a live sandbox
          assert.equal(e.status, 409);
          return true;
        });
      } finally {
        await first.terminate();
      }
      assert.deepEqual((await client.getVolume(name)).attachedTo, []);

      const second = await Sandbox.create(client, { volumes });
      try {
        assert.equal((await second.run(["cat", "/data/note"])).check().stdoutText, "kept\n");
      } finally {
        await second.terminate();
      }
      await client.deleteVolume(name);
      await assert.rejects(client.getVolume(name), NotFound);
      await assert.rejects(client.deleteVolume(name), NotFound);

      // A volume that does not exist is refused at create.
      await assert.rejects(
        Sandbox.create(client, { volumes: [{ name: volumeName(), mountPath: "/data" }] }, { wait: false }),
        (e: unknown) => {
          assert.ok(e instanceof ValidationError, String(e));
          assert.equal(e.status, 400);
          return true;
        },
      );
      // A mount given both ways is refused before anything is sent.
      await assert.rejects(
        Sandbox.create(client, { volumes, extensions: { "sandboxd.volumes": volumes } }),
        ValidationError,
      );
    });
  });
}
