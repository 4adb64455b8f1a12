// The group "memory snapshots" of api/extensions.yaml: a checkpoint of a sandbox's memory, processes
// and /workspace (POST /v1/sandboxes/{sandboxId}/actions/checkpoint, Sandbox.checkpoint), the list of
// those taken (GET /v1/sandboxes/{sandboxId}/checkpoints, Sandbox.checkpoints), and
// spec.extensions["sandboxd.checkpoint"], a sandbox started from one (fromCheckpoint).

import type { components } from "../generated/extensions.js";

/** A checkpoint of sandbox `sandboxId`, taken of its generation `generation`. */
export type Checkpoint = components["schemas"]["Checkpoint"];

/** The spec.extensions key of a sandbox started from a checkpoint. */
export const CHECKPOINT_KEY = "sandboxd.checkpoint";

/**
 * The `extensions` of a create that starts the sandbox from checkpoint `checkpoint` of sandbox
 * `sandboxId` (needs `memorySnapshot`).
 */
export function fromCheckpoint(sandboxId: string, checkpoint: string): Record<string, unknown> {
  return { [CHECKPOINT_KEY]: { sandboxId, checkpoint } };
}
