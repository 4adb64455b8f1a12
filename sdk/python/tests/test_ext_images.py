"""The group "images and templates" of api/extensions.yaml, with both clients against a real daemon:
the host provider holds no images, so every call is a 422 UnsupportedCapability; on oci the store's
answers to what fails (a pull from where nothing listens, a digest it lacks, an import of a path that is
not an image), and a busybox image made by scripts/busybox-image imported and pulled (from Debian's
docker-registry on loopback) with their progress, a sandbox run on it, the image removed. The stream of
a pull's progress is also decoded from bytes made by hand, its error event among them."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple
from urllib.parse import urljoin

import pytest

import sandboxd
from conftest import PROVIDER, _stop
from daemon import REPO, Daemon, free_port
from sandboxd.extensions.images import ImageStream

DIGEST = "sha256:" + "0" * 64


def test_images(api: Any, tmp_path: Any) -> None:
    if PROVIDER == "host":
        calls: List[Callable[[], Any]] = [
            api.list_images,
            lambda: api.pull_image("localhost:1/none:latest"),
            lambda: api.pull_image("localhost:1/none:latest", progress=print),
            lambda: api.import_image(str(tmp_path), "none:latest"),
            lambda: api.import_image(str(tmp_path), "none:latest", progress=print),
            lambda: api.get_image(DIGEST),
            lambda: api.remove_image("none:latest"),
            api.prune_images,
        ]
        for call in calls:
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                call()
            assert e.value.status == 422 and e.value.code == "unsupported_capability"
        return
    with pytest.raises(sandboxd.SandboxdError):  # a registry on a port where nothing listens
        api.pull_image("127.0.0.1:1/none:latest", timeout=60)
    images = api.list_images()
    assert all(isinstance(i, sandboxd.ImageInfo) and i.digest.startswith("sha256:") for i in images)
    with pytest.raises(sandboxd.NotFound):
        api.get_image(DIGEST)
    with pytest.raises(sandboxd.ValidationError):
        api.get_image("sha256:short")
    with pytest.raises(sandboxd.ValidationError):  # an empty directory is no OCI layout
        api.import_image(str(tmp_path), "none:latest")
    with pytest.raises(sandboxd.ValidationError):  # refused before its stream begins: an ordinary answer
        api.import_image(str(tmp_path), "none:latest", progress=print)
    with pytest.raises(sandboxd.NotFound):
        api.remove_image("none:latest")
    assert api.prune_images() >= 0
    for i in images:
        assert api.get_image(i.digest).digest == i.digest


# --- an image of busybox, imported and pulled (oci) ---


class Registry:
    """Debian's docker-registry on a free loopback port, with a store of its own (as the Go tests'
    image/imagetest starts it)."""

    def __init__(self, root: Path) -> None:
        self.host = f"127.0.0.1:{free_port()}"
        cfg = root / "config.yml"
        cfg.write_text(
            f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
            f"  delete:\n    enabled: true\nhttp:\n  addr: {self.host}\n"
        )
        self.proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.kill()
                    raise RuntimeError(f"the registry on {self.host} does not answer")
                time.sleep(0.05)

    def push(self, layout: Path, repo: str, tag: str) -> str:
        """Puts the one image of an OCI layout on the registry as repo:tag (the distribution API's
        monolithic uploads) and returns its reference."""
        desc = json.loads((layout / "index.json").read_text())["manifests"][0]

        def blob(digest: str) -> bytes:
            return (layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes()

        manifest = blob(desc["digest"])
        doc = json.loads(manifest)
        for d in [doc["config"]] + doc["layers"]:
            post = urllib.request.Request(f"http://{self.host}/v2/{repo}/blobs/uploads/", data=b"", method="POST")
            with urllib.request.urlopen(post, timeout=30) as r:
                loc = urljoin(f"http://{self.host}/", r.headers["Location"])
            put = urllib.request.Request(
                loc + ("&" if "?" in loc else "?") + "digest=" + d["digest"], data=blob(d["digest"]), method="PUT",
                headers={"Content-Type": "application/octet-stream"},
            )  # fmt: skip
            urllib.request.urlopen(put, timeout=30).close()
        put = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{tag}", data=manifest, method="PUT",
            headers={"Content-Type": desc["mediaType"]},
        )  # fmt: skip
        urllib.request.urlopen(put, timeout=30).close()
        return f"{self.host}/{repo}:{tag}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def image_env(binary: Path) -> Iterator[Tuple[Daemon, Path, str]]:
    """A daemon that pulls from a loopback registry over plain HTTP, the busybox layout, and its
    reference on the registry."""
    root = Path(tempfile.mkdtemp(prefix="sandboxd-py-images-"))
    try:
        layout = root / "busybox-oci"
        subprocess.run([str(REPO / "scripts" / "busybox-image"), str(layout)], check=True, stdout=subprocess.DEVNULL)
        (root / "registry").mkdir()
        registry = Registry(root / "registry")
        try:
            ref = registry.push(layout, "sdk/busybox", "1")
            d = Daemon(binary, "oci", "--insecure-registry", registry.host, "--oci-warm-pool", "0")
            try:
                yield d, layout, ref
            finally:
                _stop(d)
        finally:
            registry.kill()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_reports(reports: List[sandboxd.ImageProgress]) -> None:
    """Seen, monotonic, and the last one the whole image (one layer, its bytes counted)."""
    assert reports, "no progress report"
    for a, b in zip(reports, reports[1:]):
        assert b.layers >= a.layers and b.bytes >= a.bytes, (a, b)
        assert (b.total_layers, b.total_bytes) == (a.total_layers, a.total_bytes)
    last = reports[-1]
    assert last.layers == last.total_layers == 1
    assert last.bytes == last.total_bytes > 0


def test_import_and_pull_with_progress(make_client: Any, request: pytest.FixtureRequest) -> None:
    if PROVIDER != "oci":
        # Without images the progress is never asked: the answer is the 422 of the call.
        with pytest.raises(sandboxd.UnsupportedCapability):
            make_client().import_image("/nonexistent", "none:1", progress=print)
        return
    d, layout, ref = request.getfixturevalue("image_env")
    api = make_client(d.url, d.token)
    reports: List[sandboxd.ImageProgress] = []
    info = api.import_image(str(layout), "sdk/busybox:1", progress=reports.append)
    check_reports(reports)
    assert "sdk/busybox:1" in info.names and info.layers == 1 and info.env == ("PATH=/bin",)
    with api.create_sandbox(image="sdk/busybox:1") as sb:
        assert sb.spec.image == "sdk/busybox:1"
        r = sb.run(["ls", "/bin"], check=True)
        assert {"busybox", "sh", "ls"} <= set(r.text.split())  # the image's files, not the host's
        assert api.get_image(info.digest).users == 1
        with pytest.raises(sandboxd.InvalidState):  # in use
            api.remove_image(info.digest)
        sb.terminate()
    assert api.remove_image("sdk/busybox:1") == "sdk/busybox:1"
    assert api.prune_images() >= 1  # its layer, which no image holds now

    reports = []
    pulled = api.pull_image(ref, progress=reports.append)
    check_reports(reports)
    assert pulled.digest == info.digest and ref in pulled.names
    with pytest.raises(sandboxd.NotFound):  # no such tag: refused before the stream begins
        api.pull_image(ref.rsplit(":", 1)[0] + ":2", progress=reports.append)
    assert api.remove_image(pulled.digest) == pulled.digest
    assert api.prune_images() >= 1


# --- the stream's bytes ---


def sse(*events: Tuple[str, Any]) -> bytes:
    out = b": heartbeat\n\n"
    for name, doc in events:
        out += f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()
    return out


def feed_all(st: ImageStream, data: bytes, step: int) -> List[sandboxd.ImageProgress]:
    got: List[sandboxd.ImageProgress] = []
    for i in range(0, len(data), step):
        got += st.feed(data[i : i + step])
    return got


def test_image_stream_decoding() -> None:
    p0 = {"layers": 0, "totalLayers": 2, "bytes": 0, "totalBytes": 10}
    p1 = {"layers": 2, "totalLayers": 2, "bytes": 10, "totalBytes": 10}
    image = {"digest": "sha256:" + "a" * 64, "names": ["r/x:1"], "layers": 2, "users": 0}
    data = sse(("progress", p0), ("other", {}), ("progress", p1), ("done", image))
    for step in (1, 5, len(data)):
        st = ImageStream("pullImage")
        got = feed_all(st, data, step)
        assert [(p.layers, p.bytes) for p in got] == [(0, 0), (2, 10)]
        assert st.image is not None and st.image.names == ("r/x:1",)

    err = {"error": {"code": "not_found", "message": "no such blob"}}
    st = ImageStream("pullImage")
    with pytest.raises(sandboxd.NotFound) as e:
        feed_all(st, sse(("progress", p0), ("error", err)), 3)
    assert (e.value.code, e.value.message, e.value.status) == ("not_found", "no such blob", 200)
    with pytest.raises(sandboxd.SandboxdError) as e2:  # a code this client does not know
        ImageStream("importImage").feed(sse(("error", {"error": {"code": "later_code", "message": "m"}})))
    assert type(e2.value) is sandboxd.SandboxdError and e2.value.code == "later_code"

    for bad in (sse(("error", {"oops": 1})), sse(("progress", {"layers": "one"})), sse(("done", {"digest": 1})),
                b"event: progress\ndata: {not json\n\n"):  # fmt: skip
        with pytest.raises(sandboxd.UnexpectedResponse):
            ImageStream("pullImage").feed(bad)
    with pytest.raises(sandboxd.ConnectionFailed):  # the end before the last event
        ImageStream("pullImage").feed(b"")
