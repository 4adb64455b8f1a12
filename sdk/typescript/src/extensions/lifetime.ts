// spec.extensions["sandboxd.lifetime"] (api/extensions.yaml, components.schemas.SpecExtensions): how
// long a sandbox lives. A spec asks for a Lifetime; what holds for the generation is recorded in
// providerExtensions["sandboxd.lifetime"] and read back as a RecordedLifetime.

import { SandboxdError, type ValidationError } from "../errors.js";
import type { components } from "../generated/extensions.js";

/** The spec.extensions and providerExtensions key of a sandbox's lifetime. */
export const LIFETIME_KEY = "sandboxd.lifetime";

/**
 * The lifetime a spec asks for (`spec.extensions["sandboxd.lifetime"]`), given to
 * {@link Sandbox.create} as `{ lifetime: { ttlSeconds: 3600 } }`. What it leaves out the daemon's
 * defaults fill in; more than the daemon's maximum is a {@link ValidationError}.
 *
 * - `ttlSeconds`: the sandbox is terminated that long after its create or recreate (a
 *   `sandbox.state_changed` event with reason `ttl_expired`).
 * - `idleSeconds`: once no API call has named the sandbox, and no request of it has been open (a
 *   stream included), for that long, it is paused or terminated (reason `idle`).
 * - `onIdle`: `"pause"` (the default where the provider can pause) or `"terminate"`.
 * - `resumeOnCall`: a command or file call to a sandbox paused that way resumes it first (the default
 *   with `onIdle: "pause"`).
 */
export type Lifetime = NonNullable<components["schemas"]["SpecExtensions"]["sandboxd.lifetime"]>;

/**
 * The lifetime that holds for a sandbox's generation, from `providerExtensions["sandboxd.lifetime"]`
 * ({@link Sandbox.lifetime}): `since` is when the generation was recorded, the start of its lifetime,
 * and `expiresAt` is `since` plus `ttlSeconds` (both RFC 3339 times). A figure the generation has none
 * of is undefined; `resumeOnCall` is true only when an idle pause is resumed by a call.
 */
export interface RecordedLifetime {
  since: string;
  ttlSeconds?: number;
  expiresAt?: string;
  idleSeconds?: number;
  onIdle?: "pause" | "terminate";
  resumeOnCall?: boolean;
}

/**
 * The lifetime recorded in a sandbox's providerExtensions, or undefined; a value that is not one is an
 * `unexpected_response`. @internal
 */
export function recordedLifetime(
  providerExtensions: Record<string, unknown> | undefined,
): RecordedLifetime | undefined {
  const v = providerExtensions?.[LIFETIME_KEY];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || typeof (v as { since?: unknown }).since !== "string") {
    throw new SandboxdError(`providerExtensions["${LIFETIME_KEY}"] is not a lifetime: ${JSON.stringify(v)}`, {
      code: "unexpected_response",
    });
  }
  return v as RecordedLifetime;
}
