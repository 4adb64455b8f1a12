#!/usr/bin/env python3
"""The client's own cost: ``sandbox.run(["true"])`` against the same call made by hand with http.client
(one kept-alive connection, json in and out), in the same process, against the same daemon and sandbox,
the two alternating sample by sample so that both see the same machine. It prints the medians and their
ratio (the goal is under 1.10).

Uses the daemon at $SANDBOXD_URL ($SANDBOXD_TOKEN) when set; otherwise starts one with the host
provider ($SANDBOXD_BIN, or a build of cmd/sandboxd).

    /usr/bin/python3 sdk/python/bench.py [--samples 1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
sys.path.insert(0, str(HERE / "tests"))

import sandboxd  # noqa: E402


def percentile(xs: List[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000, help="samples of each (default 1000)")
    ap.add_argument("--warmup", type=int, default=50, help="unmeasured calls of each first (default 50)")
    args = ap.parse_args()

    started = None
    url, token = os.environ.get("SANDBOXD_URL"), os.environ.get("SANDBOXD_TOKEN")
    tmp: Optional[tempfile.TemporaryDirectory[str]] = None
    if not url:
        from daemon import Daemon, build

        tmp = tempfile.TemporaryDirectory(prefix="sandboxd-bench-")
        started = Daemon(build(Path(tmp.name)), "host")
        url, token = started.url, started.token
    try:
        with sandboxd.Client(url, token) as client, client.create_sandbox() as sb:
            u = urlsplit(url)
            conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80)
            path = f"{u.path.rstrip('/')}/v1/sandboxes/{sb.id}/commands"
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if token:
                headers["Authorization"] = "Bearer " + token

            def raw() -> None:
                body = json.dumps({"expectedGeneration": sb.generation, "argv": ["true"]}).encode()
                conn.request("POST", path, body, headers)
                r = conn.getresponse()
                doc = json.loads(r.read())
                if r.status != 200 or doc["exitCode"] != 0:
                    raise SystemExit(f"raw call: {r.status} {doc}")

            def sdk() -> None:
                if sb.run(["true"]).exit_code != 0:
                    raise SystemExit("sdk call failed")

            for _ in range(args.warmup):
                raw()
                sdk()
            times = {"raw": [], "sdk": []}  # type: dict[str, List[float]]
            pair: List[Callable[[], None]] = [raw, sdk]
            for i in range(args.samples):
                for f in pair if i % 2 == 0 else pair[::-1]:
                    t0 = time.perf_counter()
                    f()
                    times[f.__name__].append(time.perf_counter() - t0)
            conn.close()
    finally:
        if started is not None:
            started.remove()
        if tmp is not None:
            tmp.cleanup()

    r50, s50 = statistics.median(times["raw"]), statistics.median(times["sdk"])
    print(f"samples: {args.samples} of each, alternating; daemon {url}")
    print(f"raw http.client  p50 {r50 * 1e6:8.1f} us   p90 {percentile(times['raw'], 0.9) * 1e6:8.1f} us")
    print(f"sandbox.run      p50 {s50 * 1e6:8.1f} us   p90 {percentile(times['sdk'], 0.9) * 1e6:8.1f} us")
    print(f"ratio of p50s    {s50 / r50:.3f}   (client overhead {(s50 - r50) * 1e6:+.1f} us per call; goal < 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
