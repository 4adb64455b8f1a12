// The group "volumes" of api/extensions.yaml: persistent volumes (/v1/volumes, capability
// persistentVolume) and the spec.extensions["sandboxd.volumes"] mounts of a sandbox.

import type { ValidationError } from "../errors.js";
import type { components } from "../generated/extensions.js";

/** The spec.extensions key of a sandbox's volume mounts. */
export const VOLUMES_KEY = "sandboxd.volumes";

/**
 * One volume a sandbox mounts (`spec.extensions["sandboxd.volumes"]`), given to
 * {@link Sandbox.create} as `{ volumes: [{ name: "cache", mountPath: "/data" }] }`: the volume `name`
 * at `mountPath` (on oci at or below /workspace, /mnt, /data, /srv or /opt), writable unless
 * `readOnly`. The volume must exist (else a {@link ValidationError}); a second writer of a volume that
 * is not shared fails with `failure.code` `volume_in_use`.
 */
export type VolumeMount = NonNullable<components["schemas"]["SpecExtensions"]["sandboxd.volumes"]>[number];

/**
 * What {@link Client.createVolume} makes: a volume `name` of `sizeMiB` (writes past it fail with
 * ENOSPC in the sandbox); `shared: true` lets several sandboxes write it at once, otherwise it has one
 * writer and any number of readers.
 */
export type VolumeCreate = components["schemas"]["VolumeCreate"];

/**
 * A persistent volume: its size, whether several sandboxes may write it at once, when it was made,
 * and the sandboxes, not terminated, that mount it (`attachedTo`). `usedBytes` is what its image holds
 * on the host, when the provider says.
 */
export type Volume = components["schemas"]["Volume"];
