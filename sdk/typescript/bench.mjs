// The client's overhead on a command: sandbox.run(["true"]) against the same request made with a raw
// fetch (body encoded, answer parsed as JSON), in one process against one daemon, samples alternating so
// that both see the same machine. Prints the p50 (and p90) of each and their ratio.
//
//   npm run bench                       # starts a host-provider daemon (built, or $SANDBOXD_BIN)
//   SANDBOXD_URL=... SANDBOXD_TOKEN=... npm run bench
//   BENCH_SAMPLES=1000 npm run bench

import { Client, Sandbox } from "./dist/index.js";
import { startDaemon } from "./build/tests/harness/daemon.js";

const samples = Number(process.env.BENCH_SAMPLES ?? 400);
const warmup = 50;

const daemon = process.env.SANDBOXD_URL ? undefined : await startDaemon({ provider: "host" });
const url = daemon?.url ?? process.env.SANDBOXD_URL;
const token = daemon?.token ?? process.env.SANDBOXD_TOKEN;
const client = new Client({ url, token });
const sb = await Sandbox.create(client);
const raw = {
  url: `${url}/v1/sandboxes/${encodeURIComponent(sb.id)}/commands`,
  headers: {
    Accept: "application/json",
    "Content-Type": "application/json",
    ...(token ? { Authorization: `Bearer ${token}` } : {}),
  },
};

async function viaSDK() {
  const r = await sb.run(["true"]);
  if (r.exitCode !== 0) throw new Error(`sdk: exit ${r.exitCode}`);
}

async function viaFetch() {
  const resp = await fetch(raw.url, {
    method: "POST",
    headers: raw.headers,
    body: JSON.stringify({ expectedGeneration: sb.generation, argv: ["true"] }),
  });
  const r = await resp.json();
  if (!resp.ok || r.exitCode !== 0) throw new Error(`fetch: ${resp.status} exit ${r.exitCode}`);
}

async function time(f) {
  const t = performance.now();
  await f();
  return performance.now() - t;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

try {
  for (let i = 0; i < warmup; i++) {
    await viaSDK();
    await viaFetch();
  }
  const sdk = [];
  const fetched = [];
  for (let i = 0; i < samples; i++) {
    // Alternate which goes first, so neither always follows the other.
    if (i % 2 === 0) {
      sdk.push(await time(viaSDK));
      fetched.push(await time(viaFetch));
    } else {
      fetched.push(await time(viaFetch));
      sdk.push(await time(viaSDK));
    }
  }
  const [s50, f50] = [pct(sdk, 50), pct(fetched, 50)];
  const ms = (x) => `${x.toFixed(3)} ms`;
  console.log(`run(["true"]) ${samples} samples each, provider ${(await client.runtime()).provider.name}`);
  console.log(`  sdk   p50 ${ms(s50)}  p90 ${ms(pct(sdk, 90))}`);
  console.log(`  fetch p50 ${ms(f50)}  p90 ${ms(pct(fetched, 90))}`);
  console.log(`  ratio p50 ${(s50 / f50).toFixed(3)} (goal < 1.10), added ${((s50 - f50) * 1000).toFixed(0)} µs`);
} finally {
  await sb.terminate({ wait: false });
  await daemon?.stop();
}
