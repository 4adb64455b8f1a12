// The groups "images and templates" (/v1/templates) and "snapshots" of api/extensions.yaml: a
// sandbox's filesystem captured as a snapshot, sandboxes forked from one, and templates, names whose
// versions are snapshots (Client.snapshot and the methods beside it). A create's `template` runs a
// template (`name`, `name@version`, `name@sha256:...`) or a snapshot (its id).

import type { components } from "../generated/extensions.js";

/**
 * A snapshot: its `id` (its digest, which a create's `template` may name), the sandbox and generation
 * it was taken of, the image it ran on (`baseDigest`), its layers, the sandboxes that run on it now
 * (`users`) and the template versions it is (`name@version`).
 */
export type SnapshotInfo = components["schemas"]["SnapshotInfo"];

/** A template: its name and its versions, oldest first (only the one named, for `name@version`). */
export type TemplateInfo = components["schemas"]["TemplateInfo"];

/** One version of a template. */
export type TemplateVersion = components["schemas"]["TemplateVersion"];

/** What each sandbox of a fork has besides the snapshot. */
export type ForkSpec = NonNullable<components["schemas"]["ForkRequest"]["spec"]>;

/**
 * One step of a template build: a command (`run`, argv, run directly, which must exit 0), or a file
 * written (`file`, its content as bytes or text, its mode when given).
 */
export type TemplateStep =
  { run: string[] } | { file: { path: string; content: Uint8Array | string; mode?: number | undefined } };

/** A template build: a sandbox of `baseImage` runs `steps`, then is the template `name`'s newest version. */
export interface TemplateBuild {
  name: string;
  baseImage: string;
  steps?: TemplateStep[] | undefined;
  env?: string[] | undefined;
  workdir?: string | undefined;
}
