// The client of one sandboxd: configuration, the daemon-wide calls, and the seam for calls the SDK does
// not wrap yet.

import { EventHistoryUnavailable, SandboxdError } from "./errors.js";
import { EventStream, type EventsOptions } from "./events.js";
import { imageStream, type ImageInfo, type ImageOptions } from "./extensions/images.js";
import type { ForkSpec, SnapshotInfo, TemplateBuild, TemplateInfo } from "./extensions/snapshots.js";
import { encodeBase64 } from "./base64.js";
import type { Volume, VolumeCreate } from "./extensions/volumes.js";
import { Sandbox, type CreateOptions } from "./sandbox.js";
import { Transport, type RequestOptions, type RetryOptions } from "./transport.js";
import type { CreateSpec, RuntimeInfo, SandboxEvent, SandboxResource } from "./types.js";

/** Where sandboxd listens unless told otherwise. */
export const DEFAULT_URL = "http://127.0.0.1:4311";

/** How a {@link Client} reaches its daemon. */
export interface ClientOptions {
  /** The daemon's URL. Default: `$SANDBOXD_URL` where an environment exists, else {@link DEFAULT_URL}. */
  url?: string | undefined;
  /** The bearer token. Default: `$SANDBOXD_TOKEN` where an environment exists, else none. */
  token?: string | undefined;
  /** The `fetch` to send requests with. Default: the global one. */
  fetch?: typeof globalThis.fetch | undefined;
  /** How safe requests are retried. Default 4 tries, 100 ms to 2 s apart. */
  retry?: Partial<RetryOptions> | undefined;
  /**
   * How long one try of a request may take, its answer read included (a command gets its own
   * `timeoutSeconds` on top); 0 for no bound. Default 60 s.
   */
  requestTimeoutMs?: number | undefined;
  /** Headers sent with every request. */
  headers?: Record<string, string> | undefined;
}

/** What every call takes. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal | undefined;
}

/** Which events {@link Client.listEvents} returns. */
export interface ListEventsOptions extends CallOptions {
  /** Events with a cursor above this one. Default 0. */
  after?: number | undefined;
  /** Only this sandbox's events. */
  sandbox?: string | { readonly id: string } | undefined;
}

// A sandbox id no sandbox has (ids are "sbx_" and base32): a filter that matches nothing, for asking
// whether a cursor is still kept.
const noSandbox = "sbx_-";

/**
 * A client of one sandboxd. It holds no connection of its own (requests go through `fetch`), so it is
 * cheap to make and safe to share.
 *
 * ```ts
 * const client = new Client({ url: "http://127.0.0.1:4311", token: "..." });
 * const info = await client.runtime();
 * ```
 */
export class Client {
  /** The daemon's URL, without a trailing slash. */
  readonly url: string;
  /** @internal */
  readonly transport: Transport;
  #knownCursor: number | undefined;

