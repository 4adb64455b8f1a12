// The group "images and templates" of api/extensions.yaml against a real daemon: the host provider
// holds no images, so every call is a 422. On oci: the store's refusals (a pull from where nothing
// listens, a digest it lacks, an import of a path that is not an image), an import with its progress of
// an OCI layout made by scripts/busybox-image that a sandbox then runs on, an import that fails midway
// (its error event thrown as its class), and a pull with its progress from a registry on loopback
// (Debian's docker-registry) that the layout was pushed to.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import {
  InvalidState,
  NotFound,
  Sandbox,
  SandboxdError,
  UnsupportedCapability,
  ValidationError,
  type ImageInfo,
  type ImageProgress,
} from "@sandboxd/sdk";
import type { Context } from "../harness/context.js";
import { provider, repoDir } from "../harness/daemon.js";

const digest = "sha256:" + "0".repeat(64);

export function extImages(ctx: Context): void {
  describe("extensions: images", () => {
    // A 0711 directory the daemon (root) reads layouts from, removed at the end.
    let work: string | undefined;
    const workDir = () => {
      if (!work) {
        work = mkdtempSync(path.join(tmpdir(), "sdk-image-"));
        chmodSync(work, 0o711);
      }
      return work;
    };
    // The busybox layout, made once.
    let layout: string | undefined;
    const busyboxLayout = () => {
      if (!layout) {
        layout = path.join(workDir(), "busybox-oci");
        execFileSync(path.join(repoDir, "scripts", "busybox-image"), [layout], {
          stdio: ["ignore", "ignore", "inherit"],
        });
      }
      return layout;
    };
    after(() => {
      if (work) rmSync(work, { recursive: true, force: true });
    });

    it("lists, inspects, imports, removes and prunes images, or says the provider cannot", async () => {
      const client = ctx.client;
      const empty = mkdtempSync(path.join(workDir(), "empty-"));
      if (ctx.daemon.provider === "host") {
        const calls: (() => Promise<unknown>)[] = [
          () => client.listImages(),
          () => client.pullImage("localhost:1/none:latest"),
          () => client.pullImage("localhost:1/none:latest", { onProgress: () => {} }),
          () => client.importImage(empty, "none:latest"),
          () => client.importImage(empty, "none:latest", { onProgress: () => {} }),
          () => client.getImage(digest),
          () => client.removeImage("none:latest"),
          () => client.pruneImages(),
        ];
        for (const call of calls) {
          await assert.rejects(call(), (e: unknown) => {
            assert.ok(e instanceof UnsupportedCapability, String(e));
            assert.equal(e.status, 422);
            return true;
          });
        }
        return;
      }
      // A registry on a port where nothing listens: refused, with an error of the contract, streamed or not.
      await assert.rejects(client.pullImage("127.0.0.1:1/none:latest", { timeoutMs: 60_000 }), SandboxdError);
      await assert.rejects(
        client.pullImage("127.0.0.1:1/none:latest", { timeoutMs: 60_000, onProgress: () => {} }),
        SandboxdError,
      );
      const images = await client.listImages();
      for (const i of images) assert.equal((await client.getImage(i.digest)).digest, i.digest);
      await assert.rejects(client.getImage(digest), NotFound);
      await assert.rejects(client.getImage("sha256:short"), ValidationError);
      await assert.rejects(client.importImage(empty, "none:latest"), ValidationError); // no OCI layout
      await assert.rejects(client.importImage(empty, "none:latest", { onProgress: () => {} }), ValidationError);
      await assert.rejects(client.removeImage("none:latest"), NotFound);
      assert.ok((await client.pruneImages()) >= 0);
    });

    // The host provider holds no images: the test above has its refusals.
    if (provider !== "host") {
      it("imports an OCI layout with its progress, runs a sandbox on it and removes it", async () => {
        const client = ctx.client;
        const dir = busyboxLayout();
        const name = "sdk-test/busybox:import";
        const seen: ImageProgress[] = [];
        const info = await client.importImage(dir, name, { onProgress: (p) => seen.push(p) });
        assert.ok(info.names.includes(name), JSON.stringify(info));
        assert.equal(info.layers, 1);
        assert.equal(info.workingDir, "/root");
        checkProgress(seen, info);
        // The same import again: the layer is in the store, counted as there.
        const again: ImageProgress[] = [];
        assert.equal((await client.importImage(dir, name, { onProgress: (p) => again.push(p) })).digest, info.digest);
        checkProgress(again, info);
        assert.equal((await client.getImage(info.digest)).digest, info.digest);

        const sb = await Sandbox.create(client, { image: name });
        try {
          const ls = await sb.run(["ls", "/bin"]);
          assert.equal(ls.exitCode, 0, ls.stderrText);
          const files = ls.stdoutText.split(/\s+/);
          assert.ok(files.includes("busybox") && files.includes("sh"), ls.stdoutText);
          // The image's own configuration: its PATH and working directory.
          const env = await sb.run(["sh", "-c", 'echo "$PATH" && pwd && readlink /bin/ls']);
          assert.equal(env.stdoutText, "/bin\n/root\nbusybox\n", env.stderrText);
          assert.equal((await client.getImage(info.digest)).users, 1);
          await assert.rejects(client.removeImage(info.digest), InvalidState); // a sandbox runs on it
        } finally {
          await sb.terminate();
        }
        assert.equal(await client.removeImage(info.digest), info.digest);
        await assert.rejects(client.getImage(info.digest), NotFound);
        assert.ok(!(await client.listImages()).some((i) => i.digest === info.digest));
        assert.ok((await client.pruneImages()) >= 1, "the image's layer is no one's now");
      });

      it("throws the error an import's stream ends with as its class", async () => {
        // The layout with its layer replaced by a larger one that unpacks to other bytes than the config's
        // diffID: the import reports its start, reads the layer, then fails.
        const bad = path.join(workDir(), "bad-oci");
        cpSync(busyboxLayout(), bad, { recursive: true });
        const index = JSON.parse(readFileSync(path.join(bad, "index.json"), "utf8")) as {
          manifests: { digest: string }[];
        };
        const blob = (d: string) => path.join(bad, "blobs", "sha256", d.replace(/^sha256:/, ""));
        const manifest = JSON.parse(readFileSync(blob(index.manifests[0]!.digest), "utf8")) as {
          layers: { digest: string }[];
        };
        const filler = path.join(workDir(), "filler");
        execFileSync("sh", [
          "-c",
          `mkdir -p "$1" && head -c 33554432 /dev/urandom >"$1/noise" && tar -C "$1" -cf - noise | gzip -1 >"$2"`,
          "sh",
          filler,
          blob(manifest.layers[0]!.digest),
        ]);
        const seen: ImageProgress[] = [];
        await assert.rejects(
          ctx.client.importImage(bad, "sdk-test/bad:1", { onProgress: (p) => seen.push(p) }),
          (e) => {
            assert.ok(e instanceof SandboxdError, String(e));
            assert.notEqual(e.constructor, SandboxdError, `${e}: a class of the contract's error codes`);
            assert.match(e.message, /diffID|config says/);
            return true;
          },
        );
        // The stream had begun: the error came as its event, not as an error answer; the layer was read
        // (in part, or whole), never stored.
        assert.ok(seen.length >= 1);
        for (const p of seen)
          assert.deepEqual({ ...p, bytes: 0 }, { layers: 0, totalLayers: 1, bytes: 0, totalBytes: p.totalBytes });
        await assert.rejects(ctx.client.removeImage("sdk-test/bad:1"), NotFound);
      });

      it("pulls an image with its progress from a registry on loopback", async () => {
        const registry = await startRegistry(workDir());
        try {
          const ref = `${registry.host}/sdk-test/busybox:1`;
          const pushed = await pushLayout(registry.host, busyboxLayout(), "sdk-test/busybox", "1");
          // A daemon that reaches this registry over plain HTTP.
          const d = await ctx.another({ args: ["--insecure-registry", registry.host, "--oci-warm-pool", "0"] });
          const client = ctx.newClient({ url: d.url, token: d.token });
          const seen: ImageProgress[] = [];
          const info = await client.pullImage(ref, { onProgress: (p) => seen.push(p) });
          assert.equal(info.digest, pushed);
          assert.ok(info.names.includes(ref), JSON.stringify(info));
          checkProgress(seen, info);
          assert.ok(seen[seen.length - 1]!.totalBytes > 0, "a pull counts its bytes");
          // By digest too, and a tag the registry lacks: its NotFound.
          assert.equal((await client.pullImage(`${registry.host}/sdk-test/busybox@${pushed}`)).digest, pushed);
          await assert.rejects(
            client.pullImage(`${registry.host}/sdk-test/busybox:none`, { onProgress: () => {} }),
            NotFound,
          );
          assert.equal(await client.removeImage(info.digest), info.digest);
        } finally {
          await registry.stop();
        }
      });
    }
  });
}

