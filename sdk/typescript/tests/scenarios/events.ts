// Scenarios of the event stream: a dropped connection and a silent one are resumed with Last-Event-ID
// without loss or repeats, and a cursor older than the history kept is a 410 of its own class.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  ConnectionError,
  EventHistoryUnavailable,
  Sandbox,
  type EventStream,
  type SandboxEvent,
  type SandboxResource,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";
import { FaultProxy, type Seen } from "../harness/proxy.js";

const isStream = (r: Seen) => r.path.startsWith("/v1/events/stream");

/** Takes n events from the stream, then closes it. */
async function take(
  stream: EventStream,
  n: number,
  during?: (got: SandboxEvent[]) => Promise<void>,
): Promise<SandboxEvent[]> {
  const got: SandboxEvent[] = [];
  for await (const ev of stream) {
    got.push(ev);
    if (during) await during(got);
    if (got.length >= n) break;
  }
  return got;
}

export function events(ctx: Context): void {
  describe("events", () => {
    it("lists pages of events after a cursor, filtered by sandbox", async () => {
      await using sb = await Sandbox.create(ctx.client);
      await sb.run(["true"]);
      await sb.files.write("f", "x");
      const evs = await ctx.client.listEvents({ sandbox: sb });
      assert.deepEqual(
        evs.map((e) => e.type),
        [
          "sandbox.created",
          "sandbox.state_changed",
          "sandbox.state_changed",
          "sandbox.command_completed",
          "sandbox.file_written",
        ],
      );
      assert.ok(evs.every((e) => e.sandboxId === sb.id && e.generation === 1));
      const rest = await ctx.client.listEvents({ sandbox: sb, after: evs[2]!.cursor });
      assert.deepEqual(rest, evs.slice(3));
      assert.deepEqual(await ctx.client.listEvents({ sandbox: sb, after: evs[4]!.cursor }), []);
    });

    it("resumes after a dropped connection with Last-Event-ID, losing and repeating nothing", async () => {
      await using sb = await Sandbox.create(ctx.client);
      for (let i = 0; i < 3; i++) await sb.run(["true"]);
      const logged = await ctx.client.listEvents({ sandbox: sb });
      assert.equal(logged.length, 6);
      // The proxy cuts the first connection after two events; the SDK reconnects, and while it
      // follows live events two more commands run.
      ctx.proxy.inject(isStream, { kind: "cut", events: 2 });
      const mark = ctx.proxy.seen.length;
      const stream = ctx.proxied.events({ sandbox: sb, after: 0 });
      const got = await take(stream, 8, async (got) => {
        if (got.length === 6) {
          await sb.run(["true"]);
          await sb.run(["true"]);
        }
      });
      const all = await ctx.client.listEvents({ sandbox: sb });
      assert.deepEqual(got, all.slice(0, 8), "every event once, in order");
      assert.equal(stream.cursor, got[7]!.cursor);
      const opens = ctx.proxy.seen.slice(mark).filter(isStream);
      assert.equal(opens.length, 2, "one reconnect");
      assert.equal(opens[0]!.headers["last-event-id"], undefined);
      assert.equal(
        opens[1]!.headers["last-event-id"],
        String(got[1]!.cursor),
        "resumed after the last event handed out",
      );
    });

    it("reconnects a stream that goes silent past the heartbeat timeout", async () => {
      await using sb = await Sandbox.create(ctx.client);
      await sb.run(["true"]);
      ctx.proxy.inject(isStream, { kind: "stall", events: 1 });
      const mark = ctx.proxy.seen.length;
      const got = await take(ctx.proxied.events({ sandbox: sb, heartbeatTimeoutMs: 300 }), 4);
      assert.deepEqual(got, await ctx.client.listEvents({ sandbox: sb }));
      const opens = ctx.proxy.seen.slice(mark).filter(isStream);
      assert.equal(opens.length, 2);
      assert.equal(opens[1]!.headers["last-event-id"], String(got[0]!.cursor));
    });

    it("gives up with ConnectionError after maxReconnects failed connections in a row", async () => {
      await using sb = await Sandbox.create(ctx.client);
      ctx.proxy.inject(isStream, { kind: "cut", events: 0 }, 3);
      const stream = ctx.proxied.events({ sandbox: sb, maxReconnects: 2 });
      await assert.rejects(
        stream.next(),
        (e: unknown) => e instanceof ConnectionError && /3 connections in a row/.test(e.message),
      );
      ctx.proxy.clear();
    });

    it("ends without an error at its signal, and at close()", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const ctl = new AbortController();
      const stream = ctx.client.events({ sandbox: sb, signal: ctl.signal });
      const got = await take(stream, 3);
      assert.equal(got.length, 3);
      const quiet = ctx.client.events({ sandbox: sb, after: got[2]!.cursor, signal: ctl.signal });
      const next = quiet.next();
      setTimeout(() => ctl.abort(), 100);
      assert.deepEqual(await next, { done: true, value: undefined });
      const other = ctx.client.events({ sandbox: sb, after: got[2]!.cursor });
      const pending = other.next();
      await other.close();
      assert.equal((await pending).done, true);
    });

    it("throws EventHistoryUnavailable for a cursor older than the history kept (410)", async () => {
      const small = await ctx.another({ provider: "host", eventRetention: 5 });
      const proxy = await FaultProxy.start(small.url);
      try {
        // client creates; looker reads the log, so that client learns no cursor from the reads.
        const client = ctx.newClient({ url: proxy.url, token: small.token });
        const looker = ctx.newClient({ url: small.url, token: small.token });
        // Three sandboxes make nine events (cursors 1 to 9); the log keeps five.
        const made: Sandbox[] = [];
        for (let i = 0; i < 3; i++) made.push(await Sandbox.create(client));
        await assert.rejects(looker.listEvents({ after: 0 }), (e: unknown) => {
          assert.ok(e instanceof EventHistoryUnavailable);
          assert.equal(e.status, 410);
          assert.equal(e.code, "event_history_unavailable");
          return true;
        });
        await assert.rejects(take(looker.events({ after: 1 }), 1), EventHistoryUnavailable);
        assert.equal((await looker.listEvents({ after: 4 })).length, 5, "cursor 4 is the oldest kept, less one");

        // A create whose answer says "starting" waits from the cursor the client knew, 0, which is
        // gone: the stream's 410 makes it look up the oldest cursor kept and follow from there.
        const starting = (body: unknown) => ({ body: { ...(body as SandboxResource), state: "starting" } });
        proxy.inject((r) => r.method === "POST" && r.path === "/v1/sandboxes", { kind: "rewrite", edit: starting });
        const mark = proxy.seen.length;
        const sb = await Sandbox.create(client, {}, { timeoutMs: 20_000 });
        made.push(sb);
        assert.equal(sb.state, "ready");
        const streams = proxy.seen
          .slice(mark)
          .filter(isStream)
          .map((r) => new URL(r.path, "http://x").searchParams.get("after"));
        // Twelve events now, five kept: 8 to 12.
        assert.deepEqual(streams, ["0", "7"], "refused at 0, then followed from the oldest kept");
        const evs = await take(looker.events({ sandbox: sb, after: 9 }), 3);
        assert.deepEqual(
          evs.map((e) => [e.cursor, e.type]),
          [
            [10, "sandbox.created"],
            [11, "sandbox.state_changed"],
            [12, "sandbox.state_changed"],
          ],
        );
        for (const s of made) await s.terminate({ wait: false });
      } finally {
        await proxy.close();
      }
    });
  });
}
