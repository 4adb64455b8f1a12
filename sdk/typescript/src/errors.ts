/**
 * The errors of the SDK. Every error the server answers becomes the class of its `error.code` (never
 * guessed from the HTTP status: 409 has three meanings); a code this version does not know becomes the
 * base class, {@link SandboxdError}, so a newer server never breaks an older client. Errors that the
 * client itself finds (a wait that timed out, a sandbox that failed, a connection that could not be made)
 * are subclasses of the same base with codes of their own, so `catch (e) { if (e instanceof
 * SandboxdError) ... }` sees everything the SDK throws.
 *
 * @module
 */

import type { SandboxResource } from "./types.js";

/** Fields every {@link SandboxdError} is made from. */
export interface SandboxdErrorInit {
  /** `error.code` of the response, or the client's own code. */
  code: string;
  /** The HTTP status, when the error is a server's answer. */
  status?: number | undefined;
  /** Members of the response's `error` object beyond `code` and `message`, when it has any. */
  details?: Record<string, unknown> | undefined;
  /** What caused it: the network error of a {@link ConnectionError}, say. */
  cause?: unknown;
}

/**
 * The base of every error the SDK throws. `code` is the contract's `error.code` (`not_found`,
 * `generation_conflict`, ...) when the server answered, or one of the client's own codes
 * (`timeout`, `connection`, `sandbox_failed`, `command_failed`, `unexpected_response`).
 */
export class SandboxdError extends Error {
  override name = "SandboxdError";
  /** `error.code` of the response, or the client's own code. */
  readonly code: string;
  /** The HTTP status; undefined for an error the client found itself. */
  readonly status: number | undefined;
  /** Members of the response's `error` object beyond `code` and `message`, when there are any. */
  readonly details: Record<string, unknown> | undefined;

  constructor(message: string, init: SandboxdErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.status = init.status;
    this.details = init.details;
  }
}

/** `invalid_request` (400): the request broke the contract's schema or a documented bound. */
export class ValidationError extends SandboxdError {
  override name = "ValidationError";
}

/** `unauthenticated` (401): the daemon wants a bearer token and got none, or a wrong one. */
export class Unauthenticated extends SandboxdError {
  override name = "Unauthenticated";
}

/** `not_found` (404): no such sandbox, file or route. */
export class NotFound extends SandboxdError {
  override name = "NotFound";
}

/** `method_not_allowed` (405): the path exists but not with this method. */
export class MethodNotAllowed extends SandboxdError {
  override name = "MethodNotAllowed";
}

/** `request_too_large` (413): the request body is over the daemon's limit (32 MiB). */
export class RequestTooLarge extends SandboxdError {
  override name = "RequestTooLarge";
}

/**
 * `generation_conflict` (409): the call carried a generation that is no longer the sandbox's. The
 * sandbox was recreated since this client last looked; {@link Sandbox.refresh} catches up.
 */
export class GenerationConflict extends SandboxdError {
  override name = "GenerationConflict";
  /** The sandbox's current generation, when the server said it. */
  readonly currentGeneration: number | undefined;

  constructor(message: string, init: SandboxdErrorInit & { currentGeneration?: number | undefined }) {
    super(message, init);
    this.currentGeneration = init.currentGeneration ?? currentGenerationIn(message);
  }
}

/**
 * `idempotency_conflict` (409): the `clientRequestId` names another create intent (another spec), or a
 * generation that a recreate has replaced.
 */
export class IdempotencyConflict extends SandboxdError {
  override name = "IdempotencyConflict";
}

/**
 * `invalid_state` (409): the action does not apply to the sandbox's state (a command in a paused
 * sandbox, a recreate of one that is not terminated). Also thrown, without a status, by a wait that
 * finds the sandbox settled in a state it will not leave by itself.
 */
export class InvalidState extends SandboxdError {
  override name = "InvalidState";
}

/** `unsupported_capability` (422): the provider cannot do what was asked (`requiredCapabilities`, pause). */
export class UnsupportedCapability extends SandboxdError {
  override name = "UnsupportedCapability";
}

/** `provider_protocol_error` (502): the provider answered something malformed. */
export class ProviderProtocolError extends SandboxdError {
  override name = "ProviderProtocolError";
}

/**
 * `port_unreachable` (502): nothing answered on a sandbox's port that the ports proxy reached: nothing
 * listens there, or what listens answered no HTTP.
 */
