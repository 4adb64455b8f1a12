// The examples, run as a user runs them, against the suite's daemon.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, it } from "node:test";
import type { Context } from "../harness/context.js";
import { provider } from "../harness/daemon.js";

const run = promisify(execFile);
const examplesDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../examples");

function envOf(ctx: Context): NodeJS.ProcessEnv {
  return {
    ...process.env,
    SANDBOXD_URL: ctx.daemon.url,
    SANDBOXD_TOKEN: ctx.daemon.token,
    SANDBOXD_ALLOW_HOST_PROCESS: ctx.daemon.provider === "host" ? "1" : "0",
  };
}

export function examples(ctx: Context): void {
  describe("examples", () => {
    it("agent-tool runs a conversation's programs, with a timeout and a failure as results", async () => {
      const { stdout } = await run("node", [path.join(examplesDir, "agent-tool.js")], { env: envOf(ctx) });
      const lines = stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { result: Record<string, unknown> });
      assert.equal(lines.length, 4);
      assert.deepEqual(
        lines.map((l) => [l.result["exitCode"], l.result["timedOut"]]),
        [
          [0, false],
          [0, false],
          [null, true],
          [4, false],
        ],
      );
      assert.equal(lines[0]!.result["stdout"], "2 3 5 7 11 13 17 19 23 29\n");
      assert.equal(lines[1]!.result["stdout"], "hello model, primes: [2,3,5,7,11,13,17,19,23,29]\n");
      assert.equal(lines[3]!.result["stderr"], "about to fail\n");
    });

    if (provider === "host") {
      it("agent-tool refuses the host provider unless told it is fine", async () => {
        const env = { ...envOf(ctx), SANDBOXD_ALLOW_HOST_PROCESS: "0" };
        const out = await run("node", [path.join(examplesDir, "agent-tool.js")], { env }).then(
          () => "ran",
          (e: { stderr: string }) => e.stderr,
        );
        assert.match(out, /without isolation: refusing/);
      });
    }

    it("copy-project copies a project in, builds it, and copies the result out", async () => {
      const dir = mkdtempSync(path.join(tmpdir(), "sandboxd-sdk-ts-copy-"));
      try {
        const src = path.join(dir, "src");
        mkdirSync(path.join(src, "lib", "deep"), { recursive: true });
        writeFileSync(path.join(src, "a.txt"), "alpha\n");
        writeFileSync(path.join(src, "lib", "b.txt"), "beta\n");
        writeFileSync(path.join(src, "lib", "deep", "c.bin"), new Uint8Array([0, 1, 2, 255]));
        writeFileSync(
          path.join(src, "build.sh"),
          "mkdir -p dist/sums && cat a.txt lib/b.txt > dist/joined.txt && cksum lib/deep/c.bin > dist/sums/c.txt\n",
        );
        const out = path.join(dir, "out");
        const { stdout } = await run(
          "node",
          [path.join(examplesDir, "copy-project.js"), src, out, "dist", "--", "sh", "build.sh"],
          { env: envOf(ctx) },
        );
        assert.match(stdout, /copied 4 files in/);
        assert.match(stdout, /copied 2 files out/);
        assert.equal(readFileSync(path.join(out, "joined.txt"), "utf8"), "alpha\nbeta\n");
        assert.match(readFileSync(path.join(out, "sums", "c.txt"), "utf8"), /^\d+ 4 lib\/deep\/c\.bin\n$/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
