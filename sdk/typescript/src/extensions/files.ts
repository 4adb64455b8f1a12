// The group "raw files and watch" of api/extensions.yaml: files of any size streamed in and out of a
// sandbox (/v1/sandboxes/{sandboxId}/files/raw) with their SHA-256 checked end to end (RFC 9530's
// Repr-Digest), uploads resumed from the bytes the sandbox holds, and the Server-Sent Events stream of
// the changes under a directory (Sandbox.upload, Sandbox.download, Sandbox.openFile, Sandbox.watch).

import { ConnectionError, SandboxdError, errorFromResponse } from "../errors.js";
import type { components } from "../generated/extensions.js";
import type { RequestOptions } from "../transport.js";
import { sleep } from "../transport.js";
import { connection, parseHeartbeat, type StreamHeartbeat } from "./sse.js";

/** What a raw write wrote: the file's size and its SHA-256 as RFC 9530 writes it (`sha-256=:…:`). */
export type RawFileWritten = components["schemas"]["RawFileWritten"];

/** One change under a watched directory ({@link Sandbox.watch}). */
export type FileChange = components["schemas"]["FileChangeEvent"];

/** Why a watch ended: the sandbox paused, terminated or recreated, the directory went (`error`), ... */
export type FileWatchEnd = components["schemas"]["ProcessEndEvent"];

