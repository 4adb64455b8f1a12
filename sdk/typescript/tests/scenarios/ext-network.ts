// The group "network" of api/extensions.yaml against a real daemon: on host the 422 of a capability it
// lacks; on oci a sandbox's egress policy, read, replaced under its generation's fence, and the stream
// of what it refuses. The only traffic is to addresses that go nowhere off the machine.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  GenerationConflict,
  InvalidState,
  Sandbox,
  UnsupportedCapability,
  type NetworkDenial,
  type NetworkPolicy,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

// 198.51.100.0/24 and 192.0.2.0/24 are documentation ranges (RFC 5737): nothing answers there.
const policy: NetworkPolicy = { egress: "deny", allow: ["198.51.100.0/24"] };
const denied = "192.0.2.1";
const connect = [
  "python3",
  "-c",
  `import socket, sys
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("${denied}", 80))
except OSError as e:
    sys.exit(f"refused: {e}")
`,
];

export function extNetwork(ctx: Context): void {
  describe("extensions: network", () => {
    it("sets, reads and replaces a sandbox's egress policy and follows its denials, or says the provider cannot", async () => {
      const client = ctx.client;
      if (ctx.daemon.provider === "host") {
        await assert.rejects(Sandbox.create(client, { network: policy }, { wait: false }), UnsupportedCapability);
        const sb = await Sandbox.create(client);
        try {
          for (const call of [
            () => sb.network(),
            () => sb.setNetwork(policy),
            () => sb.networkDenials().next(),
            () => client.request({ method: "GET", path: `/v1/sandboxes/${sb.id}/network` }),
          ]) {
            await assert.rejects(call(), (e: unknown) => {
              assert.ok(e instanceof UnsupportedCapability, String(e));
              assert.equal(e.status, 422);
              return true;
            });
          }
        } finally {
          await sb.terminate();
        }
        return;
      }
      const sb = await Sandbox.create(client, { network: policy });
      try {
        assert.deepEqual(sb.spec.extensions?.["sandboxd.network"], policy);
        let st = await sb.network();
        assert.equal(st.generation, sb.generation);
        assert.equal(st.policy.egress, "deny");
        assert.deepEqual(st.policy.allow, ["198.51.100.0/24"]);

        // A PUT replaces the policy, fenced by the generation the object knows.
        const stale = await Sandbox.connect(client, sb.id);
        st = await sb.setNetwork({ ...policy, deny: ["192.0.2.0/24"] });
        assert.deepEqual(st.policy.deny, ["192.0.2.0/24"]);
        assert.deepEqual((await sb.network()).policy.deny, ["192.0.2.0/24"]);
        await sb.terminate();
        await sb.recreate(); // a new generation: the object read before it is stale
        await assert.rejects(stale.setNetwork(policy), (e: unknown) => {
          assert.ok(e instanceof GenerationConflict, String(e));
          assert.equal(e.status, 409);
          return true;
        });
        // The recreated generation has the spec's policy, the one asked at create.
        assert.ok(!(await sb.network()).policy.deny?.length);

        // What the policy refuses comes on the stream, which ends with the generation.
        const stream = sb.networkDenials({ heartbeatTimeoutMs: 60_000 });
        const first = stream.next(); // opens the stream
        const res = await sb.run(connect);
        assert.notEqual(res.exitCode, 0, res.stderrText);
        let d: IteratorResult<NetworkDenial, undefined> = await first;
        while (!d.done && d.value.destination !== denied) d = await stream.next();
        assert.ok(!d.done, "the stream ended before the denial");
        assert.ok(!Number.isNaN(Date.parse(d.value.time)));
        st = await sb.network();
        assert.ok(st.deniedConnections >= 1);
        assert.ok(st.denials.some((x) => x.destination === denied));
        await sb.terminate();
        for (;;) if ((await stream.next()).done) break; // ends: no hang past the terminate
        assert.equal(stream.end?.reason, "invalid_state");
        await assert.rejects(sb.network(), InvalidState);
      } finally {
        await sb.terminate();
      }
    });
  });
}