  /**
   * Makes a client. Nothing is sent until the first call.
   * @throws TypeError when the URL is not an http(s) URL, or the runtime has no `fetch` and none is given.
   */
  constructor(options: ClientOptions = {}) {
    const url = (options.url ?? env("SANDBOXD_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    if (!/^https?:\/\/[^/]/.test(url)) {
      throw new TypeError(`sandboxd URL ${JSON.stringify(url)}: want http://host:port`);
    }
    if (!options.fetch && typeof globalThis.fetch !== "function") {
      throw new TypeError("no fetch in this runtime: pass options.fetch");
    }
    this.url = url;
    this.transport = new Transport({
      url,
      token: options.token ?? env("SANDBOXD_TOKEN"),
      // The global is looked up on each call, so that one installed later is used, and called unbound,
      // as browsers want.
      fetch: options.fetch ?? ((input, init) => globalThis.fetch(input, init)),
      retry: {
        attempts: options.retry?.attempts ?? 4,
        minDelayMs: options.retry?.minDelayMs ?? 100,
        maxDelayMs: options.retry?.maxDelayMs ?? 2000,
      },
      requestTimeoutMs: options.requestTimeoutMs ?? 60_000,
      headers: options.headers ?? {},
    });
  }

  /** Resolves when the daemon accepts requests. */
  async health(options: CallOptions = {}): Promise<void> {
    await this.transport.call({ method: "GET", path: "/healthz", signal: options.signal });
  }

  /**
   * The protocol version and the provider's manifest: its name, runtime class and capabilities.
   * @throws {@link ProviderProtocolError}, {@link ProviderUnavailable}
   */
  runtime(options: CallOptions = {}): Promise<RuntimeInfo> {
    return this.transport.call<RuntimeInfo>({ method: "GET", path: "/v1/runtime", signal: options.signal });
  }

  /**
   * The daemon's metrics (`GET /metrics`) in the Prometheus text exposition format, version 0.0.4:
   * requests by operation and status (`sandboxd_http_*`), provider operations, sandboxes by state, the
   * event log, the warm pool and the daemon's own figures. It needs the token when the daemon has tokens.
   * @throws {@link Unauthenticated}
   */
  metrics(options: CallOptions = {}): Promise<string> {
    return this.transport.call<string>({
      method: "GET",
      path: "/metrics",
      headers: { Accept: "text/plain" },
      signal: options.signal,
      read: async (resp) => {
        const type = resp.headers.get("Content-Type") ?? "";
        if (!type.startsWith("text/plain")) {
          throw new SandboxdError(`GET /metrics: answer of type ${JSON.stringify(type)}, want text/plain`, {
            code: "unexpected_response",
            status: resp.status,
          });
        }
        return resp.text();
      },
    });
  }

  /**
   * The images the provider holds, by digest (`GET /v1/images`).
   * @throws {@link UnsupportedCapability} (a provider without images, such as `host`),
   * {@link ProviderUnavailable}
   */
  async listImages(options: CallOptions = {}): Promise<ImageInfo[]> {
    const out = await this.transport.call<{ images: ImageInfo[] }>({
      method: "GET",
      path: "/v1/images",
      signal: options.signal,
    });
    return out.images;
  }

  /**
   * Fetches an image from its registry (`registry/repository:tag` or `...@sha256:...`) and names it by
   * that reference; answers once it is in the store (the wait is `timeoutMs`, default 10 minutes). A
   * create's `image: reference` then runs on it. Safe to repeat. With `onProgress`, it is told how far
   * the pull has come ({@link ImageOptions}).
   *
   * ```ts
   * const image = await client.pullImage("registry.example/tools/busybox:1", {
   *   onProgress: (p) => console.log(`${p.layers}/${p.totalLayers} layers, ${p.bytes}/${p.totalBytes} bytes`),
   * });
   * ```
   * @throws {@link ValidationError}, {@link NotFound} (no such image in the registry),
   * {@link UnsupportedCapability}, {@link ProviderUnavailable}
   */
  pullImage(reference: string, options: ImageOptions = {}): Promise<ImageInfo> {
    return this.#imageWork({ method: "POST", path: "/v1/images/pull", body: { reference } }, options);
  }

  /**
   * Adds the image of an OCI layout directory or a docker-save / oci-archive tarball at `hostPath` on
   * the daemon's host (not this client's), named `name` (`repository:tag`). Safe to repeat. With
   * `onProgress`, it is told how far the import has come ({@link ImageOptions}; a docker-save
   * tarball's bytes are not counted).
   * @throws {@link ValidationError} (a path or archive the daemon refuses), {@link UnsupportedCapability},
   * {@link ProviderUnavailable}
   */
  importImage(hostPath: string, name: string, options: ImageOptions = {}): Promise<ImageInfo> {
    return this.#imageWork({ method: "POST", path: "/v1/images/import", body: { path: hostPath, name } }, options);
  }

  #imageWork(request: Omit<RequestOptions, "signal" | "headers">, options: ImageOptions): Promise<ImageInfo> {
    const { onProgress } = options;
    if (onProgress) {
      const t = this.transport;
      const src = {
        open: (r: RequestOptions) => t.open(r),
        attempts: t.config.retry.attempts,
        backoff: (a: number) => t.backoff(a),
      };
      return imageStream(src, request, { ...options, onProgress });
    }
    return this.transport.call<ImageInfo>({
      ...request,
      retry: "safe",
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 600_000,
    });
  }

  /**
   * The image of that manifest digest (`sha256:` and 64 hex digits).
   * @throws {@link ValidationError}, {@link NotFound}, {@link UnsupportedCapability}
   */
  getImage(digest: string, options: CallOptions = {}): Promise<ImageInfo> {
    return this.transport.call<ImageInfo>({
      method: "GET",
      path: `/v1/images/digest/${encodeURIComponent(digest)}`,
      signal: options.signal,
    });
  }