export class PortUnreachable extends SandboxdError {
  override name = "PortUnreachable";
}

/** `provider_unavailable` (503): the provider failed or could not be reached. */
export class ProviderUnavailable extends SandboxdError {
  override name = "ProviderUnavailable";
}

/**
 * `event_history_unavailable` (410): the event cursor is older than the history the daemon keeps;
 * events between it and the oldest kept one are gone.
 */
export class EventHistoryUnavailable extends SandboxdError {
  override name = "EventHistoryUnavailable";
}

/** `internal` (500): the daemon failed unexpectedly; the details are in its log. */
export class InternalError extends SandboxdError {
  override name = "InternalError";
}

/** Code `timeout`: a wait for a state, or a request, did not finish in time. */
export class WaitTimeout extends SandboxdError {
  override name = "WaitTimeout";
  /** The sandbox as last seen, when the wait was for one. */
  readonly sandbox: SandboxResource | undefined;

  constructor(message: string, init: Omit<SandboxdErrorInit, "code"> & { sandbox?: SandboxResource | undefined }) {
    super(message, { ...init, code: "timeout" });
    this.sandbox = init.sandbox;
  }
}

/** Code `connection`: the daemon could not be reached, or the connection broke, after every retry. */
export class ConnectionError extends SandboxdError {
  override name = "ConnectionError";

  constructor(message: string, init: Omit<SandboxdErrorInit, "code">) {
    super(message, { ...init, code: "connection" });
  }
}

/**
 * Code `sandbox_failed`: the sandbox reached `failed` while the client waited for another state.
 * `failure` is the reason the daemon recorded.
 */
export class SandboxFailed extends SandboxdError {
  override name = "SandboxFailed";
  /** The sandbox as last seen. */
  readonly sandbox: SandboxResource;
  /** Why it failed, as the daemon recorded it (`failure.code`, `failure.message`). */
  readonly failure: { code: string; message: string };

  constructor(sandbox: SandboxResource) {
    const failure = sandbox.failure ?? { code: "unknown", message: "the daemon recorded no reason" };
    super(`sandbox ${sandbox.id} (generation ${sandbox.generation}) failed: ${failure.code}: ${failure.message}`, {
      code: "sandbox_failed",
    });
    this.sandbox = sandbox;
    this.failure = failure;
  }
}

/** The one table from `error.code` to class. Codes not in it become {@link SandboxdError}. */
const classes: Record<string, new (message: string, init: SandboxdErrorInit) => SandboxdError> = {
  invalid_request: ValidationError,
  unauthenticated: Unauthenticated,
  not_found: NotFound,
  method_not_allowed: MethodNotAllowed,
  request_too_large: RequestTooLarge,
  generation_conflict: GenerationConflict,
  idempotency_conflict: IdempotencyConflict,
  invalid_state: InvalidState,
  unsupported_capability: UnsupportedCapability,
  provider_protocol_error: ProviderProtocolError,
  port_unreachable: PortUnreachable,
  provider_unavailable: ProviderUnavailable,
  event_history_unavailable: EventHistoryUnavailable,
  internal: InternalError,
};

/** The error codes of the contract, each with its class. */
export const errorCodes: readonly string[] = Object.freeze(Object.keys(classes));

/**
 * Builds the error of a response from its status and body text: the class of `error.code`, or the
 * base class for an unknown code or a body that is not an `ErrorResponse` (a proxy's page, say).
 * @internal
 */
export function errorFromResponse(status: number, text: string): SandboxdError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const err = isObject(body) ? body["error"] : undefined;
  if (!isObject(err) || typeof err["code"] !== "string" || typeof err["message"] !== "string") {
    const snippet = text.trim().slice(0, 200);
    return new SandboxdError(`HTTP ${status}${snippet ? `: ${snippet}` : ""}`, { code: "unexpected_response", status });
  }
  const { code, message, ...rest } = err as { code: string; message: string } & Record<string, unknown>;
  const details = Object.keys(rest).length > 0 ? rest : undefined;
  const Class = Object.hasOwn(classes, code) ? classes[code]! : SandboxdError;
  return new Class(message, { code, status, details });
}

/** The daemon says a conflict's current generation as "..., current N: ..." in its message. */
function currentGenerationIn(message: string): number | undefined {
  const m = /\bcurrent (\d+)\b/.exec(message);
  return m ? Number(m[1]) : undefined;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
