// spec.extensions["sandboxd.lifetime"] against a real daemon: a create with a lifetime and what the
// daemon recorded, values the schema refuses, an idle pause and the call that resumes it, and a
// daemon's default and maximum.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  Client,
  InvalidState,
  LIFETIME_KEY,
  Sandbox,
  ValidationError,
  type Lifetime,
  type RecordedLifetime,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

/**
 * Waits, on the sandbox's events (whose stream names no sandbox in its path, so it keeps none from
 * idling), until the daemon has paused it for being idle.
 */
async function idlePause(sb: Sandbox): Promise<void> {
  const reasons: unknown[] = [];
  for await (const ev of sb.client.events({ sandbox: sb, signal: AbortSignal.timeout(60_000) })) {
    if (ev.generation !== sb.generation || ev.type !== "sandbox.state_changed") continue;
    reasons.push(ev.data["reason"]);
    if (ev.data["to"] === "paused") break;
  }
  assert.ok(reasons.includes("idle"), `reasons ${JSON.stringify(reasons)}`);
  assert.equal((await sb.refresh()).state, "paused");
}

export function extLifetime(ctx: Context): void {
  describe("extensions: lifetime", () => {
    it("creates with a lifetime and reads back what holds", async () => {
      const sb = await Sandbox.create(ctx.client, { lifetime: { ttlSeconds: 3600 } });
      try {
        assert.deepEqual(sb.spec.extensions?.[LIFETIME_KEY], { ttlSeconds: 3600 });
        const lt: RecordedLifetime | undefined = sb.lifetime;
        assert.ok(lt);
        assert.equal(lt.ttlSeconds, 3600);
        assert.equal(lt.idleSeconds, undefined);
        assert.equal(Date.parse(lt.expiresAt!) - Date.parse(lt.since), 3600_000);
        assert.deepEqual((await sb.refresh()).lifetime, lt);
      } finally {
        await sb.terminate();
      }
      const other = await Sandbox.create(ctx.client, {
        lifetime: { idleSeconds: 600, onIdle: "terminate" },
        extensions: { "acme.example": { a: 1 } },
      });
      try {
        assert.deepEqual(other.spec.extensions?.["acme.example"], { a: 1 });
        assert.equal(other.lifetime?.onIdle, "terminate");
        assert.equal(other.lifetime?.resumeOnCall, undefined);
        assert.equal(other.lifetime?.expiresAt, undefined);
      } finally {
        await other.terminate();
      }
      const none = await Sandbox.create(ctx.client);
      try {
        assert.equal(none.lifetime, undefined); // the suite's daemon has no default lifetime
      } finally {
        await none.terminate();
      }
    });

    it("refuses a lifetime the schema refuses", async () => {
      const bad: unknown[] = [{ ttlSeconds: 0 }, { ttlSeconds: 31536001 }, {}, { onIdle: "sleep" }, { ttl: 5 }];
      for (const lifetime of bad) {
        await assert.rejects(Sandbox.create(ctx.client, { lifetime: lifetime as Lifetime }), (e: unknown) => {
          assert.ok(e instanceof ValidationError, `${JSON.stringify(lifetime)}: ${String(e)}`);
          assert.equal(e.status, 400);
          return true;
        });
      }
      await assert.rejects(
        Sandbox.create(ctx.client, { lifetime: { ttlSeconds: 5 }, extensions: { [LIFETIME_KEY]: {} } }),
        ValidationError,
      );
    });

    it("pauses an idle sandbox, and a command resumes it", async () => {
      const sb = await Sandbox.create(ctx.client, { lifetime: { idleSeconds: 2 } });
      try {
        assert.deepEqual(
          [sb.lifetime?.idleSeconds, sb.lifetime?.onIdle, sb.lifetime?.resumeOnCall],
          [2, "pause", true],
        );
        const gen = sb.generation;
        await idlePause(sb);
        assert.equal((await sb.run(["echo", "awake"])).stdoutText, "awake\n");
        await sb.refresh();
        assert.equal(sb.state, "ready");
        assert.equal(sb.generation, gen);
      } finally {
        await sb.terminate();
      }
    });

    it("keeps an idle pause when resumeOnCall is false", async () => {
      const sb = await Sandbox.create(ctx.client, { lifetime: { idleSeconds: 2, resumeOnCall: false } });
      try {
        await idlePause(sb);
        await assert.rejects(sb.run(["true"]), InvalidState);
        assert.equal((await sb.resume()).state, "ready");
      } finally {
        await sb.terminate();
      }
    });

    it("applies the daemon's default idle bound and maximum", async () => {
      const d = await ctx.another({ args: ["--default-idle", "2s", "--max-idle", "1h"] });
      const client = new Client({ url: d.url, token: d.token, fetch: ctx.conformance.fetch });
      const sb = await Sandbox.create(client);
      try {
        assert.equal(sb.lifetime?.idleSeconds, 2);
        await idlePause(sb);
        assert.equal((await sb.run(["echo", "again"])).stdoutText, "again\n");
      } finally {
        await sb.terminate();
      }
      await assert.rejects(Sandbox.create(client, { lifetime: { idleSeconds: 3601 } }), /maximum/);
    });
  });
}