  /**
   * Forgets an image by name (that name only) or by digest (the image and all its names); returns the
   * reference removed. Not repeated after a lost answer (a repeat would meet it gone).
   * @throws {@link NotFound}, {@link InvalidState} (a sandbox runs on it), {@link UnsupportedCapability}
   */
  async removeImage(reference: string, options: CallOptions = {}): Promise<string> {
    const out = await this.transport.call<{ reference: string }>({
      method: "POST",
      path: "/v1/images/remove",
      body: { reference },
      signal: options.signal,
    });
    return out.reference;
  }

  /**
   * Removes the images no name and no sandbox holds, and the layers no image has; returns the number of
   * layers removed.
   * @throws {@link UnsupportedCapability}
   */
  async pruneImages(options: CallOptions = {}): Promise<number> {
    const out = await this.transport.call<{ layersRemoved: number }>({
      method: "POST",
      path: "/v1/images/prune",
      retry: "safe",
      signal: options.signal,
    });
    return out.layersRemoved;
  }

  /**
   * Captures the filesystem of a ready or paused sandbox on an image or a template, frozen for the
   * instant it takes, as a snapshot (`POST /v1/sandboxes/{id}/snapshots`); with `name`, the snapshot is
   * that template's newest version. Not repeated after a lost answer (a repeat would make another).
   * @throws {@link NotFound}, {@link GenerationConflict}, {@link InvalidState} (not running, or on no
   * image), {@link ValidationError}, {@link UnsupportedCapability}
   */
  snapshot(
    sandboxId: string,
    expectedGeneration: number,
    options: CallOptions & { name?: string | undefined; timeoutMs?: number | undefined } = {},
  ): Promise<SnapshotInfo> {
    return this.transport.call<SnapshotInfo>({
      method: "POST",
      path: `/v1/sandboxes/${encodeURIComponent(sandboxId)}/snapshots`,
      body: options.name === undefined ? { expectedGeneration } : { expectedGeneration, name: options.name },
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 600_000,
    });
  }

  /**
   * Every snapshot, oldest first.
   * @throws {@link UnsupportedCapability}
   */
  async listSnapshots(options: CallOptions = {}): Promise<SnapshotInfo[]> {
    const out = await this.transport.call<{ snapshots: SnapshotInfo[] }>({
      method: "GET",
      path: "/v1/snapshots",
      signal: options.signal,
    });
    return out.snapshots;
  }

  /**
   * One snapshot, by id.
   * @throws {@link NotFound}, {@link UnsupportedCapability}
   */
  getSnapshot(id: string, options: CallOptions = {}): Promise<SnapshotInfo> {
    return this.transport.call<SnapshotInfo>({
      method: "GET",
      path: `/v1/snapshots/${encodeURIComponent(id)}`,
      signal: options.signal,
    });
  }

  /**
   * Removes a snapshot and the template versions that are it.
   * @throws {@link NotFound}, {@link InvalidState} (a sandbox runs on it), {@link UnsupportedCapability}
   */
  async deleteSnapshot(id: string, options: CallOptions = {}): Promise<void> {
    await this.#deleteAt(`/v1/snapshots/${encodeURIComponent(id)}`, options);
  }

  /**
   * Creates `count` (1 to 32) sandboxes of a snapshot, each with its own copy-on-write filesystem, and
   * returns their ids; `spec` is what each has besides the snapshot. With a `clientRequestId`, a repeat
   * makes no more sandboxes, and a lost answer is asked again.
   * @throws {@link ValidationError}, {@link NotFound}, {@link UnsupportedCapability}
   */
  async fork(
    id: string,
    count: number,
    options: CallOptions & {
      clientRequestId?: string | undefined;
      spec?: ForkSpec | undefined;
      timeoutMs?: number | undefined;
    } = {},
  ): Promise<string[]> {
    const body: Record<string, unknown> = { count };
    if (options.clientRequestId !== undefined) body["clientRequestId"] = options.clientRequestId;
    if (options.spec !== undefined) body["spec"] = options.spec;
    const out = await this.transport.call<{ sandboxIds: string[] }>({
      method: "POST",
      path: `/v1/snapshots/${encodeURIComponent(id)}/fork`,
      body,
      ...(options.clientRequestId !== undefined ? { retry: "safe" as const } : {}),
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 600_000,
    });
    return out.sandboxIds;
  }

