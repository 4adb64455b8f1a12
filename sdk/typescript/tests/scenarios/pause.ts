// A pause of the sandbox under its open streams, against a real daemon (host and oci both pause): a
// process's output and a watch are held on their connections, their heartbeats say paused and then
// running, and every line or change comes once, in order; a terminate during the pause ends them with
// their end events. At the edge, a source of made-up events holds the readers to heartbeats that say
// nothing they know: skipped, without an error or a hang.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  Client,
  ConnectionError,
  Sandbox,
  type FileChange,
  type StreamHeartbeat,
  type StreamState,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const count = 300;
/** Prints a line every 10 ms. */
const ticker = [
  "python3",
  "-c",
  `import time\nfor i in range(${count}):\n print('line', i, flush=True)\n time.sleep(0.01)`,
];
const want = Array.from({ length: count }, (_, i) => `line ${i}\n`).join("");
/** Makes a file under w every 10 ms. */
const maker = [
  "python3",
  "-c",
  `import time\nfor i in range(${count}):\n open('w/f%03d' % i, 'w').close()\n time.sleep(0.01)`,
];
const made = Array.from({ length: count }, (_, i) => `w/f${String(i).padStart(3, "0")}`);

/** A promise and its resolve. */
function later<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Whether states are one or more `paused`, then `running`. */
function pausedThenRunning(states: StreamState[]): boolean {
  return states.length >= 2 && states.at(-1) === "running" && states.slice(0, -1).every((s) => s === "paused");
}

