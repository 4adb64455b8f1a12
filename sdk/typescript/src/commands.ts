// A command's result, and the request of one.

import { SandboxdError } from "./errors.js";
import type { CommandResultBody } from "./types.js";

/** How {@link Sandbox.run} runs a command. */
export interface RunOptions {
  /** How long the command may run before its whole process group is killed. Default 60, at most 3600. */
  timeoutSeconds?: number | undefined;
  /** The working directory, relative to the sandbox's own. */
  cwd?: string | undefined;
  /** Environment variables on top of the sandbox's. */
  env?: Record<string, string> | undefined;
  /**
   * The command's standard input. The contract has no stdin, so the SDK writes it to a file in the
   * sandbox's working directory first and runs the command through `/bin/sh` with the file as its
   * input, removing the file as the command starts: it needs file access and `/bin/sh` in the sandbox.
   */
  stdin?: string | Uint8Array | undefined;
  /** The most output kept of each of stdout and stderr, in bytes; past it the result is `truncated`. Default 1 MiB. */
  maxOutputBytes?: number | undefined;
  /** Aborts the call; the daemon then cancels the command (`cancelled`). */
  signal?: AbortSignal | undefined;
}

const encoder = new TextEncoder();

/**
 * What a command did: its exit code, its output and how it ended. A command that could not be started
 * is a result too (exit code 127, the reason on stderr), not an error.
 */
export class CommandResult {
  /** The argv that ran. */
  readonly argv: readonly string[];
  /** The exit code; null when the command timed out or was cancelled. */
  readonly exitCode: number | null;
  /** stdout as text. */
  readonly stdoutText: string;
  /** stderr as text. */
  readonly stderrText: string;
  /** The command ran past `timeoutSeconds` and was killed. */
  readonly timedOut: boolean;
  /** The command was stopped because the caller went away, or the sandbox was paused or terminated under it. */
  readonly cancelled: boolean;
  /** stdout or stderr was cut at `maxOutputBytes`. */
  readonly truncated: boolean;
  /** When the command started. */
  readonly startedAt: Date;
  /** When the command ended. */
  readonly finishedAt: Date;
  #stdout: Uint8Array | undefined;
  #stderr: Uint8Array | undefined;

  /** The result of argv from the daemon's answer. */
  constructor(argv: readonly string[], body: CommandResultBody) {
    this.argv = argv;
    this.exitCode = body.exitCode;
    this.stdoutText = body.stdout;
    this.stderrText = body.stderr;
    this.timedOut = body.timedOut;
    this.cancelled = body.cancelled;
    this.truncated = body.truncated;
    this.startedAt = new Date(body.startedAt);
    this.finishedAt = new Date(body.finishedAt);
  }

  /** stdout as bytes (UTF-8). */
  get stdout(): Uint8Array {
    return (this.#stdout ??= encoder.encode(this.stdoutText));
  }

  /** stderr as bytes (UTF-8). */
  get stderr(): Uint8Array {
    return (this.#stderr ??= encoder.encode(this.stderrText));
  }

  /** The command exited with 0. */
  get ok(): boolean {
    return this.exitCode === 0;
  }

  /** How long the command ran, in milliseconds. */
  get durationMs(): number {
    return this.finishedAt.getTime() - this.startedAt.getTime();
  }

  /**
   * Returns the result when the command exited with 0.
   * @throws {@link CommandFailed} otherwise: a non-zero exit, a timeout or a cancel.
   */
  check(): this {
    if (!this.ok) throw new CommandFailed(this);
    return this;
  }
}

/** Code `command_failed`: {@link CommandResult.check} of a command that did not exit with 0. */
export class CommandFailed extends SandboxdError {
  override name = "CommandFailed";
  /** The command's result. */
  readonly result: CommandResult;

  constructor(result: CommandResult) {
    const how = result.timedOut ? "timed out" : result.cancelled ? "was cancelled" : `exited with ${result.exitCode}`;
    const tail = result.stderrText.trim().split("\n").slice(-3).join("\n");
    super(`command ${JSON.stringify(result.argv)} ${how}${tail ? `: ${tail}` : ""}`, { code: "command_failed" });
    this.result = result;
  }
}

// Runs "$@" with the file $1 as stdin, removed as soon as it is open, in the directory $2.
const stdinScript = 'exec 0<"$1" && rm -f -- "$1" && cd -- "$2" && shift 2 && exec "$@"';

/** The argv that runs argv with stdin from the file at path (relative to the working directory). @internal */
export function withStdin(argv: readonly string[], path: string, cwd: string | undefined): string[] {
  return ["/bin/sh", "-c", stdinScript, "sh", path, cwd ?? ".", ...argv];
}
