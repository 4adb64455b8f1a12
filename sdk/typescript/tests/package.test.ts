// The packaging test: the tarball of `npm pack`, installed into a fresh directory, runs the README's
// first example against a real daemon, compiled there by a strict tsc against the package's own types.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, it } from "node:test";
import { startDaemon, type Daemon } from "./harness/daemon.js";

const sdkDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const tsc = path.join(sdkDir, "node_modules", "typescript", "bin", "tsc");

let daemon: Daemon;
let dir: string;

before(async () => {
  daemon = await startDaemon({ provider: "host" });
  dir = mkdtempSync(path.join(tmpdir(), "sandboxd-sdk-ts-pack-"));
});

after(async () => {
  await daemon?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): string {
  return execFileSync(cmd, args, { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

it("npm pack's tarball installs into a fresh directory and runs the README's first example", async () => {
  // dist/ is built by ./test before the tests run; prepack would only build it again.
  const out = sh("npm", ["pack", "--silent", "--ignore-scripts", "--pack-destination", dir], sdkDir).trim().split("\n");
  const tarball = path.join(dir, out[out.length - 1]!);
  const files = sh("tar", ["-tzf", tarball], dir).trim().split("\n").sort();
  assert.ok(files.includes("package/dist/index.js") && files.includes("package/dist/index.d.ts"), files.join(" "));
  assert.ok(files.includes("package/README.md") && files.includes("package/package.json"));
  assert.deepEqual(
    files.filter((f) => !/^package\/(dist\/.*\.(js|d\.ts)|README\.md|package\.json)$/.test(f)),
    [],
    "the package holds the build, its types, the README and package.json, and nothing else",
  );

  const app = path.join(dir, "app");
  sh("mkdir", ["-p", app], dir);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  sh("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", "--ignore-scripts", "--silent", tarball], app);

  // The library's code reaches for nothing of Node's, but the entry point for Node (@sandboxd/sdk/node),
  // which nothing else imports.
  const dist = path.join(app, "node_modules", "@sandboxd", "sdk", "dist");
  for (const f of readdirSync(dist, { recursive: true }) as string[]) {
    if (!f.endsWith(".js") || f === "node.js") continue;
    const code = readFileSync(path.join(dist, f), "utf8");
    assert.doesNotMatch(
      code,
      /from "node:|from "ws"|require\(|\bBuffer\b|\bprocess\.(?!env)/,
      `${f} uses Node's own API`,
    );
    assert.doesNotMatch(code, /from "\.\/node\.js"/, `${f} imports the entry point for Node`);
  }
  // That entry point resolves, with its dependency, in the installed package.
  const node = sh(
    "node",
    ["-e", 'import("@sandboxd/sdk/node").then((m) => console.log(Object.keys(m).sort().join(" ")))'],
    app,
  );
  assert.equal(node.trim(), "dialPort forwardPort");

  const readme = readFileSync(path.join(sdkDir, "README.md"), "utf8");
  const example = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example, "the README has a TypeScript example");
  writeFileSync(path.join(app, "example.ts"), example);
  writeFileSync(
    path.join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        lib: ["ES2022", "DOM", "ESNext.Disposable"],
        types: [],
        strict: true,
        skipLibCheck: false,
      },
      files: ["example.ts"],
    }),
  );
  sh("node", [tsc, "-p", app], app);
  const printed = sh("node", ["example.js"], app, {
    ...process.env,
    SANDBOXD_URL: daemon.url,
    SANDBOXD_TOKEN: daemon.token,
  });
  assert.match(printed, /^0 hello from Linux\n\nhi\n \[ \{ path: 'notes\/hello.txt', kind: 'file', size: 3 \} \]\n$/);
});
