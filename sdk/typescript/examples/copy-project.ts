// Copies a project directory into a sandbox, runs a command there, and copies a result directory out:
//
//   node build/examples/copy-project.js ./my-project ./out dist -- sh -c "make && cp -r build dist"
//
// The arguments are the local project, the local directory to copy the result into, the result's
// directory inside the sandbox (relative to the project), and the command, run in the project.

import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { Client, Sandbox } from "@sandboxd/sdk";

/** Copies every file under local into the sandbox under remote; returns how many files. */
export async function copyIn(sb: Sandbox, local: string, remote: string): Promise<number> {
  let n = 0;
  for (const entry of await readdir(local, { withFileTypes: true })) {
    const from = path.join(local, entry.name);
    const to = `${remote}/${entry.name}`;
    if (entry.isDirectory()) n += await copyIn(sb, from, to);
    else if (entry.isFile()) {
      await sb.files.write(to, await readFile(from));
      n++;
    }
  }
  return n;
}

/** Copies every file under remote in the sandbox to local; returns how many files. */
export async function copyOut(sb: Sandbox, remote: string, local: string): Promise<number> {
  let n = 0;
  for (const entry of await sb.files.list(remote)) {
    const rel = path.posix.relative(remote, entry.path);
    if (entry.kind === "directory") {
      n += await copyOut(sb, entry.path, path.join(local, rel));
      continue;
    }
    await mkdir(local, { recursive: true });
    await writeFile(path.join(local, rel), await sb.files.read(entry.path));
    n++;
  }
  return n;
}

async function main(): Promise<void> {
  const [src, out, result, dashes, ...command] = process.argv.slice(2);
  if (!src || !out || !result || dashes !== "--" || command.length === 0) {
    console.error("usage: copy-project SRC OUT RESULT_DIR -- COMMAND...");
    process.exit(2);
  }
  await using sb = await Sandbox.create(new Client());
  const copied = await copyIn(sb, src, "project");
  console.log(`copied ${copied} files in`);
  const r = await sb.run(command, { cwd: "project", timeoutSeconds: 300 });
  process.stdout.write(r.stdoutText);
  process.stderr.write(r.stderrText);
  r.check();
  console.log(`copied ${await copyOut(sb, `project/${result}`, out)} files out`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
