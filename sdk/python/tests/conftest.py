"""Fixtures: a real sandboxd (the host provider, or $SANDBOXD_TEST_PROVIDER), a second one that keeps
only a few events, the fault proxy, and clients. Every JSON document the SDK decodes is checked
against the contract as it is decoded (conformance.check)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import sandboxd  # noqa: E402
from sandboxd import _transport  # noqa: E402

import conformance  # noqa: E402
from daemon import Daemon, build  # noqa: E402
from proxy import FaultProxy  # noqa: E402

PROVIDER = os.environ.get("SANDBOXD_TEST_PROVIDER", "host")

_transport.RESPONSE_HOOKS.append(conformance.check)


@pytest.fixture(scope="session")
def binary() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sandboxd-py-bin-") as d:
        yield build(Path(d))


def _stop(d: Daemon) -> None:
    # Sandboxes outlive their daemon; leave none running behind (the oci provider's are containers).
    try:
        with sandboxd.Client(d.url, d.token) as c:
            for sb in c.list_sandboxes():
                if sb.state != "terminated":
                    try:
                        sb.terminate(timeout=30)
                    except sandboxd.SandboxdError:
                        pass
    finally:
        d.remove()


@pytest.fixture(scope="session")
def daemon(binary: Path) -> Iterator[Daemon]:
    d = Daemon(binary, PROVIDER)
    try:
        yield d
    finally:
        _stop(d)


@pytest.fixture(scope="session")
def short_daemon(binary: Path) -> Iterator[Daemon]:
    """A daemon whose event log keeps only a handful of events, so history runs out."""
    extra = ["--oci-warm-pool", "0"] if PROVIDER == "oci" else []
    d = Daemon(binary, PROVIDER, "--event-retention", "3", *extra)
    try:
        yield d
    finally:
        _stop(d)


@pytest.fixture
def client(daemon: Daemon) -> Iterator[sandboxd.Client]:
    with sandboxd.Client(daemon.url, daemon.token) as c:
        yield c


@pytest.fixture
def proxy(daemon: Daemon) -> Iterator[FaultProxy]:
    p = FaultProxy(("127.0.0.1", daemon.port))
    try:
        yield p
    finally:
        p.close()


def cursor_now(client: sandboxd.Client) -> int:
    """The newest cursor of the daemon's log, paging on from the oldest one kept."""
    after = client._find_floor()
    while True:
        page = client.list_events(after)
        if len(page) < 1000:
            return page[-1].cursor if page else after
        after = page[-1].cursor


# --- one scenario, both clients ---


class Blocking:
    """Drives an object of the asynchronous API from synchronous test code: every coroutine it returns
    is run to completion on the test's loop, and what comes back is wrapped in turn. So one scenario,
    written once, runs against Client and against AsyncClient."""

    _wrap_types: tuple[type, ...] = (
        sandboxd.AsyncClient,
        sandboxd.AsyncSandbox,
        sandboxd.AsyncFiles,
        sandboxd.AsyncEventStream,
        sandboxd.AsyncDenialStream,
        sandboxd.AsyncOutputStream,
        sandboxd.AsyncPortConnection,
        sandboxd.AsyncPortForward,
    )

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def _run(self, v: Any) -> Any:
        if asyncio.iscoroutine(v) or isinstance(v, sandboxd.aio.Creating):
            v = self._loop.run_until_complete(_await(v))
        return self._wrap(v)

    def _wrap(self, v: Any) -> Any:
        if isinstance(v, self._wrap_types):
            return Blocking(v, self._loop)
        if isinstance(v, list):
            return [self._wrap(x) for x in v]
        return v

    def __getattr__(self, name: str) -> Any:
        if name == "close" and isinstance(
            self._target, (sandboxd.AsyncEventStream, sandboxd.AsyncDenialStream, sandboxd.AsyncOutputStream)
        ):
            name = "aclose"
        v = getattr(self._target, name)
        if callable(v) and not isinstance(v, type):
            return lambda *a, **kw: self._run(v(*(_unwrap(x) for x in a), **{k: _unwrap(x) for k, x in kw.items()}))
        return self._wrap(v)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __enter__(self) -> Any:
        return self._wrap(self._loop.run_until_complete(self._target.__aenter__()))

    def __exit__(self, *exc: Any) -> None:
        self._loop.run_until_complete(self._target.__aexit__(*exc))

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        try:
            return self._loop.run_until_complete(self._target.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def __repr__(self) -> str:
        return f"Blocking({self._target!r})"


async def _await(v: Any) -> Any:
    return await v


def _unwrap(v: Any) -> Any:
    return object.__getattribute__(v, "_target") if isinstance(v, Blocking) else v


Factory = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest, daemon: Daemon) -> Iterator[Factory]:
    """A factory of clients of the kind under test: make_client(url=None, token=None, **kw), by default
    of the daemon."""
    made: List[Any] = []
    if request.param == "sync":

        def make(url: Any = None, token: Any = None, **kw: Any) -> Any:
            c = sandboxd.Client(url or daemon.url, token or daemon.token, **kw)
            made.append(c)
            return c

        yield make
        for c in made:
            c.close()
        return
    loop = asyncio.new_event_loop()

    def amake(url: Any = None, token: Any = None, **kw: Any) -> Any:
        c = sandboxd.AsyncClient(url or daemon.url, token or daemon.token, **kw)
        made.append(c)
        return Blocking(c, loop)

    yield amake
    for c in made:
        loop.run_until_complete(c.close())
    loop.close()


@pytest.fixture
def api(make_client: Factory) -> Any:
    """A client (sync or async, driven synchronously) of the daemon."""
    return make_client()