/** Reports seen of image info: at least one, each count never less than the one before, the last the whole image. */
function checkProgress(seen: ImageProgress[], info: ImageInfo): void {
  assert.ok(seen.length >= 1, "no progress reported");
  for (let i = 1; i < seen.length; i++) {
    const [a, b] = [seen[i - 1]!, seen[i]!];
    assert.ok(b.layers >= a.layers && b.bytes >= a.bytes, `progress went back: ${JSON.stringify(seen)}`);
    assert.equal(b.totalLayers, a.totalLayers);
    assert.equal(b.totalBytes, a.totalBytes);
  }
  const last = seen[seen.length - 1]!;
  assert.equal(last.layers, info.layers);
  assert.equal(last.totalLayers, info.layers);
  assert.equal(last.bytes, last.totalBytes, JSON.stringify(seen));
  for (const p of seen) assert.ok(p.layers <= p.totalLayers && p.bytes <= p.totalBytes, JSON.stringify(p));
}

/** Debian's docker-registry on a free loopback port, its store under dir. */
async function startRegistry(dir: string): Promise<{ host: string; stop: () => Promise<void> }> {
  const probe = createServer();
  probe.listen(0, "127.0.0.1");
  await once(probe, "listening");
  const port = (probe.address() as { port: number }).port;
  probe.close();
  await once(probe, "close");
  const host = `127.0.0.1:${port}`;
  const root = mkdtempSync(path.join(dir, "registry-"));
  const config = path.join(root, "config.yml");
  writeFileSync(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${root}/data\nhttp:\n  addr: ${host}\n`,
  );
  const child = spawn("docker-registry", ["serve", config], { stdio: "ignore" });
  const exited = once(child, "exit");
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  };
  try {
    for (let i = 0; ; i++) {
      const ok = await fetch(`http://${host}/v2/`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return { host, stop };
      if (child.exitCode !== null || i >= 400) throw new Error(`docker-registry on ${host} does not answer`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Pushes the image of an OCI layout to repo:tag with the registry API, and returns its manifest's digest. */
async function pushLayout(host: string, dir: string, repo: string, tag: string): Promise<string> {
  const blob = (d: string) => readFileSync(path.join(dir, "blobs", "sha256", d.replace(/^sha256:/, "")));
  const index = JSON.parse(readFileSync(path.join(dir, "index.json"), "utf8")) as {
    manifests: { digest: string; mediaType: string }[];
  };
  const desc = index.manifests[0]!;
  const manifest = blob(desc.digest);
  const m = JSON.parse(manifest.toString()) as { config: { digest: string }; layers: { digest: string }[] };
  for (const d of [m.config.digest, ...m.layers.map((l) => l.digest)]) {
    const start = await fetch(`http://${host}/v2/${repo}/blobs/uploads/`, { method: "POST" });
    assert.equal(start.status, 202, await start.text());
    const at = new URL(start.headers.get("Location")!, `http://${host}`);
    at.searchParams.set("digest", d);
    const put = await fetch(at, {
      method: "PUT",
      body: blob(d),
      headers: { "Content-Type": "application/octet-stream" },
    });
    assert.equal(put.status, 201, await put.text());
  }
  const put = await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
    method: "PUT",
    body: manifest,
    headers: { "Content-Type": desc.mediaType },
  });
  assert.equal(put.status, 201, await put.text());
  return desc.digest;
}
