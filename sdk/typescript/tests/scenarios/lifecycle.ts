// Scenarios of a sandbox's life: create (idempotent under a retry, waiting by events), run, files,
// pause and resume, terminate, recreate.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  Client,
  CommandFailed,
  CommandResult,
  GenerationConflict,
  InvalidState,
  NotFound,
  Sandbox,
  ValidationError,
  type SandboxEvent,
  type SandboxResource,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";
import type { Seen } from "../harness/proxy.js";

const isCreate = (r: Seen) => r.method === "POST" && r.path === "/v1/sandboxes";
const keyOf = (r: Seen) => (JSON.parse(r.body) as { clientRequestId: string }).clientRequestId;

export function lifecycle(ctx: Context): void {
  describe("runtime", () => {
    it("returns the provider's manifest", async () => {
      const info = await ctx.client.runtime();
      assert.equal(info.protocolVersion, "0.1");
      assert.equal(info.provider.name, ctx.daemon.provider);
      assert.equal(info.provider.capabilities.commandExecution, true);
      await ctx.client.health();
    });

    it("takes its URL and token from SANDBOXD_URL and SANDBOXD_TOKEN", async () => {
      const saved = { url: process.env["SANDBOXD_URL"], token: process.env["SANDBOXD_TOKEN"] };
      process.env["SANDBOXD_URL"] = ctx.daemon.url + "/";
      process.env["SANDBOXD_TOKEN"] = ctx.daemon.token;
      try {
        const client = new Client({ fetch: ctx.conformance.fetch });
        assert.equal(client.url, ctx.daemon.url);
        assert.equal((await client.runtime()).provider.name, ctx.daemon.provider);
      } finally {
        for (const [k, v] of [
          ["SANDBOXD_URL", saved.url],
          ["SANDBOXD_TOKEN", saved.token],
        ] as const) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
      }
    });
  });

  describe("create", () => {
    it("makes one sandbox when the first answer is lost and the SDK retries", async () => {
      ctx.proxy.inject(isCreate, { kind: "drop" });
      const before = ctx.proxy.count(isCreate);
      const sb = await Sandbox.create(ctx.proxied);
      try {
        const posts = ctx.proxy.seen.filter(isCreate).slice(before);
        assert.equal(posts.length, 2, "the create was sent twice: the lost answer and the retry");
        assert.equal(keyOf(posts[0]!), keyOf(posts[1]!), "the retry reuses the clientRequestId");
        assert.equal(keyOf(posts[0]!), sb.spec.clientRequestId);
        const mine = (await ctx.client.listSandboxes()).filter(
          (s) => s.spec.clientRequestId === sb.spec.clientRequestId,
        );
        assert.deepEqual(
          mine.map((s) => s.id),
          [sb.id],
          "exactly one sandbox has the clientRequestId",
        );
        assert.equal(sb.state, "ready");
        assert.equal(sb.generation, 1);
      } finally {
        await sb.terminate();
      }
    });

    it("uses the caller's clientRequestId, and repeating it returns the same sandbox", async () => {
      const key = `sdk-ts-${Date.now()}`;
      const a = await ctx.client.createSandbox({ clientRequestId: key });
      const b = await ctx.client.createSandbox({ clientRequestId: key });
      try {
        assert.equal(a.id, b.id);
        assert.equal(a.spec.clientRequestId, key);
      } finally {
        await a.terminate();
      }
    });

    it("waits for ready through the event stream from a cursor taken before the create", async () => {
      // The proxy makes the create's answer, and the first read of the sandbox, say "starting": only
      // the events after the cursor known before the create can tell the SDK that it is ready.
      const starting = (body: unknown) => ({ body: { ...(body as SandboxResource), state: "starting" } });
      ctx.proxy.inject(isCreate, { kind: "rewrite", edit: starting });
      ctx.proxy.inject((r) => r.method === "GET" && /^\/v1\/sandboxes\/sbx_[^/]+$/.test(r.path), {
        kind: "rewrite",
        edit: starting,
      });
      const mark = ctx.proxy.seen.length;
      const sb = await Sandbox.create(ctx.proxied, {}, { timeoutMs: 20_000 });
      try {
        assert.equal(sb.state, "ready");
        const after = ctx.proxy.seen.slice(mark);
        const streams = after.filter((r) => r.path.startsWith("/v1/events/stream"));
        assert.equal(streams.length, 1, "one stream was opened");
        const q = new URL(streams[0]!.path, "http://x").searchParams;
        assert.equal(q.get("sandboxId"), sb.id, "the stream is filtered to the sandbox");
        const created = (await ctx.client.listEvents({ sandbox: sb, after: 0 })).find(
          (e) => e.type === "sandbox.created",
        )!;
        assert.ok(Number(q.get("after")) < created.cursor, "the stream starts before the sandbox's first event");
        const gets = after.filter((r) => r.method === "GET" && r.path === `/v1/sandboxes/${sb.id}`);
        assert.equal(gets.length, 1, "the sandbox is read once, when the stream opens, and not polled");
      } finally {
        await sb.terminate();
      }
    });
  });

  describe("run", () => {
    it("returns exit code, output as bytes and text, flags and times", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const r = await sb.run(["sh", "-c", 'printf "out\\n"; printf "err" >&2; exit 3']);
      assert.ok(r instanceof CommandResult);
      assert.equal(r.exitCode, 3);
      assert.equal(r.ok, false);
      assert.equal(r.stdoutText, "out\n");
      assert.deepEqual(r.stdout, new TextEncoder().encode("out\n"));
      assert.equal(r.stderrText, "err");
      assert.equal(r.timedOut, false);
      assert.equal(r.cancelled, false);
      assert.equal(r.truncated, false);
      assert.ok(r.finishedAt.getTime() >= r.startedAt.getTime());
      assert.ok(r.durationMs >= 0);
      assert.throws(
        () => r.check(),
        (e: unknown) => e instanceof CommandFailed && e.result === r && /exited with 3/.test(e.message),
      );
      assert.equal((await sb.run(["true"])).check().exitCode, 0);
    });

    it("passes cwd, env and stdin", async () => {
      await using sb = await Sandbox.create(ctx.client);
      await sb.files.write("work/dir/keep", "");
      const r = await sb.run(["sh", "-c", 'pwd; echo "$GREETING"'], { cwd: "work/dir", env: { GREETING: "hello" } });
      assert.match(r.stdoutText, /work\/dir\nhello\n$/);
      const bytes = new Uint8Array(256).map((_, i) => i);
      const cat = await sb.run(["sh", "-c", "wc -c; pwd"], { stdin: bytes, cwd: "work" });
      assert.match(cat.stdoutText, /^\s*256\n.*\/work\n$/);
      const echo = await sb.run(["cat"], { stdin: "line one\nline two\n" });
      assert.equal(echo.stdoutText, "line one\nline two\n");
      const left = (await sb.files.list()).map((e) => e.path);
      assert.ok(left.includes("work"));
      assert.deepEqual(
        left.filter((p) => p.includes("stdin")),
        [],
        "the stdin files are gone",
      );
    });

    it("reports a timeout, truncation and a program that cannot start as results", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const slow = await sb.run(["sleep", "5"], { timeoutSeconds: 0.3 });
      assert.equal(slow.timedOut, true);
      assert.equal(slow.exitCode, null);
      assert.throws(() => slow.check(), /timed out/);
      const big = await sb.run(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x"], { maxOutputBytes: 100 });
      assert.equal(big.truncated, true);
      assert.equal(big.stdout.length, 100);
      const missing = await sb.run(["no-such-program-here"]);
      assert.equal(missing.exitCode, 127);
      assert.notEqual(missing.stderrText, "");
    });
    it("cancels the command when the caller aborts", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(new Error("changed my mind")), 300);
      await assert.rejects(sb.run(["sleep", "30"], { signal: ctl.signal }), /changed my mind/);
      // The daemon stops the command when its caller goes away, and says so in the command's event.
      let done: SandboxEvent | undefined;
      for await (const ev of ctx.client.events({ sandbox: sb, after: 0 })) {
        if (ev.type === "sandbox.command_completed") {
          done = ev;
          break;
        }
      }
      assert.equal((done!.data as { cancelled?: boolean }).cancelled, true);
    });
  });

  describe("files", () => {
    it("writes, reads and lists bytes and text", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const bytes = new Uint8Array(70_000).map((_, i) => (i * 7) % 256);
      const w = await sb.files.write("data/blob.bin", bytes);
      assert.deepEqual(w, { path: "data/blob.bin", size: bytes.length });
      assert.deepEqual(await sb.files.read("data/blob.bin"), bytes);
      await sb.files.write("data/notes/hello.txt", "héllo\n");
      assert.equal(await sb.files.readText("data/notes/hello.txt"), "héllo\n");
      assert.deepEqual(await sb.files.read("data/notes/hello.txt"), new TextEncoder().encode("héllo\n"));
      const entries = await sb.files.list("data");
      assert.deepEqual(entries.map((e) => [e.path, e.kind]).sort(), [
        ["data/blob.bin", "file"],
        ["data/notes", "directory"],
      ]);
      assert.equal(entries.find((e) => e.kind === "file")!.size, bytes.length);
      const seen = await sb.run(["cat", "data/notes/hello.txt"]);
      assert.equal(seen.stdoutText, "héllo\n", "a command sees what the file API wrote");
      await assert.rejects(sb.files.read("data/missing"), NotFound);
      await assert.rejects(sb.files.read("data"), ValidationError);
    });
  });

  describe("pause and resume", () => {
    it("pauses, refuses commands while paused, and resumes", async () => {
      await using sb = await Sandbox.create(ctx.client);
      await sb.pause();
      assert.equal(sb.state, "paused");
      await assert.rejects(sb.run(["true"]), InvalidState);
      await sb.pause(); // already paused: 200 with the sandbox, as a retry would get
      assert.equal(sb.state, "paused");
      await sb.resume();
      assert.equal(sb.state, "ready");
      assert.equal((await sb.run(["echo", "back"])).stdoutText, "back\n");
      assert.equal((await sb.reconcile()).state, "ready");
    });

    it("waits for the state an action leads to through the event stream", async () => {
      const sb = await Sandbox.create(ctx.proxied);
      try {
        // The action's answer and the first read of the sandbox say "pausing": the SDK learns of
        // "paused" from the stream's state change, which it then checks.
        const pausing = (body: unknown) => ({ body: { ...(body as SandboxResource), state: "pausing" } });
        ctx.proxy.inject((r) => r.path === `/v1/sandboxes/${sb.id}/actions/pause`, { kind: "rewrite", edit: pausing });
        ctx.proxy.inject((r) => r.method === "GET" && r.path === `/v1/sandboxes/${sb.id}`, {
          kind: "rewrite",
          edit: pausing,
        });
        const mark = ctx.proxy.seen.length;
        await sb.pause({ timeoutMs: 20_000 });
        assert.equal(sb.state, "paused");
        const seen = ctx.proxy.seen.slice(mark);
        assert.equal(seen.filter((r) => r.path.startsWith(`/v1/events/stream`)).length, 1);
        assert.equal(
          seen.filter((r) => r.method === "GET" && r.path === `/v1/sandboxes/${sb.id}`).length,
          2,
          "one read when the stream opened, one on the state change",
        );
        // Another client pauses nothing here; waitForState of the state it is in returns at once.
        await sb.waitForState("paused");
        await sb.resume();
        await assert.rejects(
          sb.waitForState("paused", { timeoutMs: 5_000 }),
          InvalidState,
          "a ready sandbox does not become paused by itself",
        );
      } finally {
        await sb.terminate();
      }
    });
  });

  describe("terminate", () => {
    it("terminates, and await using terminates at the end of the block", async () => {
      let id: string;
      {
        await using sb = await Sandbox.create(ctx.client);
        id = sb.id;
        assert.equal((await ctx.client.getSandbox(id)).state, "ready");
      }
      assert.equal((await ctx.client.getSandbox(id)).state, "terminated");
      const sb = await Sandbox.create(ctx.client);
      await sb.terminate();
      assert.equal(sb.state, "terminated");
      await sb.terminate(); // terminated already: 200 with the sandbox
      await assert.rejects(sb.run(["true"]), InvalidState);
      await sb[Symbol.asyncDispose](); // nothing to do for a terminated sandbox
      assert.equal((await sb.refresh()).state, "terminated");
    });
  });

  describe("recreate", () => {
    it("makes generation 2; an object holding generation 1 is fenced off until it refreshes", async () => {
      const sb = await Sandbox.create(ctx.client);
      const stale = await ctx.client.getSandbox(sb.id);
      await assert.rejects(sb.recreate(), InvalidState, "a ready sandbox cannot be recreated");
      await sb.terminate();
      await sb.recreate();
      try {
        assert.equal(sb.generation, 2);
        assert.equal(sb.state, "ready");
        assert.notEqual(sb.spec.clientRequestId, stale.spec.clientRequestId, "a recreate needs a new clientRequestId");
        await assert.rejects(stale.run(["true"]), (e: unknown) => {
          assert.ok(e instanceof GenerationConflict);
          assert.equal(e.status, 409);
          assert.equal(e.code, "generation_conflict");
          assert.equal(e.currentGeneration, 2);
          return true;
        });
        await stale.refresh();
        assert.equal(stale.generation, 2);
        assert.equal((await stale.run(["echo", "two"])).stdoutText, "two\n");
      } finally {
        await sb.terminate();
      }
    });

    it("is recognised when its first answer is lost", async () => {
      const sb = await Sandbox.create(ctx.proxied);
      await sb.terminate();
      const isRecreate = (r: Seen) => r.path === `/v1/sandboxes/${sb.id}/actions/recreate`;
      ctx.proxy.inject(isRecreate, { kind: "drop" });
      await sb.recreate({ clientRequestId: `sdk-ts-recreate-${Date.now()}` });
      try {
        assert.equal(ctx.proxy.count(isRecreate), 2, "sent twice");
        assert.equal(sb.generation, 2, "one new generation, not two");
        assert.equal(sb.state, "ready");
        assert.equal((await ctx.client.getSandbox(sb.id)).generation, 2);
      } finally {
        await sb.terminate();
      }
    });
  });
}
