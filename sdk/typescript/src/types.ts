/**
 * The contract's types under their own names, taken from the types generated from `api/openapi.yaml`
 * (`src/generated/openapi.ts`), so that they cannot drift from the contract. The types of what sandboxd
 * offers beyond it, from `api/extensions.yaml` (`src/generated/extensions.ts`), are in `src/extensions/`,
 * one file per group of that document.
 *
 * @module
 */

import type { Lifetime } from "./extensions/lifetime.js";
import type { NetworkPolicy } from "./extensions/network.js";
import type { VolumeMount } from "./extensions/volumes.js";
import type { components, operations, paths } from "./generated/openapi.js";

/** The protocol version and the provider's manifest (`GET /v1/runtime`). */
export type RuntimeInfo = components["schemas"]["RuntimeInfo"];
/** What runs the sandboxes: its name, version, runtime class and capabilities. */
export type ProviderManifest = components["schemas"]["ProviderManifest"];
/** Which features the provider supports. */
export type RuntimeCapabilities = components["schemas"]["RuntimeCapabilities"];
/** The name of one capability, as `requiredCapabilities` lists them. */
export type CapabilityName = components["schemas"]["CapabilityName"];
/** A sandbox's lifecycle state. */
export type SandboxState = components["schemas"]["SandboxState"];
/** What a sandbox is made from. `clientRequestId` names the create intent. */
export type SandboxSpec = components["schemas"]["SandboxSpec"];
/** A sandbox as the daemon reports it. */
export type SandboxResource = components["schemas"]["SandboxResource"];
/** The body of `POST /v1/sandboxes/{id}/commands`. */
export type CommandRequest = components["schemas"]["CommandRequest"];
/** The wire form of a command's result; the SDK hands out {@link CommandResult} instead. */
export type CommandResultBody = components["schemas"]["CommandResult"];
/** A file's path and size, and its content in base64 when it was read. */
export type FileReadResult = components["schemas"]["FileReadResult"];
/** One entry of a directory listing. */
export type FileEntry = components["schemas"]["FileEntry"];
/** One event of the log. */
export type SandboxEvent = components["schemas"]["SandboxEvent"];
/** The type of an event. */
export type SandboxEventType = SandboxEvent["type"];
/** The body of every error response. */
export type ErrorResponse = components["schemas"]["ErrorResponse"];

/** The contract's paths, operations and components, for typing calls made with {@link Client.request}. */
export type { components, operations, paths };

/**
 * A spec for {@link Sandbox.create}: like {@link SandboxSpec}, but the SDK makes up `clientRequestId`
 * when it is left out, and `lifetime`, `volumes` and `network` go into `extensions["sandboxd.lifetime"]`,
 * `extensions["sandboxd.volumes"]` and `extensions["sandboxd.network"]`.
 */
export type CreateSpec = Omit<SandboxSpec, "clientRequestId"> & {
  clientRequestId?: string;
  /** The sandbox's time to live and idle bound (see {@link Lifetime}). */
  lifetime?: Lifetime;
  /** The persistent volumes it mounts (see {@link VolumeMount}; capability `persistentVolume`). */
  volumes?: VolumeMount[];
  /** Its egress policy (see {@link NetworkPolicy}; capability `networkPolicy`). */
  network?: NetworkPolicy;
};

export type { Lifetime, RecordedLifetime } from "./extensions/lifetime.js";
export type { SandboxStats } from "./extensions/stats.js";
export type { PreviewToken, PreviewTokenOptions } from "./extensions/ports.js";
export type { Checkpoint } from "./extensions/checkpoints.js";
export type { Volume, VolumeCreate, VolumeMount } from "./extensions/volumes.js";
export type { ImageInfo, ImageOptions, ImageProgress } from "./extensions/images.js";
export type {
  ForkSpec,
  SnapshotInfo,
  TemplateBuild,
  TemplateInfo,
  TemplateStep,
  TemplateVersion,
} from "./extensions/snapshots.js";
export type {
  OutputChunk,
  OutputDropped,
  Process,
  ProcessEnd,
  ProcessOutputOptions,
  ProcessSignal,
  ProcessStart,
  TerminalOptions,
  TerminalSize,
} from "./extensions/processes.js";
export type { StreamHeartbeat, StreamState } from "./extensions/sse.js";
export type {
  NetworkDenial,
  NetworkDenialsEnd,
  NetworkDenialsOptions,
  NetworkPolicy,
  NetworkStatus,
} from "./extensions/network.js";
/** The paths, operations and components of `api/extensions.yaml`, for typing calls made with {@link Client.request}. */
export type {
  components as extensionComponents,
  operations as extensionOperations,
  paths as extensionPaths,
} from "./generated/extensions.js";