/** An event stream of text in pieces of 7 bytes, so that events and lines are cut across reads. */
function sse(text: string): Response {
  const bytes = new TextEncoder().encode(text);
  let at = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (at >= bytes.length) return ctl.close();
      ctl.enqueue(bytes.subarray(at, at + 7));
      at += 7;
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

/** Heartbeat events none of which is a StreamHeartbeatEvent. */
const garbled = [
  "not json",
  "[1,2]",
  "null",
  '"paused"',
  "{}",
  '{"state":"frozen"}',
  '{"state":"paused","offset":-1}',
  '{"state":"paused","offset":"0"}',
  '{"state":"paused","offset":1.5}',
  '{"state":"running","offset":1e300}',
  '{"state":["paused"]}',
  "{".repeat(10_000),
]
  .map((d) => `event: heartbeat\ndata: ${d}\n\n`)
  .join("");

export function pause(ctx: Context): void {
  describe("a pause under open streams", () => {
    it(
      "holds a process's output on its connection: paused, then running, every line once in order",
      { timeout: 120_000 },
      async () => {
        const sb = await Sandbox.create(ctx.proxied);
        try {
          const p = await sb.startProcess({ argv: ticker });
          const where = `/v1/sandboxes/${sb.id}/processes/${p.pid}/output`;
          const mark = ctx.proxy.seen.length;
          const beats: StreamHeartbeat[] = [];
          const pausedSeen: boolean[] = [];
          let pausing: Promise<unknown> | undefined;
          let resuming: Promise<unknown> | undefined;
          const stream = sb.processOutput(p.pid, {
            onHeartbeat: (b) => {
              beats.push(b);
              pausedSeen.push(stream.paused);
              if (b.state === "paused") resuming ??= pausing!.then(() => sb.resume());
            },
          });
          let got = "";
          for await (const c of stream) {
            assert.equal(c.offset, new TextEncoder().encode(got).length);
            got += new TextDecoder().decode(c.data);
            if (got.split("\n").length > 20) pausing ??= sb.pause();
          }
          await resuming;
          assert.equal(got, want);
          assert.deepEqual([stream.end?.reason, stream.end?.exitCode, stream.paused], ["exited", 0, false]);
          assert.ok(pausedThenRunning(beats.map((b) => b.state)), JSON.stringify(beats));
          assert.deepEqual(
            pausedSeen,
            beats.map((b) => b.state === "paused"),
          );
          // The output goes on where the pause held it: each heartbeat's offset is within what was read.
          for (const b of beats) assert.ok(b.offset !== undefined && b.offset <= want.length, JSON.stringify(b));
          assert.equal(
            ctx.proxy.seen.slice(mark).filter((r) => r.path.startsWith(where)).length,
            1,
            "the pause was waited out on the one connection",
          );
        } finally {
          await sb.terminate();
        }
      },
    );

    it(
      "holds a watch across a pause: paused, then running, every change once in order",
      { timeout: 120_000 },
      async () => {
        const sb = await Sandbox.create(ctx.client);
        try {
          await sb.run(["mkdir", "w"]);
          const states: StreamState[] = [];
          let pausing: Promise<unknown> | undefined;
          let resuming: Promise<unknown> | undefined;
          const watch = sb.watch("w", {
            onHeartbeat: (b) => {
              assert.equal(b.offset, undefined); // a watch has none
              states.push(b.state);
              if (b.state === "paused") resuming ??= pausing!.then(() => sb.resume());
            },
          });
          const created: string[] = [];
          const reading = (async () => {
            for await (const c of watch) {
              if (c.kind !== "created") continue;
              created.push(c.path!);
              if (created.length === 20) pausing ??= sb.pause();
              if (c.path === made.at(-1)) break;
            }
          })();
          await new Promise((r) => setTimeout(r, 300)); // the watch is in place before the first file
          const p = await sb.startProcess({ argv: maker });
          await reading;
          await resuming;
          assert.deepEqual(created, made);
          assert.ok(pausedThenRunning(states), JSON.stringify(states));
          assert.equal(watch.paused, false);
          assert.equal((await sb.waitProcess(p.pid, { timeoutMs: 30_000 })).exitCode, 0);
        } finally {
          await sb.terminate();
        }
      },
    );

    it(
      "ends an output stream and a watch with their end events when a terminate comes during the pause",
      { timeout: 120_000 },
      async () => {
        await using sb = await Sandbox.create(ctx.client);
        await sb.run(["mkdir", "w"]);
        const p = await sb.startProcess({ argv: ["sh", "-c", "echo ready; exec sleep 600"] });
        const outPaused = later();
        const watchPaused = later();
        const stream = sb.processOutput(p.pid, {
          onHeartbeat: (b) => b.state === "paused" && outPaused.resolve(),
        });
        const watch = sb.watch("w", { onHeartbeat: (b) => b.state === "paused" && watchPaused.resolve() });
        const first = await stream.next();
        assert.equal(new TextDecoder().decode(first.value?.data), "ready\n");
        const rest = stream.next();
        const watching = (async () => {
          for await (const c of watch) void c;
        })();
        await new Promise((r) => setTimeout(r, 300)); // the watch is open before the pause
        await sb.pause();
        await Promise.all([outPaused.promise, watchPaused.promise]);
        assert.deepEqual([stream.paused, watch.paused], [true, true]);
        await sb.terminate();
        assert.deepEqual(await rest, { done: true, value: undefined });
        await watching;
        assert.deepEqual([stream.end?.reason, watch.end?.reason], ["terminated", "terminated"]);
        assert.deepEqual([stream.paused, watch.paused], [false, false]);
      },
    );

    it("skips heartbeats that say nothing it knows, without an error or a hang", async () => {
      await using real = await Sandbox.create(ctx.client);
      // Every call goes to the daemon but the streams, which a made-up source answers.
      const bodies: Record<string, string> = {
        output:
          garbled +
          'event: heartbeat\ndata: {"state":"paused","offset":0}\n\n' +
          garbled +
          'event: heartbeat\ndata: {"state":"running","offset":0}\n\n' +
          'event: output\ndata: {"offset":0,"dataBase64":"aGk="}\n\n' +
          garbled +
          'event: end\ndata: {"reason":"exited","offset":2,"exitCode":0}\n\n',
        watch:
          garbled +
          'event: heartbeat\ndata: {"state":"paused"}\n\n' +
          garbled +
          'event: heartbeat\ndata: {"state":"running"}\n\n' +
          'event: change\ndata: {"kind":"created","path":"w/a"}\n\n' +
          garbled +
          'event: end\ndata: {"reason":"terminated","offset":0}\n\n',
        // No end event: the connection ends, again and again.
        endless: garbled,
      };
      const opened: string[] = [];
      const edge = (kind: string): Client =>
        new Client({
          url: ctx.daemon.url,
          token: ctx.daemon.token,
          retry: { attempts: 3, minDelayMs: 10, maxDelayMs: 20 },
          fetch: async (input, init) => {
            const url = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
            if (url.pathname.endsWith("/output") || url.pathname.endsWith("/files/watch")) {
              opened.push(kind);
              return sse(bodies[kind]!);
            }
            return ctx.conformance.fetch(input, init);
          },
        });

      const out = await Sandbox.connect(edge("output"), real.id);
      const beats: StreamHeartbeat[] = [];
      const stream = out.processOutput(7, { onHeartbeat: (b) => beats.push(b) });
      assert.equal(new TextDecoder().decode(await stream.readAll()), "hi");
      assert.deepEqual(beats, [
        { state: "paused", offset: 0 },
        { state: "running", offset: 0 },
      ]);
      assert.deepEqual([stream.end?.reason, stream.offset, stream.paused], ["exited", 2, false]);

      const w = await Sandbox.connect(edge("watch"), real.id);
      const states: StreamState[] = [];
      const watch = w.watch("w", { onHeartbeat: (b) => states.push(b.state) });
      const changes: FileChange[] = [];
      for await (const c of watch) changes.push(c);
      assert.deepEqual(changes, [{ kind: "created", path: "w/a" }]);
      assert.deepEqual(states, ["paused", "running"]);
      assert.deepEqual([watch.end?.reason, watch.paused], ["terminated", false]);

      const endless = await Sandbox.connect(edge("endless"), real.id);
      const heard: StreamHeartbeat[] = [];
      await assert.rejects(endless.processOutput(7, { onHeartbeat: (b) => heard.push(b) }).readAll(), ConnectionError);
      await assert.rejects(endless.watch("w", { onHeartbeat: (b) => heard.push(b) }).next(), ConnectionError);
      assert.deepEqual(heard, []);
      assert.deepEqual(opened, ["output", "watch", "endless", "endless", "endless", "endless"]);
    });
  });
}
