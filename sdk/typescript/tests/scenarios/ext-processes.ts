// The group "processes" of api/extensions.yaml against a real daemon (host and oci run background
// processes alike): a process's output read whole through the iterator, also across connections the
// fault proxy cuts; its exit code by a wait; a stdin round trip; a KILL and the end it gives the
// stream; the fence of the sandbox's generation.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GenerationConflict, InvalidState, NotFound, Sandbox, ValidationError } from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";

const lines = ["python3", "-c", "import sys\nfor i in range(200): print('line', i)\nsys.exit(3)"];
const want = Array.from({ length: 200 }, (_, i) => `line ${i}\n`).join("");
const text = (b: Uint8Array) => new TextDecoder().decode(b);

export function extProcesses(ctx: Context): void {
  describe("extensions: processes", () => {
    it("reads a process's output whole and its exit code", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const p = await sb.startProcess({ argv: lines, tag: "lines", env: { A: "1" } });
      assert.ok(p.pid >= 1);
      assert.equal(p.tag, "lines");
      assert.deepEqual(p.argv, lines);
      const stream = sb.processOutput(p.pid);
      let got = "";
      let at = 0;
      for await (const c of stream) {
        assert.equal(c.offset, at);
        at += c.data.length;
        got += text(c.data);
      }
      assert.equal(got, want);
      assert.deepEqual([stream.end?.reason, stream.end?.exitCode, stream.end?.offset], ["exited", 3, want.length]);
      const done = await sb.waitProcess(p.pid, { timeoutMs: 30_000 });
      assert.deepEqual([done.running, done.exitCode, done.outputEnd], [false, 3, want.length]);
      assert.deepEqual(
        (await sb.processes()).map((x) => x.pid),
        [p.pid],
      );
      assert.equal((await sb.process(p.pid)).exitCode, 3);
      // From an offset: only what comes after it.
      assert.equal(text(await sb.processOutput(p.pid, { after: want.length - 8 }).readAll()), want.slice(-8));
    });

    it("resumes the output from its offset after a dropped connection", async () => {
      const via = await Sandbox.create(ctx.proxied);
      try {
        const p = await via.startProcess({ argv: lines });
        assert.equal((await via.waitProcess(p.pid, { timeoutMs: 30_000 })).exitCode, 3);
        const where = `/v1/sandboxes/${via.id}/processes/${p.pid}/output`;
        const isOutput = (r: { path: string }) => r.path.startsWith(where);
        ctx.proxy.inject(isOutput, { kind: "cut", events: 0 }, 2);
        const mark = ctx.proxy.seen.length;
        const stream = via.processOutput(p.pid);
        assert.equal(text(await stream.readAll()), want);
        assert.equal(stream.end?.reason, "exited");
        assert.equal(ctx.proxy.seen.slice(mark).filter(isOutput).length, 3);
      } finally {
        await via.terminate();
      }
    });

    it("writes a process's stdin", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const p = await sb.startProcess({ argv: ["cat"] });
      assert.equal(await sb.writeStdin(p.pid, new TextEncoder().encode("first\n")), "first\n".length);
      assert.equal(await sb.writeStdin(p.pid, "second\n"), "second\n".length);
      assert.equal(await sb.writeStdin(p.pid, "", { close: true }), 0);
      assert.equal((await sb.waitProcess(p.pid, { timeoutMs: 30_000 })).exitCode, 0);
      assert.equal(text(await sb.processOutput(p.pid).readAll()), "first\nsecond\n");
      const q = await sb.startProcess({
        argv: ["cat"],
        stdin: new TextEncoder().encode("all at once"),
        closeStdin: true,
      });
      assert.equal((await sb.waitProcess(q.pid, { timeoutMs: 30_000 })).exitCode, 0);
      assert.equal(text(await sb.processOutput(q.pid).readAll()), "all at once");
    });

    it("ends the stream when a KILL ends the process", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const p = await sb.startProcess({ argv: ["sh", "-c", "echo ready; exec sleep 600"] });
      const stream = sb.processOutput(p.pid);
      const first = await stream.next();
      assert.equal(first.done, false);
      assert.equal(text(first.value!.data), "ready\n");
      const running = await sb.waitProcess(p.pid, { timeoutMs: 0 });
      assert.deepEqual([running.running, running.exitCode], [true, null]);
      await sb.signalProcess(p.pid, "KILL");
      assert.deepEqual(await stream.next(), { done: true, value: undefined });
      assert.deepEqual([stream.end?.reason, stream.end?.exitCode], ["exited", 137]);
      await assert.rejects(sb.signalProcess(p.pid, "TERM"), InvalidState); // it has ended
    });

    it("fences every call by the generation", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const stale = await Sandbox.connect(ctx.client, sb.id);
      const p = await sb.startProcess({ argv: ["true"] });
      await sb.terminate();
      await sb.recreate();
      const calls: (() => Promise<unknown>)[] = [
        () => stale.startProcess({ argv: ["true"] }),
        () => stale.processes(),
        () => stale.process(p.pid),
        () => stale.waitProcess(p.pid, { timeoutMs: 0 }),
        () => stale.writeStdin(p.pid, "x"),
        () => stale.signalProcess(p.pid, "KILL"),
        () => stale.processOutput(p.pid).readAll(),
      ];
      for (const call of calls) {
        await assert.rejects(call(), (e: unknown) => {
          assert.ok(e instanceof GenerationConflict, String(e));
          assert.equal(e.status, 409);
          return true;
        });
      }
      assert.deepEqual(await sb.processes(), []); // the new generation starts with none
      await assert.rejects(sb.process(p.pid), NotFound);
    });

    it("runs a process on a pty and resizes it", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const p = await sb.startProcess({
        argv: ["sh", "-c", "stty size; read x; stty size"],
        pty: { rows: 24, cols: 80 },
      });
      assert.equal(p.pty, true);
      const stream = sb.processOutput(p.pid);
      let first = "";
      while (!first.includes("24 80")) {
        const r = await stream.next();
        assert.ok(!r.done, first);
        first += text(r.value.data);
      }
      await stream.close();
      assert.deepEqual(await sb.resizeProcess(p.pid, { rows: 30, cols: 100 }), { rows: 30, cols: 100 });
      await sb.writeStdin(p.pid, "\n");
      assert.equal((await sb.waitProcess(p.pid, { timeoutMs: 30_000 })).exitCode, 0);
      assert.match(text(await sb.processOutput(p.pid).readAll()), /24 80\r\n[^]*30 100/);
      await assert.rejects(sb.resizeProcess(p.pid, { rows: 0, cols: 80 }), ValidationError);
      await assert.rejects(sb.resizeProcess(p.pid, { rows: 10, cols: 10 }), InvalidState); // it has ended
      const url = sb.terminalUrl(p.pid, { mode: "watch" });
      assert.ok(url.startsWith("ws://") && url.includes("/terminal?") && url.includes("mode=watch"), url);
    });
  });
}
