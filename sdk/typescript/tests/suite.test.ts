// The scenario suite against a real sandboxd ($SANDBOXD_TEST_PROVIDER, default host), with the
// conformance check of every answer the SDK decoded.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Context } from "./harness/context.js";
import { errors } from "./scenarios/errors.js";
import { events } from "./scenarios/events.js";
import { examples } from "./scenarios/examples.js";
import { extLifetime } from "./scenarios/ext-lifetime.js";
import { extImages } from "./scenarios/ext-images.js";
import { extNetwork } from "./scenarios/ext-network.js";
import { extProcesses } from "./scenarios/ext-processes.js";
import { extPorts } from "./scenarios/ext-ports.js";
import { extSnapshots } from "./scenarios/ext-snapshots.js";
import { extStats } from "./scenarios/ext-stats.js";
import { extCheckpoints } from "./scenarios/ext-checkpoints.js";
import { extVolumes } from "./scenarios/ext-volumes.js";
import { extFiles } from "./scenarios/ext-files.js";
import { lifecycle } from "./scenarios/lifecycle.js";
import { pause } from "./scenarios/pause.js";

const ctx = new Context();

before(() => ctx.start());
after(() => ctx.stop());

lifecycle(ctx);
events(ctx);
errors(ctx);
examples(ctx);
// api/extensions.yaml: one file of scenarios per group.
extLifetime(ctx);
extStats(ctx);
extVolumes(ctx);
extNetwork(ctx);
extImages(ctx);
extSnapshots(ctx);
extProcesses(ctx);
extPorts(ctx);
extCheckpoints(ctx);
extFiles(ctx);
pause(ctx);

describe("conformance", () => {
  it("every answer the SDK decoded matches its schema in api/openapi.yaml or api/extensions.yaml", (t) => {
    assert.deepEqual(ctx.conformance.violations, []);
    // Each response type the SDK decodes was seen at least once.
    const want = [
      "getHealth 200",
      "getRuntimeInfo 200",
      "listSandboxes 200",
      "createSandbox 201",
      "getSandbox 200",
      "reconcileSandbox 200",
      "pauseSandbox 200",
      "resumeSandbox 200",
      "terminateSandbox 200",
      "recreateSandbox 200",
      "executeCommand 200",
      "readFile 200",
      "writeFile 200",
      "listFiles 200",
      "listEvents 200",
      "streamEvents 200",
      "streamEvents event",
      "createSandbox 400",
      "createSandbox 409",
      "createSandbox 422",
      "getSandbox 404",
      "readFile 404",
      "readFile 409",
      "executeCommand 409",
      "listEvents 410",
      "streamEvents 410",
      ctx.daemon.provider === "host" ? "getSandboxStats 422" : "getSandboxStats 200",
      "getMetrics 200",
      "getMetrics 401",
      // processes: host and oci run them alike
      "startProcess 201",
      "startProcess 409",
      "listProcesses 200",
      "getProcess 200",
      "getProcess 404",
      "waitProcess 200",
      "writeProcessStdin 200",
      "signalProcess 200",
      "signalProcess 409",
      "streamProcessOutput 200",
      "streamProcessOutput output",
      "streamProcessOutput end",
      "streamProcessOutput heartbeat",
      "streamProcessOutput 409",
      // terminals: host and oci both have them
      "resizeProcess 200",
      "resizeProcess 400",
      "resizeProcess 409",
      // raw files and watch
      "putRawFile 200",
      "getRawFile 200",
      "getRawFile 206",
      "getRawFile 404",
      "watchFiles 200",
      "watchFiles change",
      "watchFiles heartbeat",
      "watchFiles 404",
      ...(ctx.daemon.provider === "host"
        ? [
            "createVolume 422",
            "listVolumes 422",
            "getVolume 422",
            "deleteVolume 422",
            "getNetwork 422",
            "createPreviewToken 422",
            "setNetwork 422",
            "streamNetworkDenials 422",
            "listImages 422",
            "pullImage 422",
            "importImage 422",
            "getImage 422",
            "removeImage 422",
            "pruneImages 422",
            "snapshotSandbox 422",
            "listSnapshots 422",
            "getSnapshot 422",
            "deleteSnapshot 422",
            "forkSnapshot 422",
            "buildTemplate 422",
            "listTemplates 422",
            "getTemplate 422",
            "deleteTemplate 422",
            "checkpointSandbox 422",
            "listCheckpoints 422",
          ]
        : [
            "createVolume 201",
            "createVolume 409",
            "listVolumes 200",
            "getVolume 200",
            "getVolume 404",
            "deleteVolume 204",
            "deleteVolume 409",
            "getNetwork 200",
            "createPreviewToken 201",
            "createPreviewToken 400",
            "getNetwork 409",
            "setNetwork 200",
            "setNetwork 409",
            "streamNetworkDenials 200",
            "streamNetworkDenials denial",
            "streamNetworkDenials end",
            "listImages 200",
            "importImage 200",
            "importImage progress",
            "importImage done",
            "importImage error",
            "importImage 400",
            "pullImage 200",
            "pullImage progress",
            "pullImage done",
            "pullImage 404",
            "getImage 200",
            "removeImage 200",
            "removeImage 409",
            "getImage 400",
            "getImage 404",
            "removeImage 404",
            "pruneImages 200",
            "snapshotSandbox 409",
            "listSnapshots 200",
            "getSnapshot 404",
            "deleteSnapshot 404",
            "forkSnapshot 400",
            "forkSnapshot 404",
            "listTemplates 200",
            "getTemplate 400",
            "getTemplate 404",
            "deleteTemplate 404",
          ]),
    ];
    const covered = [...ctx.conformance.covered].sort(([a], [b]) => a.localeCompare(b));
    t.diagnostic(
      `checked ${covered.reduce((n, [, c]) => n + c, 0)} answers: ${covered.map(([k, c]) => `${k} ×${c}`).join(", ")}`,
    );
    // The operations of api/extensions.yaml the SDK has methods for are in the document (the others are
    // reached through request(), whose answers are checked all the same).
    const extensions = ctx.conformance.operations.filter((o) => o.document === "extensions.yaml").map((o) => o.id);
    for (const id of [
      "checkpointSandbox",
      "listCheckpoints",
      "getSandboxStats",
      "getMetrics",
      "listVolumes",
      "createVolume",
      "getVolume",
      "deleteVolume",
      "getNetwork",
      "setNetwork",
      "streamNetworkDenials",
      "listImages",
      "pullImage",
      "importImage",
      "getImage",
      "removeImage",
      "pruneImages",
      "snapshotSandbox",
      "listSnapshots",
      "getSnapshot",
      "deleteSnapshot",
      "forkSnapshot",
      "buildTemplate",
      "listTemplates",
      "getTemplate",
      "deleteTemplate",
      "startProcess",
      "listProcesses",
      "getProcess",
      "waitProcess",
      "writeProcessStdin",
      "signalProcess",
      "streamProcessOutput",
      "resizeProcess",
      "attachTerminal",
      "createPreviewToken",
      "putRawFile",
      "getRawFile",
      "watchFiles",
    ])
      assert.ok(extensions.includes(id), `${id} not in extensions.yaml`);
    const missing = want.filter((k) => !ctx.conformance.covered.has(k));
    assert.deepEqual(missing, [], `covered: ${[...ctx.conformance.covered.keys()].sort().join(", ")}`);
  });
});
