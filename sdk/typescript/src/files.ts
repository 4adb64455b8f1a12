// A sandbox's files: read, write and list, fenced by the sandbox's generation.

import { decodeBase64, encodeBase64 } from "./base64.js";
import type { CallOptions } from "./client.js";
import type { Sandbox } from "./sandbox.js";
import type { FileEntry, FileReadResult } from "./types.js";

/** The size of a file just written, and the path as the daemon took it. */
export interface WrittenFile {
  path: string;
  size: number;
}

const encoder = new TextEncoder();

/**
 * The files of a sandbox. Relative paths are relative to the sandbox's working directory; absolute ones
 * are inside the sandbox's filesystem; no path leaves the sandbox. Contents travel as base64 in JSON, so
 * one file is at most 24 MiB.
 */
export class SandboxFiles {
  readonly #sb: Sandbox;

  /** @hidden */
  constructor(sandbox: Sandbox) {
    this.#sb = sandbox;
  }

  /**
   * The bytes of a file.
   * @throws {@link NotFound} when there is no such file, {@link ValidationError} for a directory,
   * {@link GenerationConflict}, {@link InvalidState} when the sandbox is not ready.
   */
  async read(path: string, options: CallOptions = {}): Promise<Uint8Array> {
    const out = await this.#sb.client.transport.call<FileReadResult>({
      method: "GET",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sb.id)}/files/content`,
      query: { path, expectedGeneration: this.#sb.generation },
      signal: options.signal,
    });
    return decodeBase64(out.contentBase64);
  }

  /** A file as text (UTF-8, with U+FFFD for bytes that are not). Errors as {@link SandboxFiles.read}. */
  async readText(path: string, options: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /**
   * Writes a file whole (a string as UTF-8), creating its parent directories; the file is replaced
   * atomically. Not retried: a write is tried once.
   * @throws {@link ValidationError} for a path that is a directory, {@link RequestTooLarge} past the
   * daemon's body limit, {@link GenerationConflict}, {@link InvalidState}.
   */
  async write(path: string, data: string | Uint8Array, options: CallOptions = {}): Promise<WrittenFile> {
    const bytes = typeof data === "string" ? encoder.encode(data) : data;
    const out = await this.#sb.client.transport.call<FileReadResult>({
      method: "PUT",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sb.id)}/files/content`,
      body: { expectedGeneration: this.#sb.generation, path, contentBase64: encodeBase64(bytes) },
      signal: options.signal,
    });
    return { path: out.path, size: out.size };
  }

  /**
   * The entries of one directory (default: the working directory); each entry's `path` is one to pass
   * back to these methods.
   * @throws {@link NotFound}, {@link ValidationError} for a file, {@link GenerationConflict}, {@link InvalidState}.
   */
  async list(path = ".", options: CallOptions = {}): Promise<FileEntry[]> {
    const out = await this.#sb.client.transport.call<{ entries: FileEntry[] }>({
      method: "GET",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sb.id)}/files/entries`,
      query: { path, expectedGeneration: this.#sb.generation },
      signal: options.signal,
    });
    return out.entries;
  }
}
