// The one place requests are made: URL, headers, JSON, deadlines, the mapping of error responses to
// classes, and retries. A request is retried only when its caller says repeating it is safe by the
// contract (reads; a create, which carries its clientRequestId; an action that answers 200 when already
// done), with exponential backoff and a bound: after a lost answer (the connection failed), and for a
// read also after a 500, 502 or 503. A change the daemon did answer with a 5xx is not repeated: its
// answer is final (a provider's failure is recorded on the sandbox), and a retry would only hide it
// behind a later refusal.

import { ConnectionError, SandboxdError, errorFromResponse } from "./errors.js";

/** How a request is retried. */
export interface RetryOptions {
  /** How many times a safe request is tried in all, at least 1. Default 4. */
  attempts: number;
  /** The wait before the first retry, doubling for each next one. Default 100 ms. */
  minDelayMs: number;
  /** The longest wait between two tries. Default 2000 ms. */
  maxDelayMs: number;
}

/**
 * `"safe"`: may be repeated after a lost answer (a connection failure), and a GET also after a 500, 502
 * or 503; `"never"`: tried once.
 */
export type RetryPolicy = "safe" | "never";

/** A request to the daemon, for endpoints the SDK does not wrap (see {@link Client.request}). */
export interface RequestOptions {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** The path below the daemon's URL, starting with `/`, its segments already escaped. */
  path: string;
  /** Query parameters; undefined ones are left out. */
  query?: Record<string, string | number | boolean | undefined> | undefined;
  /** The body, sent as JSON. */
  body?: unknown;
  /** More request headers. */
  headers?: Record<string, string> | undefined;
  /** Whether the request may be repeated. Default: `"safe"` for GET, `"never"` for the rest. */
  retry?: RetryPolicy | undefined;
  /** Aborts the request, and its retries. */
  signal?: AbortSignal | undefined;
  /** How long one try may take, answer read included; 0 for no bound. Default: the client's `requestTimeoutMs`. */
  timeoutMs?: number | undefined;
}

/** @internal */
export interface CallOptions<T> extends RequestOptions {
  /** Reads a 2xx answer; the default parses JSON. */
  read?: (resp: Response) => Promise<T>;
  /**
   * Asked when a retry (not the first try) is answered with an error: it may tell that the first try
   * did take effect and return what it made, or return undefined to let the error stand.
   */
  recover?: (err: SandboxdError) => Promise<T | undefined>;
}

/** @internal */
export interface TransportConfig {
  url: string;
  token: string | undefined;
  fetch: typeof globalThis.fetch;
  retry: RetryOptions;
  requestTimeoutMs: number;
  headers: Record<string, string>;
}

/** @internal */
export class Transport {
  readonly config: TransportConfig;
  readonly #headers: Record<string, string>;

  constructor(config: TransportConfig) {
    this.config = config;
    this.#headers = { Accept: "application/json", ...config.headers };
    if (config.token) this.#headers["Authorization"] = `Bearer ${config.token}`;
  }

