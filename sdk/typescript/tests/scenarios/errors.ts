// Every error class the daemon can be made to answer, from its real answers; the class comes from
// error.code, never from the status.

import assert from "node:assert/strict";
import { mkdirSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import {
  Client,
  ConnectionError,
  GenerationConflict,
  IdempotencyConflict,
  InvalidState,
  MethodNotAllowed,
  NotFound,
  ProviderProtocolError,
  ProviderUnavailable,
  RequestTooLarge,
  Sandbox,
  SandboxFailed,
  SandboxdError,
  Unauthenticated,
  UnsupportedCapability,
  ValidationError,
  WaitTimeout,
  errorCodes,
  type CapabilityName,
  type SandboxResource,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";
import { provider } from "../harness/daemon.js";
import type { Seen } from "../harness/proxy.js";

/** Asserts that p rejects with an error of Class carrying code and status. */
async function rejectsWith(
  p: Promise<unknown>,
  Class: abstract new (...a: never[]) => SandboxdError,
  code: string,
  status: number | undefined,
): Promise<SandboxdError> {
  let caught: unknown;
  await assert.rejects(p, (e: unknown) => {
    caught = e;
    return true;
  });
  assert.ok(caught instanceof Class, `want ${Class.name}, got ${String(caught)}`);
  assert.ok(caught instanceof SandboxdError);
  assert.equal(caught.code, code);
  assert.equal(caught.status, status);
  assert.notEqual(caught.message, "");
  return caught;
}

export function errors(ctx: Context): void {
  describe("errors", () => {
    it("ValidationError (400 invalid_request) for a spec the contract refuses", async () => {
      await rejectsWith(
        ctx.client.createSandbox({ resources: { cpuMillis: 0 } }),
        ValidationError,
        "invalid_request",
        400,
      );
      await rejectsWith(
        ctx.client.createSandbox({ requiredCapabilities: ["teleportation" as CapabilityName] }),
        ValidationError,
        "invalid_request",
        400,
      );
    });

    it("Unauthenticated (401) without the token or with a wrong one", async () => {
      await rejectsWith(ctx.newClient({ token: "wrong" }).runtime(), Unauthenticated, "unauthenticated", 401);
      const none = new Client({ url: ctx.daemon.url, token: "", fetch: ctx.conformance.fetch });
      await rejectsWith(none.listSandboxes(), Unauthenticated, "unauthenticated", 401);
    });

    it("NotFound (404) for a sandbox or a file that is not there", async () => {
      await rejectsWith(ctx.client.getSandbox("sbx_nosuchsandbox0000000"), NotFound, "not_found", 404);
      await using sb = await Sandbox.create(ctx.client);
      await rejectsWith(sb.files.read("nothing/here"), NotFound, "not_found", 404);
      await rejectsWith(sb.files.list("nowhere"), NotFound, "not_found", 404);
    });

    it("MethodNotAllowed (405) through request()", async () => {
      await rejectsWith(
        ctx.client.request({ method: "DELETE", path: "/v1/sandboxes" }),
        MethodNotAllowed,
        "method_not_allowed",
        405,
      );
    });

    it("RequestTooLarge (413) for a file past the body limit", async () => {
      await using sb = await Sandbox.create(ctx.client);
      await rejectsWith(sb.files.write("big.bin", new Uint8Array(25 << 20)), RequestTooLarge, "request_too_large", 413);
    });

    it("IdempotencyConflict (409) for a clientRequestId reused with another spec", async () => {
      const key = `sdk-ts-idem-${Date.now()}`;
      await using sb = await Sandbox.create(ctx.client, { clientRequestId: key });
      await rejectsWith(
        Sandbox.create(ctx.client, { clientRequestId: key, resources: { memoryMiB: 64 } }),
        IdempotencyConflict,
        "idempotency_conflict",
        409,
      );
      assert.equal(sb.generation, 1);
    });

    it("GenerationConflict and InvalidState (409) tell apart by code, not status", async () => {
      await using sb = await Sandbox.create(ctx.client);
      const stale = await ctx.client.getSandbox(sb.id);
      await sb.terminate();
      await rejectsWith(stale.run(["true"]), InvalidState, "invalid_state", 409);
      await sb.recreate();
      const e = await rejectsWith(stale.files.read("x"), GenerationConflict, "generation_conflict", 409);
      assert.equal((e as GenerationConflict).currentGeneration, 2);
      await rejectsWith(stale.pause(), GenerationConflict, "generation_conflict", 409);
      await rejectsWith(sb.recreate(), InvalidState, "invalid_state", 409);
    });

    it("UnsupportedCapability (422) for a capability the provider lacks", async () => {
      const info = await ctx.client.runtime();
      const caps = info.provider.capabilities;
      const lacking = (Object.keys(caps) as CapabilityName[]).find((c) => !caps[c]);
      assert.ok(lacking, "the provider lacks some capability");
      await rejectsWith(
        ctx.client.createSandbox({ requiredCapabilities: [lacking] }),
        UnsupportedCapability,
        "unsupported_capability",
        422,
      );
    });

    it("maps by error.code: a known code under another status, and an unknown code", async () => {
      // The proxy rewrites the code of a real 404: the class follows the code.
      const isGet = (r: Seen) => r.method === "GET" && r.path === "/v1/sandboxes/sbx_nosuchsandbox0000001";
      const recode = (code: string) => (body: unknown) => {
        const b = body as { error: { code: string; message: string } };
        return { body: { error: { ...b.error, code, hint: "from the proxy" } } };
      };
      ctx.proxy.inject(isGet, { kind: "rewrite", edit: recode("provider_protocol_error") });
      const a = await rejectsWith(
        ctx.proxied.getSandbox("sbx_nosuchsandbox0000001"),
        ProviderProtocolError,
        "provider_protocol_error",
        404,
      );
      assert.deepEqual(a.details, { hint: "from the proxy" });
      ctx.proxy.inject(isGet, { kind: "rewrite", edit: recode("quota_exceeded") });
      const b = await rejectsWith(
        ctx.proxied.getSandbox("sbx_nosuchsandbox0000001"),
        SandboxdError,
        "quota_exceeded",
        404,
      );
      assert.equal(b.constructor, SandboxdError, "an unknown code is the base class");
      assert.ok(errorCodes.includes("generation_conflict") && errorCodes.length === 14);
    });

    it("WaitTimeout when the sandbox does not become ready in time, carrying the sandbox", async () => {
      const starting = (body: unknown) => ({ body: { ...(body as SandboxResource), state: "starting" } });
      ctx.proxy.inject((r) => r.method === "POST" && r.path === "/v1/sandboxes", { kind: "rewrite", edit: starting });
      ctx.proxy.inject(
        (r) => r.method === "GET" && /^\/v1\/sandboxes\/sbx_[^/]+$/.test(r.path),
        { kind: "rewrite", edit: starting },
        1000,
      );
      ctx.proxy.inject((r) => r.path.startsWith("/v1/events/stream"), { kind: "stall", events: 0 }, 1000);
      const e = await rejectsWith(
        Sandbox.create(ctx.proxied, {}, { timeoutMs: 500 }),
        WaitTimeout,
        "timeout",
        undefined,
      );
      const sb = (e as WaitTimeout).sandbox;
      assert.ok(sb && sb.id.startsWith("sbx_"));
      ctx.proxy.clear();
      await (await ctx.client.getSandbox(sb.id)).terminate();
    });

    it("ConnectionError when the daemon cannot be reached, after the retries", async () => {
      const client = new Client({ url: "http://127.0.0.1:9", token: "x", retry: { attempts: 2, minDelayMs: 1 } });
      await rejectsWith(client.runtime(), ConnectionError, "connection", undefined);
    });

    if (provider === "host") hostOnly(ctx);
  });
}

/** Errors made by breaking the host provider's own directory under the daemon: the host provider only. */
function hostOnly(ctx: Context): void {
  it("ProviderUnavailable (503) when the provider fails a pause, which is not retried", async () => {
    await using sb = await Sandbox.create(ctx.client);
    // A directory where the host provider writes its pause marker makes the pause fail.
    const marker = path.join(ctx.daemon.dataDir, "host", `${sb.id}-g1.paused`);
    mkdirSync(marker);
    try {
      const mark = ctx.proxy.seen.length;
      const viaProxy = await ctx.proxied.getSandbox(sb.id);
      await rejectsWith(viaProxy.pause(), ProviderUnavailable, "provider_unavailable", 503);
      const pauses = ctx.proxy.seen.slice(mark).filter((r) => r.path.endsWith("/actions/pause"));
      assert.equal(pauses.length, 1, "a change the daemon answered is not repeated");
      assert.equal((await sb.refresh()).state, "failed", "the daemon records the provider's failure");
    } finally {
      rmdirSync(marker);
    }
  });

  it("SandboxFailed when a recreated generation fails to start, with the reason", async () => {
    const sb = await Sandbox.create(ctx.client);
    await sb.terminate();
    // A file where the host provider makes generation 2's directory: the provider observes it failed.
    writeFileSync(path.join(ctx.daemon.dataDir, "host", `${sb.id}-g2`), "");
    const e = await rejectsWith(sb.recreate(), SandboxFailed, "sandbox_failed", undefined);
    const failed = e as SandboxFailed;
    assert.equal(failed.failure.code, "not_a_directory");
    assert.equal(failed.sandbox.state, "failed");
    assert.equal(failed.sandbox.generation, 2);
    await sb.terminate();
  });
}
