// The group "stats and metrics" of api/extensions.yaml: what a sandbox uses now
// (GET /v1/sandboxes/{sandboxId}/stats, Sandbox.stats) and the daemon's metrics (GET /metrics,
// Client.metrics).

import type { components } from "../generated/extensions.js";

/**
 * What a ready or paused sandbox uses now, read from its cgroups and its disk
 * (`GET /v1/sandboxes/{id}/stats`, {@link Sandbox.stats}). A figure the provider cannot read is
 * undefined. `cpuSeconds` is the CPU time of every process of the sandbox; memory counts the page
 * cache; `pids` counts processes and threads; `diskBytes` is what its writable filesystem holds.
 */
export type SandboxStats = components["schemas"]["StatsSandbox"];
