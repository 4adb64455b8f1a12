// The group "ports" of api/extensions.yaml: the proxy to a port inside a sandbox
// (/v1/sandboxes/{sandboxId}/ports/{port}/{path...}, Sandbox.portUrl) and preview tokens
// (POST /v1/sandboxes/{sandboxId}/ports/{port}/preview-tokens, Sandbox.previewToken), capability
// portForwarding.

import type { components } from "../generated/extensions.js";

/**
 * A token for one port of one sandbox generation, and the preview URL that carries it once (as its
 * `sandboxd_preview` query parameter; a browser keeps it as a cookie of that host). A client that is no
 * browser sends `token` in an `X-Sandboxd-Preview-Token` header instead. Recreating the sandbox revokes it.
 */
export type PreviewToken = components["schemas"]["PreviewToken"];

/** How {@link Sandbox.previewToken} asks. */
export interface PreviewTokenOptions {
  /** How long the token lasts, in seconds, at most 7 days. Default: the daemon's, an hour. */
  ttlSeconds?: number | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * A TCP port as the daemon takes it: a number, or plain decimal, from 1 to 65535, without a sign, a
 * leading zero or a space. Throws a RangeError for anything else.
 */
export function parsePort(port: number | string): number {
  const s = typeof port === "number" ? String(port) : port;
  if (typeof s !== "string" || !/^[1-9][0-9]{0,4}$/.test(s) || Number(s) > 65535) {
    throw new RangeError(
      `port ${JSON.stringify(port)}: a port is a decimal number from 1 to 65535 without a sign or a leading zero`,
    );
  }
  return Number(s);
}
