// The group "images and templates" of api/extensions.yaml: the images a provider holds (/v1/images),
// pulled from a registry, imported from an OCI layout or a tarball on the daemon's host, inspected by
// digest, removed and pruned (Client.listImages and the methods beside it). A sandbox runs on one with
// the contract's own field, a create's `image`.

import type { components } from "../generated/extensions.js";

/**
 * An image in the provider's store: its manifest `digest`, the `names` it is known by, its number of
 * layers, the sandboxes that run on it now (`users`), and its configuration's `env`, `workingDir` and
 * `user`, where it has them.
 */
export type ImageInfo = components["schemas"]["ImageInfo"];
