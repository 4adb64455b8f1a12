"""Builds and runs a real sandboxd for the tests and the benchmark."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[3]


def build(dest_dir: Path) -> Path:
    """The daemon binary: $SANDBOXD_BIN, else a static build of cmd/sandboxd into dest_dir."""
    given = os.environ.get("SANDBOXD_BIN")
    if given:
        return Path(given)
    out = dest_dir / "sandboxd"
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run(["go", "build", "-o", str(out), "./cmd/sandboxd"], cwd=REPO, env=env, check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """``sandboxd serve`` on a free loopback port, with a data directory and a token file of its own."""

    def __init__(self, binary: Path, provider: str, *extra: str) -> None:
        self.provider = provider
        self.root = Path(tempfile.mkdtemp(prefix="sandboxd-py-"))
        # The oci provider's sandboxes run as other uids, which must be able to search the path.
        os.chmod(self.root, 0o711)
        self.data_dir = self.root / "data"
        self.token = secrets.token_hex(16)
        tok = self.root / "tokens"
        tok.write_text(self.token + "\n")
        tok.chmod(0o600)
        self.log_path = self.root / "sandboxd.log"
        args: List[str] = [
            str(binary), "serve",
            "--provider", provider,
            "--data-dir", str(self.data_dir),
            "--auth-token-file", str(tok),
            # Nothing here depends on the periodic reconcile; the fault tests need it out of the way.
            "--reconcile-interval", "1h",
            "--preview-listen", "127.0.0.1:0",
        ]  # fmt: skip
        if provider == "oci":
            args += ["--oci-warm-pool", "1"]
        args += list(extra)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        for _ in range(5):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(args + ["--listen", f"127.0.0.1:{self.port}"], stdout=log, stderr=log)
            log.close()
            if self._wait_healthy():
                return
            self.stop()
        raise RuntimeError(f"sandboxd did not start; its log:\n{self.log()}")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    @property
    def host_dir(self) -> Path:
        """Where the host provider keeps its sandboxes' directories (``<id>-g<generation>``)."""
        return self.data_dir / "host"

    def stop(self) -> None:
        """Stops the daemon with SIGTERM (it removes what it started), SIGKILL after 20 s."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
