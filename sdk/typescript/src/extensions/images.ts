// The group "images and templates" of api/extensions.yaml: the images a provider holds (/v1/images),
// pulled from a registry, imported from an OCI layout or a tarball on the daemon's host, inspected by
// digest, removed and pruned (Client.listImages and the methods beside it). A sandbox runs on one with
// the contract's own field, a create's `image`.

import { ConnectionError, SandboxdError, errorFromResponse } from "../errors.js";
import type { components } from "../generated/extensions.js";
import { sleep, type RequestOptions } from "../transport.js";
import { connection } from "./sse.js";

/**
 * An image in the provider's store: its manifest `digest`, the `names` it is known by, its number of
 * layers, the sandboxes that run on it now (`users`), and its configuration's `env`, `workingDir` and
 * `user`, where it has them.
 */
export type ImageInfo = components["schemas"]["ImageInfo"];

/**
 * How far a pull or an import has come: the image's layers in the store (`layers` of `totalLayers`; a
 * layer the store held already counts) and the compressed bytes fetched (`bytes` of `totalBytes`, the
 * manifest's sizes; `totalBytes` is 0 where bytes are not counted, a docker-save tarball's).
 */
export type ImageProgress = components["schemas"]["ImageProgress"];

/** How {@link Client.pullImage} and {@link Client.importImage} ask. */
export interface ImageOptions {
  /** Aborts the call; the daemon then cancels the pull (what it fetched stays in its store). */
  signal?: AbortSignal | undefined;
  /**
   * How long the answer may take. Default 10 minutes. With `onProgress` it bounds the wait for the
   * stream to begin only; the stream's heartbeats then show that the daemon is at work.
   */
  timeoutMs?: number | undefined;
  /**
   * Told how far the work has come, as the daemon reports it (at most ten times a second; each report's
   * counts are at least the last one's, and the last is the whole image). Given, the call asks for the
   * stream of its progress (`Accept: text/event-stream`); an `error` event in it is thrown as the class
   * of its code, as an error answer is, with the stream's status (200).
   */
  onProgress?: ((progress: ImageProgress) => void) | undefined;
  /**
   * With `onProgress`: how long the stream may stay silent (no report, no heartbeat) before it is taken
   * for dead, a {@link ConnectionError}. Default 45 s, three of the daemon's 15 s heartbeats.
   */
  heartbeatTimeoutMs?: number | undefined;
}

/** What an image stream needs of its client. @hidden */
export interface ImageStreamSource {
  open(request: RequestOptions): Promise<Response>;
  /** Tries in all of an open that got no answer. */
  attempts: number;
  backoff(attempt: number): number;
}

/**
 * Performs a pull or an import (`request`, a POST) as the stream of its progress, telling `onProgress`
 * each report, and returns the image of its `done` event; its `error` event is thrown as the class of
 * its code. A try that got no answer at all is repeated (pulls and imports are safe to repeat); a
 * stream that breaks once begun is a {@link ConnectionError}.
 * @hidden
 */
export async function imageStream(
  src: ImageStreamSource,
  request: Omit<RequestOptions, "signal" | "headers">,
  options: ImageOptions & { onProgress: (progress: ImageProgress) => void },
): Promise<ImageInfo> {
  const what = `${request.method} ${request.path}`;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  const signal = options.signal;
  if (signal?.aborted) throw signal.reason;
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (let attempt = 1; ; attempt++) {
      let status = 200;
      let info: ImageInfo | undefined;
      let failure: SandboxdError | undefined;
      let heard = false;
      const progress = connection<ImageProgress>({
        open: async (req) => {
          const resp = await src.open(req);
          heard = true;
          status = resp.status;
          return resp;
        },
        request: { ...request, timeoutMs: options.timeoutMs ?? 600_000 },
        stop: stop.signal,
        silentMs: options.heartbeatTimeoutMs ?? 45_000,
        what,
        take: (event, data, queue) => {
          if (event === "progress") {
            const p = parseObject(data);
            const n = (k: string) => typeof p?.[k] === "number" && Number.isInteger(p[k]) && (p[k] as number) >= 0;
            if (!p || !n("layers") || !n("totalLayers") || !n("bytes") || !n("totalBytes")) {
              throw garbled(what, event, data);
            }
            queue.push(p as ImageProgress);
          } else if (event === "done") {
            const o = parseObject(data);
            if (!o || typeof o["digest"] !== "string") throw garbled(what, event, data);
            info = o as ImageInfo;
          } else if (event === "error") {
            failure = errorFromResponse(status, data); // an unexpected_response when it is no ErrorResponse
          }
        },
        ended: () => info !== undefined || failure !== undefined,
        json: async (resp) => {
          const o = parseObject(await resp.text());
          if (!o || typeof o["digest"] !== "string") {
            throw new SandboxdError(`${what}: the answer is not an image`, { code: "unexpected_response", status });
          }
          info = o as ImageInfo;
        },
      });
      try {
        for await (const p of progress) options.onProgress(p);
      } catch (e) {
        if (e instanceof ConnectionError && !heard && attempt < Math.max(1, src.attempts) && !stop.signal.aborted) {
          await sleep(src.backoff(attempt), stop.signal).catch(() => {});
          continue;
        }
        throw e;
      }
      if (signal?.aborted) throw signal.reason;
      if (failure) throw failure;
      if (info) return info;
      throw new ConnectionError(`${what}: the stream ended without its answer`, {});
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

function parseObject(data: string): Record<string, unknown> | undefined {
  try {
    const o: unknown = JSON.parse(data);
    return typeof o === "object" && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function garbled(what: string, event: string, data: string): SandboxdError {
  return new SandboxdError(`${what} sent a ${event} event that is not one: ${data.slice(0, 200)}`, {
    code: "unexpected_response",
  });
}
