/**
 * The TypeScript client of sandboxd. Start with {@link Client} and {@link Sandbox.create}.
 *
 * ```ts
 * import { Client, Sandbox } from "@sandboxd/sdk";
 *
 * const client = new Client(); // $SANDBOXD_URL, $SANDBOXD_TOKEN
 * await using sb = await Sandbox.create(client);
 * const r = await sb.run(["sh", "-c", "echo $((6*7))"]);
 * console.log(r.stdoutText); // 42
 * ```
 *
 * @packageDocumentation
 */

export { Client, DEFAULT_URL, type CallOptions, type ClientOptions, type ListEventsOptions } from "./client.js";
export { Sandbox, newRequestId, type ActionOptions, type CreateOptions, type WaitOptions } from "./sandbox.js";
export { CommandFailed, CommandResult, type RunOptions } from "./commands.js";
export { SandboxFiles, type WrittenFile } from "./files.js";
export { EventStream, type EventsOptions } from "./events.js";
export { LIFETIME_KEY } from "./extensions/lifetime.js";
export { VOLUMES_KEY } from "./extensions/volumes.js";
export { NETWORK_KEY, NetworkDenialStream } from "./extensions/network.js";
export { ProcessOutputStream } from "./extensions/processes.js";
export { parsePort } from "./extensions/ports.js";
export { CHECKPOINT_KEY, fromCheckpoint } from "./extensions/checkpoints.js";
export {
  FileWatchStream,
  type FileChange,
  type FileWatchEnd,
  type RawFile,
  type RawFileWritten,
  type UploadOptions,
  type WatchOptions,
} from "./extensions/files.js";
export type { RequestOptions, RetryOptions, RetryPolicy } from "./transport.js";
export {
  ConnectionError,
  EventHistoryUnavailable,
  GenerationConflict,
  IdempotencyConflict,
  InternalError,
  InvalidState,
  MethodNotAllowed,
  NotFound,
  ProviderProtocolError,
  PortUnreachable,
  ProviderUnavailable,
  RequestTooLarge,
  SandboxFailed,
  SandboxdError,
  Unauthenticated,
  UnsupportedCapability,
  ValidationError,
  WaitTimeout,
  errorCodes,
  type SandboxdErrorInit,
} from "./errors.js";
export type * from "./types.js";