  /**
   * Builds a new version of a template: a sandbox of `baseImage` runs the steps in order, then is
   * snapshotted as the name's newest version; returns the template with that version only.
   * @throws {@link ValidationError} (a step failed), {@link NotFound}, {@link UnsupportedCapability}
   */
  buildTemplate(
    build: TemplateBuild,
    options: CallOptions & { timeoutMs?: number | undefined } = {},
  ): Promise<TemplateInfo> {
    const steps = (build.steps ?? []).map((st) => {
      if ("run" in st) return { run: st.run };
      const c = st.file.content;
      const file: Record<string, unknown> = {
        path: st.file.path,
        content: encodeBase64(typeof c === "string" ? new TextEncoder().encode(c) : c),
      };
      if (st.file.mode !== undefined) file["mode"] = st.file.mode;
      return { file };
    });
    const body: Record<string, unknown> = { name: build.name, baseImage: build.baseImage, steps };
    if (build.env !== undefined) body["env"] = build.env;
    if (build.workdir !== undefined) body["workdir"] = build.workdir;
    return this.transport.call<TemplateInfo>({
      method: "POST",
      path: "/v1/templates",
      body,
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 1_800_000,
    });
  }

  /**
   * Every template, by name.
   * @throws {@link UnsupportedCapability}
   */
  async listTemplates(options: CallOptions = {}): Promise<TemplateInfo[]> {
    const out = await this.transport.call<{ templates: TemplateInfo[] }>({
      method: "GET",
      path: "/v1/templates",
      signal: options.signal,
    });
    return out.templates;
  }

  /**
   * A template (`name`) or one version of it (`name@version`, `name@sha256:...`).
   * @throws {@link ValidationError}, {@link NotFound}, {@link UnsupportedCapability}
   */
  getTemplate(ref: string, options: CallOptions = {}): Promise<TemplateInfo> {
    return this.transport.call<TemplateInfo>({
      method: "GET",
      path: `/v1/templates/${encodeURIComponent(ref)}`,
      signal: options.signal,
    });
  }

  /**
   * Removes a template's versions, or the one named.
   * @throws {@link NotFound}, {@link InvalidState} (a sandbox runs on one), {@link UnsupportedCapability}
   */
  async deleteTemplate(ref: string, options: CallOptions = {}): Promise<void> {
    await this.#deleteAt(`/v1/templates/${encodeURIComponent(ref)}`, options);
  }

