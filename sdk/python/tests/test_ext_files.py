"""The group "raw files and watch" of api/extensions.yaml, with the sync client against a real daemon."""

from __future__ import annotations

import hashlib
import io
import os
from typing import Any, List, Optional

import pytest

import sandboxd
from daemon import Daemon
from sandboxd.extensions import files


class Flaky(io.BytesIO):
    """A seekable source whose first pass of sending (after the hashing read) breaks off after 2 MiB."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.passes = 0
        self.broke = False

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 0 and pos == 0:
            self.passes += 1
        return super().seek(pos, whence)

    def read(self, n: Optional[int] = -1) -> bytes:
        if self.passes == 1 and not self.broke and self.tell() >= 2 << 20:
            self.broke = True
            raise OSError("network down")
        return super().read(n)


def test_raw_files(daemon: Daemon) -> None:
    with sandboxd.Client(daemon.url, daemon.token) as api:
        with api.create_sandbox() as sb:
            data = os.urandom(5 << 20)
            seen: List[int] = []
            w = sb.upload("big.bin", data, progress=seen.append)
            assert w.size == len(data) and seen[-1] == len(data)
            out = io.BytesIO()
            d = sb.download("big.bin", out)
            assert out.getvalue() == data and d.digest == hashlib.sha256(data).digest()
            # From a stream that cannot be read twice: the digest is checked after.
            w = sb.upload("stream.bin", io.BufferedReader(io.BytesIO(data[:1000])))  # type: ignore[arg-type]
            assert w.size == 1000
            # An upload whose connection broke resumes from the bytes the sandbox holds.
            src = Flaky(data)
            w = sb.upload("resumed.bin", src)
            assert src.broke and w.size == len(data)
            out = io.BytesIO()
            sb.download("resumed.bin", out)
            assert out.getvalue() == data
            with pytest.raises(sandboxd.NotFound):
                sb.download("missing", io.BytesIO())


def test_watch(daemon: Daemon) -> None:
    with sandboxd.Client(daemon.url, daemon.token) as api:
        with api.create_sandbox() as sb:
            sb.run(["mkdir", "-p", "w"], check=True)
            with sb.watch("w", recursive=True) as w:
                sb.run(["sh", "-c", "echo x > w/a.txt && rm w/a.txt"], check=True)
                kinds = []
                for c in w:
                    assert isinstance(c, files.FileChange)
                    kinds.append((c.kind, c.path))
                    if c.kind == "deleted":
                        break
                assert ("created", "w/a.txt") in kinds and ("deleted", "w/a.txt") in kinds
            with pytest.raises(sandboxd.NotFound):
                sb.watch("nowhere")
