// A real sandboxd for the tests: the binary from $SANDBOXD_BIN, or built once from the repository's
// cmd/sandboxd, serving on a free loopback port with a data directory and a bearer token file of its own.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

const sdkDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
/** The repository the SDK is part of. */
export const repoDir = path.resolve(sdkDir, "../..");

/** The provider the suite runs against: $SANDBOXD_TEST_PROVIDER, default host. */
export const provider = process.env["SANDBOXD_TEST_PROVIDER"] ?? "host";

/** Options of one daemon. */
export interface DaemonOptions {
  provider?: string;
  /** --event-retention: how many events the log keeps. */
  eventRetention?: number;
  /** More flags. */
  args?: string[];
}

/** A running daemon. */
export interface Daemon {
  url: string;
  token: string;
  dataDir: string;
  provider: string;
  /** The log it wrote so far. */
  log(): string;
  stop(): Promise<void>;
}

/** The daemon binary: $SANDBOXD_BIN, or a static build of cmd/sandboxd under build/, made when missing. */
export function daemonBinary(): string {
  const given = process.env["SANDBOXD_BIN"];
  if (given) return given;
  const dir = path.join(sdkDir, "build", "daemon");
  const bin = path.join(dir, "sandboxd");
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o711);
    execFileSync("go", ["build", "-o", bin, "./cmd/sandboxd"], {
      cwd: repoDir,
      env: { ...process.env, CGO_ENABLED: "0" },
      stdio: ["ignore", "inherit", "inherit"],
    });
  }
  return bin;
}

/** Starts a daemon and resolves once it listens. */
export async function startDaemon(opts: DaemonOptions = {}): Promise<Daemon> {
  const prov = opts.provider ?? provider;
  // The oci provider's sandboxes run as unprivileged uids that must be able to search the data
  // directory's parents: the temporary root is 0711.
  const root = mkdtempSync(path.join(tmpdir(), "sandboxd-sdk-ts-"));
  chmodSync(root, 0o711);
  const dataDir = path.join(root, "data");
  const token = randomBytes(16).toString("hex");
  const tokenFile = path.join(root, "tokens");
  writeFileSync(tokenFile, token + "\n", { mode: 0o600 });
  const args = [
    "serve",
    "--provider",
    prov,
    "--listen",
    "127.0.0.1:0",
    "--data-dir",
    dataDir,
    "--auth-token-file",
    tokenFile,
    "--log-format",
    "json",
    "--shutdown-timeout",
    "2s",
    "--preview-listen",
    "127.0.0.1:0",
  ];
  if (prov === "oci") args.push("--oci-warm-pool", "2");
  if (opts.eventRetention !== undefined) args.push("--event-retention", String(opts.eventRetention));
  args.push(...(opts.args ?? []));
  const child = spawn(daemonBinary(), args, { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const url = await new Promise<string>((resolve, reject) => {
    const onData = (b: Buffer) => {
      log += b.toString();
      for (const line of log.split("\n")) {
        if (!line.startsWith("{")) continue;
        try {
          const rec = JSON.parse(line) as { msg?: string; addr?: string };
          if (rec.msg === "serving" && rec.addr) resolve(`http://${rec.addr}`);
        } catch {
          // a partial line
        }
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => reject(new Error(`sandboxd exited with ${code} before serving:\n${log}`)));
    setTimeout(() => reject(new Error(`sandboxd did not serve within 30 s:\n${log}`)), 30_000).unref();
  });
  return {
    url,
    token,
    dataDir,
    provider: prov,
    log: () => log,
    stop: () => stop(child, root),
  };
}

async function stop(child: ChildProcess, root: string): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    const kill = setTimeout(() => child.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(kill);
  }
  rmSync(root, { recursive: true, force: true });
}