  async #deleteAt(path: string, options: CallOptions): Promise<void> {
    await this.transport.call<undefined>({
      method: "DELETE",
      path,
      signal: options.signal,
      read: async (resp) => {
        await resp.body?.cancel().catch(() => {});
        return undefined;
      },
    });
  }

  /**
   * Makes an empty persistent volume (`POST /v1/volumes`), which sandboxes mount with a create's
   * `volumes: [{ name, mountPath: "/data" }]`; what one sandbox writes there outlives it. Not retried
   * after a lost answer (a repeat would meet the volume the first one made).
   * @throws {@link ValidationError} (a name or size the daemon refuses), {@link InvalidState} (a volume
   * of that name exists), {@link UnsupportedCapability} (no `persistentVolume`, such as `host`),
   * {@link ProviderUnavailable}
   */
  createVolume(volume: VolumeCreate, options: CallOptions = {}): Promise<Volume> {
    return this.transport.call<Volume>({ method: "POST", path: "/v1/volumes", body: volume, signal: options.signal });
  }

  /**
   * Every volume, with the live sandboxes that mount it.
   * @throws {@link UnsupportedCapability}
   */
  async listVolumes(options: CallOptions = {}): Promise<Volume[]> {
    const out = await this.transport.call<{ volumes: Volume[] }>({
      method: "GET",
      path: "/v1/volumes",
      signal: options.signal,
    });
    return out.volumes;
  }

  /**
   * The volume of that name.
   * @throws {@link NotFound}, {@link UnsupportedCapability}
   */
  getVolume(name: string, options: CallOptions = {}): Promise<Volume> {
    return this.transport.call<Volume>({
      method: "GET",
      path: `/v1/volumes/${encodeURIComponent(name)}`,
      signal: options.signal,
    });
  }

  /**
   * Removes a volume and its data.
   * @throws {@link InvalidState} while a sandbox that is not terminated mounts it, {@link NotFound},
   * {@link UnsupportedCapability}
   */
  async deleteVolume(name: string, options: CallOptions = {}): Promise<void> {
    await this.transport.call<undefined>({
      method: "DELETE",
      path: `/v1/volumes/${encodeURIComponent(name)}`,
      signal: options.signal,
      read: async (resp) => {
        await resp.body?.cancel().catch(() => {});
        return undefined;
      },
    });
  }

  /** Creates a sandbox and waits until it is ready: {@link Sandbox.create}. */
  createSandbox(spec: CreateSpec = {}, options: CreateOptions = {}): Promise<Sandbox> {
    return Sandbox.create(this, spec, options);
  }

  /**
   * The sandbox with this id, as it is now.
   * @throws {@link NotFound}
   */
  getSandbox(id: string, options: CallOptions = {}): Promise<Sandbox> {
    return Sandbox.connect(this, id, options);
  }

  /** Every sandbox the daemon knows. */
  async listSandboxes(options: CallOptions = {}): Promise<Sandbox[]> {
    const out = await this.transport.call<{ sandboxes: SandboxResource[] }>({
      method: "GET",
      path: "/v1/sandboxes",
      signal: options.signal,
    });
    return out.sandboxes.map((r) => new Sandbox(this, r));
  }

  /**
   * One page (at most 1000) of the events after `after`, oldest first. Page on by passing the last
   * cursor you got; an empty page means there is nothing newer yet.
   * @throws {@link EventHistoryUnavailable} when `after` is older than the history the daemon keeps.
   */
  async listEvents(options: ListEventsOptions = {}): Promise<SandboxEvent[]> {
    const sandboxId = typeof options.sandbox === "string" ? options.sandbox : options.sandbox?.id;
    const out = await this.transport.call<{ events: SandboxEvent[] }>({
      method: "GET",
      path: "/v1/events",
      query: { after: options.after ?? 0, sandboxId },
      signal: options.signal,
    });
    const last = out.events[out.events.length - 1];
    if (last) this.noteCursor(last.cursor);
    return out.events;
  }

  /**
   * Follows the event log as an async iterator (see {@link EventStream}): the events the daemon keeps
   * after `after`, then new ones as they happen. It reconnects by itself with `Last-Event-ID`.
   */
  events(options: EventsOptions = {}): EventStream {
    return new EventStream(this, options);
  }

  /**
   * Sends a request the SDK has no method for (an endpoint newer than this version, say), with the
   * client's URL, token, deadlines, retries and error classes, and returns the decoded JSON answer.
   * `retry` defaults to `"safe"` for GET and `"never"` otherwise: say `"safe"` only for a call the
   * contract lets you repeat.
   *
   * ```ts
   * const info = await client.request<RuntimeInfo>({ method: "GET", path: "/v1/runtime" });
   * ```
   */
  request<T = unknown>(options: RequestOptions): Promise<T> {
    return this.transport.call<T>(options);
  }

  /** Remembers a cursor this client has seen. @internal */
  noteCursor(cursor: number): void {
    if (this.#knownCursor === undefined || cursor > this.#knownCursor) this.#knownCursor = cursor;
  }

  /**
   * A cursor that no event to come is at or below, and that the daemon still keeps, to follow a
   * sandbox's events from without missing any: the newest this client has seen, or, when it has seen
   * none (or `fresh` is set, after a 410), the oldest the daemon keeps, found by asking whether a
   * cursor is kept (a filtered page that matches no sandbox is empty, or 410).
   * @internal
   */
  async startCursor(signal?: AbortSignal, fresh = false): Promise<number> {
    if (this.#knownCursor !== undefined && !fresh) return this.#knownCursor;
    const kept = async (after: number): Promise<boolean> => {
      try {
        await this.transport.call({
          method: "GET",
          path: "/v1/events",
          query: { after, sandboxId: noSandbox },
          signal,
        });
        return true;
      } catch (e) {
        if (e instanceof EventHistoryUnavailable) return false;
        throw e;
      }
    };
    let found = 0;
    if (!(await kept(0))) {
      // Double until a kept cursor, then halve the gap: the boundary is the oldest kept event less one.
      let lo = 0;
      let hi = 1;
      while (!(await kept(hi))) [lo, hi] = [hi, hi * 2];
      while (hi - lo > 1) {
        const mid = Math.floor((lo + hi) / 2);
        if (await kept(mid)) hi = mid;
        else lo = mid;
      }
      found = hi;
    }
    if (fresh) this.#knownCursor = found;
    else this.noteCursor(found);
    return found;
  }
}

/** Reads an environment variable where the runtime has an environment (Node, Bun, Deno with --allow-env). */
function env(name: string): string | undefined {
  try {
    const g = globalThis as {
      process?: { env?: Record<string, string | undefined> };
      Deno?: { env?: { get(name: string): string | undefined } };
    };
    const v = g.process?.env?.[name] ?? g.Deno?.env?.get(name);
    return v === "" ? undefined : v;
  } catch {
    return undefined; // Deno without the permission, say
  }
}