/** Options of {@link Sandbox.upload}. */
export interface UploadOptions {
  /** Names the upload, for resuming it; default: a random name for bytes and blobs. */
  upload?: string | undefined;
  /** Resumes after a broken connection (bytes and blobs only); default 5. */
  retries?: number | undefined;
  /** Called with the bytes sent so far, at the end of each try. */
  onProgress?: ((sent: number) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of {@link Sandbox.watch}. */
export interface WatchOptions {
  recursive?: boolean | undefined;
  /** How long the stream may stay silent; default 45 s (the daemon sends heartbeats). */
  heartbeatTimeoutMs?: number | undefined;
  /**
   * Called with each heartbeat event: `paused` as the sandbox pauses and every heartbeat interval
   * after, `running` once after the resume (see {@link FileWatchStream.paused}). What it throws ends
   * the watch with that error.
   */
  onHeartbeat?: ((beat: StreamHeartbeat) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** The base64 of bytes. */
function b64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

async function sha256(data: Uint8Array | Blob): Promise<Uint8Array> {
  const buf = data instanceof Blob ? await data.arrayBuffer() : data;
  return new Uint8Array(await crypto.subtle.digest("SHA-256", buf as BufferSource));
}

/** The Repr-Digest value of a SHA-256. */
export function digestHeader(sum: Uint8Array): string {
  return `sha-256=:${b64(sum)}:`;
}

/** The SHA-256 of a Repr-Digest value, as its header gives it, or undefined. */
export function parseDigest(v: string | null): string | undefined {
  for (const m of (v ?? "").split(",")) {
    const [k, val] = m.trim().split(/=(.*)/s, 2);
    if (k === "sha-256" && val && val.startsWith(":") && val.endsWith(":")) return `sha-256=${val}`;
  }
  return undefined;
}

function randomId(): string {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** What the file calls need of a sandbox and its client's transport. @hidden */
export interface FileTarget {
  fetch: typeof globalThis.fetch;
  url: (path: string, query?: RequestOptions["query"]) => string;
  /** The client's headers, its token's included. */
  headers: Record<string, string>;
  backoff: (attempt: number) => number;
  call: <T>(opts: RequestOptions) => Promise<T>;
  path: string; // /v1/sandboxes/{id}/files
  generation: number;
}

async function fail(resp: Response): Promise<SandboxdError> {
  return errorFromResponse(resp.status, await resp.text().catch(() => ""));
}

/**
 * Writes the file at `path` from `data` (`PUT .../files/raw`), atomically. Bytes and blobs carry their
 * SHA-256 in Repr-Digest (the daemon refuses bytes that arrive changed and keeps the old file) and
 * resume after a broken connection from the bytes the sandbox holds; a stream is sent as it comes
 * (Node's fetch with `duplex: "half"`), and the digest the daemon answers is returned for the caller.
 * @hidden
 */
export async function upload(
  t: FileTarget,
  path: string,
  data: Uint8Array | Blob | ReadableStream<Uint8Array>,
  opts: UploadOptions = {},
): Promise<RawFileWritten> {
  const tr = t;
  const whole = !(data instanceof ReadableStream);
  const digest = whole ? digestHeader(await sha256(data)) : undefined;
  const size = data instanceof Uint8Array ? data.length : data instanceof Blob ? data.size : undefined;
  const id = opts.upload ?? (whole ? randomId() : undefined);
  const retries = opts.retries ?? 5;
  let offset = 0;
  for (let attempt = 0; ; attempt++) {
    const query = { path, expectedGeneration: t.generation, upload: id, offset: offset || undefined };
    const headers: Record<string, string> = { ...t.headers, "Content-Type": "application/octet-stream" };
    if (digest) headers["Repr-Digest"] = digest;
    const body = data instanceof ReadableStream ? data : data.slice(offset);
    try {
      const resp = await t.fetch(t.url(`${t.path}/raw`, query), {
        method: "PUT",
        headers,
        body: body as BodyInit,
        signal: opts.signal,
        ...(data instanceof ReadableStream ? { duplex: "half" } : {}),
      } as RequestInit);
      if (!resp.ok) throw await fail(resp);
      const out = (await resp.json()) as RawFileWritten;
      if (digest && out.digest !== digest) {
        throw new SandboxdError(`upload ${path}: the sandbox wrote ${out.digest}, sent ${digest}`, {
          code: "digest_mismatch",
        });
      }
      opts.onProgress?.(out.size);
      return out;
    } catch (e) {
      if (e instanceof SandboxdError || opts.signal?.aborted || !whole || attempt >= retries) {
        if (e instanceof SandboxdError) throw e;
        throw new ConnectionError(`PUT ${t.path}/raw: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
    }
    await sleep(tr.backoff(attempt + 1), opts.signal);
    const st = await tr.call<{ offset: number }>({
      method: "GET",
      path: `${t.path}/upload`,
      query: { path, upload: id, expectedGeneration: t.generation },
      signal: opts.signal,
    });
    offset = Math.min(st.offset, size ?? 0);
    opts.onProgress?.(offset);
  }
}

/** An open raw read ({@link Sandbox.openFile}): its bytes as a stream, and the whole file's digest. */
export interface RawFile {
  body: ReadableStream<Uint8Array>;
  size: number;
  /** Repr-Digest of the whole file (`sha-256=:…:`), when the daemon sent it. */
  digest: string | undefined;
}

/**
 * Opens the file at `path` for a streamed read (`GET .../files/raw`), from byte `start` when given.
 * @hidden
 */
export async function openFile(t: FileTarget, path: string, start = 0, signal?: AbortSignal): Promise<RawFile> {
  const headers: Record<string, string> = { ...t.headers, Accept: "application/octet-stream" };
  if (start > 0) Object.assign(headers, { Range: `bytes=${start}-`, "Want-Repr-Digest": "sha-256=1" });
  let resp: Response;
  try {
    resp = await t.fetch(t.url(`${t.path}/raw`, { path, expectedGeneration: t.generation }), {
      method: "GET",
      headers,
      signal,
    });
  } catch (e) {
    throw new ConnectionError(`GET ${t.path}/raw: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  if (!resp.ok || !resp.body) throw await fail(resp);
  return {
    body: resp.body,
    size: Number(resp.headers.get("Content-Length") ?? -1),
    digest: parseDigest(resp.headers.get("Repr-Digest")),
  };
}

/** Reads the file at `path` whole and checks its SHA-256 against the daemon's Repr-Digest. @hidden */
export async function download(t: FileTarget, path: string, signal?: AbortSignal): Promise<Uint8Array> {
  const f = await openFile(t, path, 0, signal);
  const data = new Uint8Array(await new Response(f.body).arrayBuffer());
  const got = digestHeader(await sha256(data));
  if (f.digest !== got) {
    throw new SandboxdError(`download ${path}: received ${got}, the sandbox said ${f.digest}`, {
      code: "digest_mismatch",
    });
  }
  return data;
}

/**
 * The changes under a directory (`GET .../files/watch`): an async iterator of {@link FileChange}
 * (kind `overflow` when changes were dropped: read the directory again) that ends with the stream's
 * end event, in {@link FileWatchStream.end}. A pause of the sandbox holds the watch on its connection:
 * {@link FileWatchStream.paused} says so (and `onHeartbeat` hears each heartbeat), and after the resume
 * the changes go on where they were; a terminate or recreate during the pause ends it with its end event.
 */
export class FileWatchStream implements AsyncIterableIterator<FileChange> {
  readonly #stop = new AbortController();
  readonly #changes: AsyncGenerator<FileChange, undefined, undefined>;
  #end: FileWatchEnd | undefined;
  #paused = false;

  /** Made by {@link Sandbox.watch}. @hidden */
  constructor(
    open: (request: RequestOptions) => Promise<Response>,
    t: FileTarget,
    path: string,
    opts: WatchOptions = {},
  ) {
    const signal = opts.signal;
    if (signal?.aborted) this.#stop.abort();
    else signal?.addEventListener("abort", () => this.#stop.abort(), { once: true });
    this.#changes = connection<FileChange>({
      open,
      request: {
        method: "GET",
        path: `${t.path}/watch`,
        query: { path, expectedGeneration: t.generation, recursive: opts.recursive ? "true" : undefined },
      },
      stop: this.#stop.signal,
      silentMs: opts.heartbeatTimeoutMs ?? 45_000,
      what: "watch",
      take: (event, data, queue) => {
        if (event === "heartbeat") {
          const beat = parseHeartbeat(data);
          if (beat === undefined) return; // one that says nothing this client knows: the watch goes on
          this.#paused = beat.state === "paused";
          opts.onHeartbeat?.(beat);
          return;
        }
        if (event !== "change" && event !== "overflow" && event !== "end") return;
        let v: unknown;
        try {
          v = JSON.parse(data);
        } catch {
          throw new SandboxdError(`watch: the data of a ${event} event is not JSON`, { code: "unexpected_response" });
        }
        this.#paused = false;
        if (event === "end") this.#end = v as FileWatchEnd;
        else queue.push(v as FileChange);
      },
      ended: () => this.#end !== undefined,
    });
  }

  /** Why the stream ended, once it has. */
  get end(): FileWatchEnd | undefined {
    return this.#end;
  }

  /**
   * Whether the watch's last heartbeat said the sandbox is paused: a pending `next` waits for the
   * resume on the same connection. False again with the resume's heartbeat, the next change, or the end.
   */
  get paused(): boolean {
    return this.#paused;
  }

  next(): Promise<IteratorResult<FileChange, undefined>> {
    return this.#changes.next();
  }

  async return(): Promise<IteratorResult<FileChange, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /** Closes the connection. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#changes.return(undefined);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