  url(path: string, query?: RequestOptions["query"]): string {
    let url = this.config.url + path;
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
      const s = q.toString();
      if (s) url += `?${s}`;
    }
    return url;
  }

  /** Performs the request, retrying it when it is safe, and returns its decoded 2xx answer. */
  async call<T>(opts: CallOptions<T>): Promise<T> {
    const safe = (opts.retry ?? (opts.method === "GET" ? "safe" : "never")) === "safe";
    const attempts = safe ? Math.max(1, this.config.retry.attempts) : 1;
    const init = this.#init(opts);
    const url = this.url(opts.path, opts.query);
    const read = opts.read ?? readJSON<T>;
    for (let attempt = 1; ; attempt++) {
      const out = await this.#try(url, init, opts, read);
      if (out.ok) return out.value;
      if (attempt > 1 && opts.recover && out.error.status !== undefined) {
        const value = await opts.recover(out.error);
        if (value !== undefined) return value;
      }
      if (!out.retryable || attempt >= attempts) throw out.error;
      await sleep(this.backoff(attempt), opts.signal);
    }
  }

  /**
   * Opens a streaming answer: a 2xx Response whose body is left to the caller, who aborts `signal` to
   * close it. It is tried once; `timeoutMs` bounds the wait for the answer's headers only.
   */
  async open(opts: RequestOptions): Promise<Response> {
    const dl = deadline(opts.signal, opts.timeoutMs ?? this.config.requestTimeoutMs);
    try {
      const resp = await this.config.fetch(this.url(opts.path, opts.query), { ...this.#init(opts), signal: dl.signal });
      dl.clearTimer();
      if (resp.ok) return resp;
      throw errorFromResponse(resp.status, await resp.text().catch(() => ""));
    } catch (e) {
      dl.clearTimer();
      if (e instanceof SandboxdError) throw e;
      throw this.#failure(opts, e, dl.timedOut);
    }
  }

  /** The wait before retry number `attempt`: doubling from minDelayMs up to maxDelayMs, less up to a quarter of jitter. */
  backoff(attempt: number): number {
    const { minDelayMs, maxDelayMs } = this.config.retry;
    const d = Math.min(maxDelayMs, minDelayMs * 2 ** Math.min(attempt - 1, 20));
    return d - Math.random() * (d / 4);
  }

  #init(opts: RequestOptions): RequestInit {
    const headers: Record<string, string> = opts.headers ? { ...this.#headers, ...opts.headers } : this.#headers;
    if (opts.body === undefined) return { method: opts.method, headers };
    return {
      method: opts.method,
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify(opts.body),
    };
  }

  async #try<T>(
    url: string,
    init: RequestInit,
    opts: RequestOptions,
    read: (resp: Response) => Promise<T>,
  ): Promise<{ ok: true; value: T } | { ok: false; error: SandboxdError; retryable: boolean }> {
    const dl = deadline(opts.signal, opts.timeoutMs ?? this.config.requestTimeoutMs);
    try {
      const resp = await this.config.fetch(url, { ...init, signal: dl.signal });
      if (resp.ok) return { ok: true, value: await read(resp) };
      const error = errorFromResponse(resp.status, await resp.text());
      const transient = resp.status === 500 || resp.status === 502 || resp.status === 503;
      return { ok: false, error, retryable: transient && opts.method === "GET" };
    } catch (e) {
      if (e instanceof SandboxdError) return { ok: false, error: e, retryable: false };
      if (opts.signal?.aborted) throw opts.signal.reason;
      return { ok: false, error: this.#failure(opts, e, dl.timedOut), retryable: true };
    } finally {
      dl.done();
    }
  }

  #failure(opts: RequestOptions, cause: unknown, timedOut: boolean): SandboxdError {
    if (opts.signal?.aborted) throw opts.signal.reason;
    const what = `${opts.method} ${opts.path}`;
    if (timedOut)
      return new ConnectionError(`${what}: no answer within ${opts.timeoutMs ?? this.config.requestTimeoutMs} ms`, {
        cause,
      });
    const reason =
      cause instanceof Error ? (cause.cause instanceof Error ? cause.cause.message : cause.message) : String(cause);
    return new ConnectionError(`${what}: ${reason}`, { cause });
  }
}

/** Parses a JSON answer; a body that is not JSON is an `unexpected_response`. */
async function readJSON<T>(resp: Response): Promise<T> {
  const text = await resp.text();
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SandboxdError(`answer is not JSON: ${text.slice(0, 200)}`, {
      code: "unexpected_response",
      status: resp.status,
    });
  }
}

/**
 * A signal that aborts when parent does or when ms pass (0: never). timedOut says which. done() lets go
 * of the timer and the parent; clearTimer() of the timer alone, for a stream whose body outlives it.
 * @internal
 */
export function deadline(parent: AbortSignal | undefined, ms: number) {
  const ctl = new AbortController();
  let timedOut = false;
  const onAbort = () => ctl.abort(parent?.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  let timer: ReturnType<typeof setTimeout> | undefined =
    ms > 0
      ? setTimeout(() => {
          timedOut = true;
          ctl.abort(new ConnectionError(`no answer within ${ms} ms`, {}));
        }, ms)
      : undefined;
  return {
    signal: ctl.signal,
    get timedOut() {
      return timedOut;
    },
    clearTimer() {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
    done() {
      this.clearTimer();
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

/** Waits ms, or rejects with signal's reason when it aborts first. @internal */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
