"""The asynchronous client: the API of :mod:`sandboxd.client` and :mod:`sandboxd.sandbox` as coroutines,
on asyncio streams. An :class:`AsyncClient` belongs to the event loop it is first used on.

::

    async with AsyncSandbox.create() as sandbox:
        result = await sandbox.run(["echo", "hello"])
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import posixpath
import time
from pathlib import Path
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Deque,
    Dict,
    Generator,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _ops
from ._async import AsyncStream, AsyncTransport
from ._common import (
    DEFAULT_READ_TIMEOUT,
    DEFAULT_WAIT,
    Argv,
    Tracker,
    as_bytes,
    checked,
    command_argv,
    finish,
    floor_search,
    is_own_recreate,
    make_spec,
    outcome,
    recreate_spec,
    settled,
    stdin_plan,
    timed_out,
    written,
)
from ._sse import Parser, SSEError
from ._transport import (
    DEFAULT_TIMEOUT,
    RESPONSE_HOOKS,
    RETRY_STATUSES,
    Backoff,
    Lost,
    Request,
    Unsent,
    observe,
    parse_base,
    resolve_token,
)
from .client import sandbox_id_of
from .errors import (
    ConnectionFailed,
    EventHistoryUnavailable,
    GenerationConflict,
    NotFound,
    SandboxdError,
    UnexpectedResponse,
    ValidationError,
)
from .extensions.lifetime import Lifetime, RecordedLifetime
from .extensions.network import (
    Denials,
    NetworkDenial,
    NetworkDenialsEnd,
    NetworkPolicy,
    NetworkStatus,
    get_network,
    set_network,
    stream_network_denials,
)
from .extensions.processes import (
    HeartbeatHook,
    OutputChunk,
    Process,
    Reading,
    Signal,
    TerminalSize,
    get_process,
    list_processes,
    process_list,
    resize_process,
    signal_process,
    start_process,
    stdin_result,
    stream_process_output,
    terminal_path,
    wait_process,
    write_process_stdin,
)
from .extensions.ports import PreviewToken, create_preview_token, parse_port, port_path
from .relay import AsyncPortConnection, AsyncPortForward, async_dial
from .extensions.checkpoints import Checkpoint, checkpoint_list, checkpoint_sandbox, list_checkpoints
from .extensions.stats import SandboxStats, get_metrics, get_sandbox_stats
from .extensions.images import (
    ImageInfo,
    ImageStream,
    ProgressCallback,
    get_image,
    image_list,
    import_image,
    layers_removed,
    list_images,
    prune_images,
    pull_image,
    remove_image,
    removed_reference,
)
from .extensions.snapshots import (
    SnapshotInfo,
    TemplateInfo,
    build_template,
    delete_snapshot,
    delete_template,
    fork_ids,
    fork_snapshot,
    get_snapshot,
    get_template,
    list_snapshots,
    list_templates,
    snapshot_list,
    snapshot_sandbox,
    template_list,
)
from .extensions.volumes import Volume, VolumeMount, create_volume, delete_volume, get_volume, list_volumes, volume_list
from .types import (
    CommandResult,
    Failure,
    FileEntry,
    FileReadResult,
    Resources,
    RuntimeInfo,
    SandboxEvent,
    SandboxResource,
    SandboxSpec,
)

__all__ = ["AsyncClient", "AsyncDenialStream", "AsyncEventStream", "AsyncFiles", "AsyncOutputStream", "AsyncSandbox"]

Data = Union[bytes, bytearray, memoryview, str]
SandboxRef = Union[str, "AsyncSandbox", SandboxResource]


class AsyncClient:
    """The asynchronous :class:`sandboxd.Client`: the same arguments, the same methods as coroutines.
    Use it as an async context manager, or await :meth:`close`."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        max_retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
    ) -> None:
        self._base = parse_base(url)
        self._backoff = Backoff(max(0, max_retries), max(backoff, 0.001), max(max_backoff, backoff))
        self._t = AsyncTransport(self._base, resolve_token(token), timeout, self._backoff)
        self._cursor: Optional[int] = None

    @property
    def url(self) -> str:
        return self._base.url

    @property
    def timeout(self) -> float:
        return self._t.timeout

    async def close(self) -> None:
        """Closes the kept-alive connections."""
        await self._t.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    async def health(self) -> bool:
        """See :meth:`sandboxd.Client.health`."""
        doc = await self._t.call(_ops.get_health())
        return isinstance(doc, dict) and doc.get("status") == "ok"

    async def runtime(self) -> RuntimeInfo:
        """See :meth:`sandboxd.Client.runtime`."""
        return RuntimeInfo.from_json(await self._t.call(_ops.get_runtime_info()))

    async def metrics(self) -> str:
        """See :meth:`sandboxd.Client.metrics`."""
        text: str = await self._t.call(get_metrics())
        return text

    def create_sandbox(
        self,
        *,
        image: Optional[str] = None,
        template: Optional[str] = None,
        resources: Optional[Resources] = None,
        required_capabilities: Optional[Iterable[str]] = None,
        extensions: Optional[Mapping[str, Any]] = None,
        client_request_id: Optional[str] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        lifetime: Optional[Lifetime] = None,
        volumes: Optional[Sequence[VolumeMount]] = None,
        network: Optional[NetworkPolicy] = None,
    ) -> Creating:
        """See :meth:`AsyncSandbox.create`: await it, or ``async with`` it."""
        return AsyncSandbox.create(
            self,
            image=image,
            template=template,
            resources=resources,
            required_capabilities=required_capabilities,
            extensions=extensions,
            client_request_id=client_request_id,
            wait=wait,
            timeout=timeout,
            lifetime=lifetime,
            volumes=volumes,
            network=network,
        )

    # --- images (api/extensions.yaml) ---

    async def list_images(self) -> List[ImageInfo]:
        """See :meth:`sandboxd.Client.list_images`."""
        return image_list(await self._t.call(list_images()))

    async def pull_image(
        self, reference: str, *, timeout: float = 600.0, progress: Optional[ProgressCallback] = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> ImageInfo:  # fmt: skip
        """See :meth:`sandboxd.Client.pull_image`; ``progress`` is a plain function, called on the loop."""
        return await self._image_work(pull_image(reference, timeout, progress is not None), progress, timeout, read_timeout)

    async def import_image(
        self, host_path: str, name: str, *, timeout: float = 600.0, progress: Optional[ProgressCallback] = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> ImageInfo:  # fmt: skip
        """See :meth:`sandboxd.Client.import_image`."""
        return await self._image_work(import_image(host_path, name, timeout, progress is not None), progress, timeout, read_timeout)

    async def _image_work(
        self, req: Request, progress: Optional[ProgressCallback], timeout: float, read_timeout: float
    ) -> ImageInfo:
        if progress is None:
            return ImageInfo.from_json(await self._t.call(req))
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._image_stream(req, progress, deadline, read_timeout)
            except (Unsent, Lost, SandboxdError) as e:
                ImageStream.retry(req, attempt, self._backoff, e, deadline, timeout)
            await asyncio.sleep(self._backoff.delay(attempt))

    async def _image_stream(self, req: Request, progress: ProgressCallback, deadline: float, read_timeout: float) -> ImageInfo:
        s = await self._t.open_stream(req, read_timeout, or_json=True)
        try:
            if s.doc is not None:
                return ImageInfo.from_json(s.doc)
            st = ImageStream(req.operation)
            while st.image is None:
                s.set_timeout(min(read_timeout, deadline - time.monotonic()))
                chunk = await s.read()
                if not chunk:
                    raise Lost() from ConnectionError("the stream ended without its answer")
                for p in st.feed(chunk):
                    progress(p)
            return st.image
        finally:
            s.close()

    async def get_image(self, digest: str) -> ImageInfo:
        """See :meth:`sandboxd.Client.get_image`."""
        return ImageInfo.from_json(await self._t.call(get_image(digest)))

    async def remove_image(self, reference: str) -> str:
        """See :meth:`sandboxd.Client.remove_image`."""
        return removed_reference(await self._t.call(remove_image(reference)))

    async def prune_images(self) -> int:
        """See :meth:`sandboxd.Client.prune_images`."""
        return layers_removed(await self._t.call(prune_images()))

    # --- ports (api/extensions.yaml) ---

    async def dial_port(self, sandbox_id: str, port: int, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> AsyncPortConnection:
        """See :meth:`sandboxd.Client.dial_port`."""
        return await async_dial(self._t, sandbox_id, port, read_timeout=read_timeout)

    async def forward_port(
        self, sandbox_id: str, remote_port: int, local_port: int = 0, *, host: str = "127.0.0.1",
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> AsyncPortForward:  # fmt: skip
        """See :meth:`sandboxd.Client.forward_port`: a task per connection, on this loop."""
        parse_port(remote_port)
        return await AsyncPortForward(lambda: self.dial_port(sandbox_id, remote_port), on_error)._start(host, local_port)

    # --- snapshots and templates (api/extensions.yaml) ---

    async def snapshot(self, sandbox_id: str, generation: int, *, name: Optional[str] = None, timeout: float = 600.0) -> SnapshotInfo:
        """See :meth:`sandboxd.Client.snapshot`."""
        return SnapshotInfo.from_json(await self._t.call(snapshot_sandbox(sandbox_id, generation, name, timeout)))

    async def list_snapshots(self) -> List[SnapshotInfo]:
        """See :meth:`sandboxd.Client.list_snapshots`."""
        return snapshot_list(await self._t.call(list_snapshots()))

    async def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        """See :meth:`sandboxd.Client.get_snapshot`."""
        return SnapshotInfo.from_json(await self._t.call(get_snapshot(snapshot_id)))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """See :meth:`sandboxd.Client.delete_snapshot`."""
        await self._t.call(delete_snapshot(snapshot_id))

    async def fork(
        self, snapshot_id: str, count: int, *, client_request_id: Optional[str] = None,
        spec: Optional[Dict[str, Any]] = None, timeout: float = 600.0,
    ) -> List[str]:
        """See :meth:`sandboxd.Client.fork`."""
        return fork_ids(await self._t.call(fork_snapshot(snapshot_id, count, client_request_id, spec, timeout)))

    async def build_template(
        self, name: str, base_image: str, steps: Sequence[Dict[str, Any]] = (), *,
        env: Optional[Sequence[str]] = None, workdir: Optional[str] = None, timeout: float = 1800.0,
    ) -> TemplateInfo:
        """See :meth:`sandboxd.Client.build_template`."""
        return TemplateInfo.from_json(await self._t.call(build_template(name, base_image, steps, env, workdir, timeout)))

    async def list_templates(self) -> List[TemplateInfo]:
        """See :meth:`sandboxd.Client.list_templates`."""
        return template_list(await self._t.call(list_templates()))

    async def get_template(self, ref: str) -> TemplateInfo:
        """See :meth:`sandboxd.Client.get_template`."""
        return TemplateInfo.from_json(await self._t.call(get_template(ref)))

    async def delete_template(self, ref: str) -> None:
        """See :meth:`sandboxd.Client.delete_template`."""
        await self._t.call(delete_template(ref))

    # --- volumes (api/extensions.yaml) ---

    async def create_volume(self, name: str, size_mib: int, *, shared: Optional[bool] = None) -> Volume:
        """See :meth:`sandboxd.Client.create_volume`."""
        return Volume.from_json(await self._t.call(create_volume(name, size_mib, shared)))

    async def list_volumes(self) -> List[Volume]:
        """See :meth:`sandboxd.Client.list_volumes`."""
        return volume_list(await self._t.call(list_volumes()))

    async def get_volume(self, name: str) -> Volume:
        """See :meth:`sandboxd.Client.get_volume`."""
        return Volume.from_json(await self._t.call(get_volume(name)))

    async def delete_volume(self, name: str) -> None:
        """See :meth:`sandboxd.Client.delete_volume`."""
        await self._t.call(delete_volume(name))

    async def get_sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """See :meth:`sandboxd.Client.get_sandbox`."""
        return AsyncSandbox(self, await self._get(sandbox_id))

    async def list_sandboxes(self) -> List[AsyncSandbox]:
        """See :meth:`sandboxd.Client.list_sandboxes`."""
        doc = await self._t.call(_ops.list_sandboxes())
        items = doc.get("sandboxes") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listSandboxes: want {'sandboxes': [...]}")
        return [AsyncSandbox(self, SandboxResource.from_json(v)) for v in items]

    async def list_events(self, after: int = 0, sandbox: Optional[SandboxRef] = None) -> List[SandboxEvent]:
        """See :meth:`sandboxd.Client.list_events`."""
        evs = await self._list_events(after, sandbox_id_of(sandbox))
        if evs:
            self._note(evs[-1].cursor)
        return evs

    def events(
        self,
        after: Optional[int] = None,
        sandbox: Optional[SandboxRef] = None,
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_reconnects: int = 10,
    ) -> AsyncEventStream:
        """See :meth:`sandboxd.Client.events`: an async iterator (``async for``)."""
        return AsyncEventStream(self, after, sandbox_id_of(sandbox), read_timeout, max_reconnects)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Any = None,
        idempotent: bool = False,
        timeout: Optional[float] = None,
    ) -> Any:
        """See :meth:`sandboxd.Client.request`."""
        req = _ops.custom(method, path, query=query, body=body, idempotent=idempotent, timeout=timeout)
        return await self._t.call(req)

    # --- for AsyncSandbox and AsyncEventStream ---

    async def _call(self, req: Request) -> Any:
        return await self._t.call(req)

    async def _get(self, sandbox_id: str) -> SandboxResource:
        return SandboxResource.from_json(await self._t.call(_ops.get_sandbox(sandbox_id)))

    async def _list_events(self, after: int, sandbox_id: Optional[str]) -> List[SandboxEvent]:
        doc = await self._t.call(_ops.list_events(after, sandbox_id))
        items = doc.get("events") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listEvents: want {'events': [...]}")
        return [SandboxEvent.from_json(v) for v in items]

    def _note(self, cursor: int) -> None:
        if self._cursor is None or cursor > self._cursor:
            self._cursor = cursor

    async def _known_cursor(self) -> int:
        c = self._cursor
        return c if c is not None else await self._find_floor()

    async def _find_floor(self, hint: Optional[int] = None) -> int:
        search = floor_search(hint)
        probe = next(search)
        while True:
            try:
                await self._t.call(_ops.list_events(probe, _ops.NO_SANDBOX))
                ok = True
            except EventHistoryUnavailable as e:
                ok = False
                if hint is None and e.oldest_cursor is not None:
                    hint = e.oldest_cursor - 1
                    search = floor_search(hint)
                    next(search)
            try:
                probe = search.send(ok)
            except StopIteration as done:
                floor: int = done.value
                self._note(floor)
                return floor


class AsyncDenialStream(AsyncIterator[NetworkDenial]):
    """The asynchronous :class:`sandboxd.DenialStream`: ``async for denial in stream``; close it with
    ``await stream.aclose()`` or ``async with``."""

    def __init__(self, stream: AsyncStream) -> None:
        self._stream: Optional[AsyncStream] = stream
        self._denials = Denials()
        self._pending: Deque[NetworkDenial] = collections.deque()

    @property
    def end(self) -> Optional[NetworkDenialsEnd]:
        """See :attr:`sandboxd.DenialStream.end`."""
        return self._denials.end

    def __aiter__(self) -> AsyncDenialStream:
        return self

    async def __anext__(self) -> NetworkDenial:
        while not self._pending:
            stream = self._stream
            if stream is None or self._denials.end is not None:
                self._close()
                raise StopAsyncIteration
            try:
                self._pending.extend(self._denials.feed(await stream.read()))
            except Lost as e:
                self._close()
                raise self._denials.lost(e) from None
            except SandboxdError:
                self._close()
                raise
        return self._pending.popleft()

    def _close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    async def aclose(self) -> None:
        """Closes the connection; iteration then stops."""
        self._close()

    async def __aenter__(self) -> AsyncDenialStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._close()


class AsyncEventStream(AsyncIterator[SandboxEvent]):
    """The asynchronous :class:`sandboxd.EventStream`: ``async for ev in stream``, or
    ``await stream.next(timeout)``; close it with ``await stream.aclose()`` or ``async with``."""

    def __init__(
        self,
        client: AsyncClient,
        after: Optional[int],
        sandbox_id: Optional[str],
        read_timeout: float,
        max_reconnects: int,
    ) -> None:
        self._client = client
        self._t = client._t
        self._after = after
        self._explicit = after is not None
        self._sandbox_id = sandbox_id
        self._read_timeout = read_timeout
        self._max_reconnects = max_reconnects
        self._stream: Optional[AsyncStream] = None
        self._parser = Parser()
        self._pending: Deque[SandboxEvent] = collections.deque()
        self._failures = 0
        self._why = ""
        self._on_conn = 0
        self._connections = 0
        self._yielded = False
        self._closed = False

    @property
    def last_cursor(self) -> Optional[int]:
        return self._after

    @property
    def connections(self) -> int:
        return self._connections

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> SandboxEvent:
        ev = await self._next(None)
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def next(self, timeout: Optional[float] = None) -> Optional[SandboxEvent]:
        """The next event; None when ``timeout`` seconds pass without one."""
        try:
            return await self._next(timeout)
        except StopAsyncIteration:
            return None

    async def _next(self, timeout: Optional[float]) -> Optional[SandboxEvent]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._stream is None:
                if not await self._connect(deadline):
                    return None
                continue
            stream = self._stream
            ours = left is not None and left < self._read_timeout
            stream._timeout = min(self._read_timeout, left) if ours and left is not None else self._read_timeout
            try:
                chunk = await stream.read()
            except Lost:
                deadline_passed = ours and deadline is not None and time.monotonic() >= deadline - 0.001
                self._drop(failed=not deadline_passed)
                continue
            if not chunk:
                self._drop(failed=True)
                continue
            try:
                msgs = self._parser.feed(chunk)
            except SSEError as e:
                await self.aclose()
                raise UnexpectedResponse(f"event stream: {e}") from None
            for m in msgs:
                self._take(m.data)
        self._yielded = True
        return self._pending.popleft()

    def _take(self, data: str) -> None:
        try:
            doc = json.loads(data)
            ev = SandboxEvent.from_json(doc)
        except (ValueError, SandboxdError) as e:
            self._closed = True
            self._drop()
            raise UnexpectedResponse(f"event stream: the data of an event is not an event: {e}") from None
        if RESPONSE_HOOKS:
            observe("streamEvents", 200, doc)
        if self._after is not None and ev.cursor <= self._after:
            return
        self._after = ev.cursor
        self._pending.append(ev)
        self._on_conn += 1
        self._client._note(ev.cursor)

    async def _connect(self, deadline: Optional[float]) -> bool:
        while True:
            if self._failures > self._max_reconnects:
                await self.aclose()
                raise ConnectionFailed(f"event stream: {self._failures} connections failed in a row: {self._why}")
            if self._failures:
                pause = self._client._backoff.delay(self._failures)
                if deadline is not None and deadline - time.monotonic() <= pause:
                    await asyncio.sleep(max(deadline - time.monotonic(), 0))
                    return False
                await asyncio.sleep(pause)
            if self._after is None:
                self._after = await self._client._find_floor()
            try:
                req = _ops.stream_events(self._after, self._sandbox_id, resumed=self._connections > 0)
                self._stream = await self._t.open_stream(req, self._read_timeout)
                self._connections += 1
                self._on_conn = 0
                self._parser.reset()
                return True
            except EventHistoryUnavailable:
                if self._explicit or self._yielded:
                    await self.aclose()
                    raise
                self._after = None
                continue
            except SandboxdError as e:
                if e.status not in RETRY_STATUSES:
                    await self.aclose()
                    raise
                self._why = str(e)
            except (Unsent, Lost) as e:
                self._why = str(e.__cause__ or e)
            self._failures += 1

    def _drop(self, failed: bool = False) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            if failed:
                self._failures = 0 if self._on_conn else self._failures + 1
                self._why = "the stream ended"

    async def aclose(self) -> None:
        """Closes the connection; iteration then stops."""
        self._closed = True
        self._drop()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Creating(Awaitable["AsyncSandbox"]):
    """A create under way: ``await`` it for the sandbox, or ``async with`` it to have the sandbox
    terminated at the end of the block."""

    def __init__(self, make: Awaitable[AsyncSandbox]) -> None:
        self._make = make
        self._sb: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._make.__await__()

    async def __aenter__(self) -> AsyncSandbox:
        self._sb = await self._make
        return self._sb

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if self._sb is not None:
            await self._sb.__aexit__(exc_type, *exc)


class AsyncSandbox:
    """The asynchronous :class:`sandboxd.Sandbox`: the same properties, its methods as coroutines, and
    ``async with`` terminating it at exit."""

    def __init__(self, client: AsyncClient, resource: SandboxResource, *, own_client: bool = False) -> None:
        self.client = client
        self.resource = resource
        self.files = AsyncFiles(self)
        self._own_client = own_client
        self._cursor: Optional[int] = None

    @classmethod
    def create(
        cls,
        client: Optional[AsyncClient] = None,
        *,
        image: Optional[str] = None,
        template: Optional[str] = None,
        resources: Optional[Resources] = None,
        required_capabilities: Optional[Iterable[str]] = None,
        extensions: Optional[Mapping[str, Any]] = None,
        client_request_id: Optional[str] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        lifetime: Optional[Lifetime] = None,
        volumes: Optional[Sequence[VolumeMount]] = None,
        network: Optional[NetworkPolicy] = None,
    ) -> Creating:
        """See :meth:`sandboxd.Sandbox.create`. ``sandbox = await AsyncSandbox.create(...)``, or
        ``async with AsyncSandbox.create(...) as sandbox:``."""
        spec = make_spec(
            image=image,
            template=template,
            resources=resources,
            required_capabilities=required_capabilities,
            extensions=extensions,
            client_request_id=client_request_id,
            lifetime=lifetime,
            volumes=volumes,
            network=network,
        )
        return Creating(cls._create(client, spec, wait, timeout))

    @classmethod
    async def _create(
        cls, client: Optional[AsyncClient], spec: SandboxSpec, wait: bool, timeout: float
    ) -> AsyncSandbox:
        own = client is None
        c = client or AsyncClient()
        try:
            after = await c._known_cursor() if wait else None
            sb = cls(c, SandboxResource.from_json(await c._call(_ops.create_sandbox(spec))), own_client=own)
            if wait:
                await sb._wait("ready", timeout, after)
            return sb
        except BaseException:
            if own:
                await c.close()
            raise

    @classmethod
    async def connect(cls, client: AsyncClient, sandbox_id: str) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.connect`."""
        return cls(client, await client._get(sandbox_id))

    @property
    def id(self) -> str:
        return self.resource.id

    @property
    def generation(self) -> int:
        return self.resource.generation

    @property
    def state(self) -> str:
        return self.resource.state

    @property
    def spec(self) -> SandboxSpec:
        return self.resource.spec

    @property
    def failure(self) -> Optional[Failure]:
        return self.resource.failure

    @property
    def lifetime(self) -> Optional[RecordedLifetime]:
        """See :attr:`sandboxd.Sandbox.lifetime`."""
        return RecordedLifetime.of(self.resource.provider_extensions)

    async def checkpoint(self, *, leave_running: bool = False) -> Checkpoint:
        """See :meth:`sandboxd.Sandbox.checkpoint`."""
        raw = await self.client._call(checkpoint_sandbox(self.id, self.generation, leave_running))
        c = Checkpoint.from_json(raw["checkpoint"])
        await self.refresh()
        return c

    async def checkpoints(self) -> list[Checkpoint]:
        """See :meth:`sandboxd.Sandbox.checkpoints`."""
        return checkpoint_list(await self.client._call(list_checkpoints(self.id)))

    async def stats(self) -> SandboxStats:
        """See :meth:`sandboxd.Sandbox.stats`."""
        return SandboxStats.from_json(await self.client._call(get_sandbox_stats(self.id)))

    def port_url(self, port: int) -> str:
        """See :meth:`sandboxd.Sandbox.port_url`."""
        return self.client.url.rstrip("/") + port_path(self.id, port)

    async def preview_token(self, port: int, ttl_seconds: Optional[int] = None) -> PreviewToken:
        """See :meth:`sandboxd.Sandbox.preview_token`."""
        return PreviewToken.from_json(await self.client._call(create_preview_token(self.id, port, ttl_seconds)))

    async def dial_port(self, port: int, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> AsyncPortConnection:
        """See :meth:`sandboxd.Sandbox.dial_port`."""
        return await self.client.dial_port(self.id, port, read_timeout=read_timeout)

    async def forward_port(
        self, remote_port: int, local_port: int = 0, *, host: str = "127.0.0.1",
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> AsyncPortForward:  # fmt: skip
        """See :meth:`sandboxd.Sandbox.forward_port`."""
        return await self.client.forward_port(self.id, remote_port, local_port, host=host, on_error=on_error)

    async def network(self) -> NetworkStatus:
        """See :meth:`sandboxd.Sandbox.network`."""
        return NetworkStatus.from_json(await self.client._call(get_network(self.id)))

    async def set_network(self, policy: NetworkPolicy) -> NetworkStatus:
        """See :meth:`sandboxd.Sandbox.set_network`."""
        return NetworkStatus.from_json(await self.client._call(set_network(self.id, self.generation, policy)))

    async def network_denials(self, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> AsyncDenialStream:
        """See :meth:`sandboxd.Sandbox.network_denials`: ``async for denial in await
        sandbox.network_denials()``."""
        req = stream_network_denials(self.id)
        try:
            stream = await self.client._t.open_stream(req, read_timeout)
        except (Lost, Unsent) as e:
            raise ConnectionFailed(f"network denials: {e.__cause__ or e}") from None
        return AsyncDenialStream(stream)

    # --- background processes (api/extensions.yaml) ---

    async def start_process(
        self,
        argv: Argv,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Data] = None,
        close_stdin: bool = False,
        tag: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
    ) -> Process:
        """See :meth:`sandboxd.Sandbox.start_process`."""
        req = start_process(
            self.id, self.generation, command_argv(argv), cwd=cwd, env=env, stdin=stdin, close_stdin=close_stdin, tag=tag,
            pty=pty,
        )
        return Process.from_json(await self.client._call(req))

    async def processes(self) -> List[Process]:
        """See :meth:`sandboxd.Sandbox.processes`."""
        return process_list(await self.client._call(list_processes(self.id, self.generation)))

    async def process(self, pid: int) -> Process:
        """See :meth:`sandboxd.Sandbox.process`."""
        return Process.from_json(await self.client._call(get_process(self.id, self.generation, pid)))

    async def wait_process(self, pid: int, timeout: float = 60.0) -> Process:
        """See :meth:`sandboxd.Sandbox.wait_process`."""
        req = wait_process(self.id, self.generation, pid, timeout, self.client.timeout)
        return Process.from_json(await self.client._call(req))

    async def write_stdin(self, pid: int, data: Data = b"", *, close: bool = False) -> int:
        """See :meth:`sandboxd.Sandbox.write_stdin`."""
        written, _ = stdin_result(await self.client._call(write_process_stdin(self.id, self.generation, pid, data, close)))
        return written

    async def resize_process(self, pid: int, rows: int, cols: int) -> TerminalSize:
        """See :meth:`sandboxd.Sandbox.resize_process`."""
        return TerminalSize.from_json(await self.client._call(resize_process(self.id, self.generation, pid, rows, cols)))

    def terminal_url(self, pid: int, *, after: int = 0, mode: str = "control") -> str:
        """See :meth:`sandboxd.Sandbox.terminal_url`."""
        return self.client.url.replace("http", "ws", 1) + terminal_path(self.id, self.generation, pid, after, mode)

    async def signal_process(self, pid: int, signal: Signal) -> None:
        """See :meth:`sandboxd.Sandbox.signal_process`."""
        await self.client._call(signal_process(self.id, self.generation, pid, signal))

    def process_output(
        self,
        pid: int,
        *,
        after: int = 0,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> AsyncOutputStream:
        """See :meth:`sandboxd.Sandbox.process_output`: ``async for chunk in sandbox.process_output(pid)``
        (``on_heartbeat`` is a plain function, called on the loop)."""
        return AsyncOutputStream(self, pid, after, read_timeout, on_heartbeat)

    def __repr__(self) -> str:
        return f"<AsyncSandbox {self.id} generation {self.generation} {self.state}>"

    def _apply(self, doc: Any) -> AsyncSandbox:
        self.resource = SandboxResource.from_json(doc)
        return self

    async def refresh(self) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.refresh`."""
        self.resource = await self.client._get(self.id)
        return self

    async def reconcile(self) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.reconcile`."""
        return self._apply(await self.client._call(_ops.reconcile_sandbox(self.id)))

    async def pause(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.pause`."""
        return await self._act(_ops.pause_sandbox(self.id, self.generation), "paused", wait, timeout)

    async def resume(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.resume`."""
        return await self._act(_ops.resume_sandbox(self.id, self.generation), "ready", wait, timeout)

    async def terminate(self, *, wait: bool = True, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.terminate`."""
        return await self._act(_ops.terminate_sandbox(self.id, self.generation), "terminated", wait, timeout)

    async def recreate(
        self, spec: Optional[SandboxSpec] = None, *, wait: bool = True, timeout: float = DEFAULT_WAIT
    ) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.recreate`."""
        expected = self.generation
        s = recreate_spec(self.spec, spec)
        after = await self._after() if wait else None
        try:
            self._apply(await self.client._call(_ops.recreate_sandbox(self.id, expected, s)))
        except GenerationConflict as e:
            current = await self.client._get(self.id)
            if not is_own_recreate(e, current, expected, s):
                raise
            self.resource = current
        if wait:
            await self._wait("ready", timeout, after)
        return self

    async def wait_for(self, state: str, *, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        """See :meth:`sandboxd.Sandbox.wait_for`."""
        after = await self._after()
        await self.refresh()
        return await self._wait(state, timeout, after)

    async def _act(self, req: Request, wanted: str, wait: bool, timeout: float) -> AsyncSandbox:
        after = await self._after() if wait else None
        self._apply(await self.client._call(req))
        if wait:
            await self._wait(wanted, timeout, after)
        return self

    async def _after(self) -> int:
        c = await self.client._known_cursor()
        return max(c, self._cursor) if self._cursor is not None else c

    async def _wait(self, wanted: str, timeout: float, after: Optional[int]) -> AsyncSandbox:
        deadline = time.monotonic() + timeout
        while True:
            if settled(self.resource, wanted):
                outcome(self.resource, wanted)
                return self
            if after is None:
                after = await self.client._find_floor()
                await self.refresh()
                continue
            try:
                tr = Tracker(self.resource, after)
                while True:
                    page = await self.client._list_events(tr.cursor, self.id)
                    for e in page:
                        tr.apply(e)
                    if len(page) < 1000 or tr.done(wanted):
                        break
                if not tr.done(wanted):
                    async with AsyncEventStream(self.client, tr.cursor, self.id, DEFAULT_READ_TIMEOUT, 10) as stream:
                        while not tr.done(wanted):
                            ev = await stream.next(timeout=deadline - time.monotonic())
                            if ev is None:
                                await self.refresh()
                                if settled(self.resource, wanted):
                                    break
                                raise timed_out(self.resource, wanted, timeout)
                            tr.apply(ev)
                self._cursor = tr.cursor
                self.client._note(tr.cursor)
            except EventHistoryUnavailable:
                after = None
                continue
            await self.refresh()
            return finish(self.resource, tr, wanted, self)

    async def run(
        self,
        argv: Argv,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[Data] = None,
        max_output_bytes: Optional[int] = None,
        check: bool = False,
    ) -> CommandResult:
        """See :meth:`sandboxd.Sandbox.run`."""
        args = command_argv(argv)
        if stdin is not None:
            where, args = stdin_plan(args, cwd)
            await self.files.write(where, stdin)
        req = _ops.execute_command(
            self.id,
            self.generation,
            args,
            cwd=cwd,
            env=env,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            http_timeout=self.client.timeout,
        )
        return checked(CommandResult.from_json(await self.client._call(req)), args, check)

    def events(self, after: Optional[int] = None) -> AsyncEventStream:
        """See :meth:`sandboxd.Sandbox.events`."""
        return self.client.events(after, self.id)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        try:
            if self.state != "terminated":
                await self.terminate(wait=False)
        except (NotFound, GenerationConflict):
            pass
        except SandboxdError:
            if exc_type is None:
                raise
        finally:
            if self._own_client:
                await self.client.close()


class AsyncOutputStream(Reading, AsyncIterator[OutputChunk]):
    """The asynchronous :class:`sandboxd.OutputStream`: ``async for chunk in stream``; close it with
    ``await stream.aclose()`` or ``async with``."""

    def __init__(
        self,
        sandbox: AsyncSandbox,
        pid: int,
        after: int,
        read_timeout: float,
        on_heartbeat: Optional[HeartbeatHook] = None,
    ) -> None:
        super().__init__(sandbox.id, sandbox.generation, pid, after, read_timeout, sandbox.client._backoff, on_heartbeat)
        self._client = sandbox.client
        self._stream: Optional[AsyncStream] = None

    def __aiter__(self) -> AsyncOutputStream:
        return self

    async def read_all(self) -> bytes:
        """Every byte from here to the end, joined."""
        return b"".join([c.data async for c in self])

    async def __anext__(self) -> OutputChunk:
        while not self.pending:
            more, done = self.goes_on()
            if done:
                self._drop()
            if not more:
                raise StopAsyncIteration
            try:
                if self._stream is None:
                    self._stream = await self._client._t.open_stream(self.request(), self.read_timeout)
                    self.out.reconnect()
                self.take(await self._stream.read())
            except (Lost, Unsent) as e:
                self._drop()
                await asyncio.sleep(self.failed(e))
            except Exception:  # the stream's error, or the one on_heartbeat raised: the stream ends
                self._close()
                raise
        return self.pending.popleft()

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _close(self) -> None:
        self.closed = True
        self._drop()

    async def aclose(self) -> None:
        """Closes the connection; iteration then stops."""
        self._close()

    async def __aenter__(self) -> AsyncOutputStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._close()


class AsyncFiles:
    """The asynchronous :class:`sandboxd.Files`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def read(self, path: str) -> bytes:
        """See :meth:`sandboxd.Files.read`."""
        sb = self._sb
        doc = await sb.client._call(_ops.read_file(sb.id, sb.generation, path))
        return FileReadResult.from_json(doc).content()

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """See :meth:`sandboxd.Files.read_text`."""
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: Data, *, encoding: str = "utf-8") -> FileEntry:
        """See :meth:`sandboxd.Files.write`."""
        sb = self._sb
        raw = as_bytes(data, encoding)
        doc = await sb.client._call(_ops.write_file(sb.id, sb.generation, path, raw, sb.client.timeout))
        res = FileReadResult.from_json(doc)
        return written(res.path, res.size)

    async def list(self, path: str = ".") -> List[FileEntry]:
        """See :meth:`sandboxd.Files.list`."""
        sb = self._sb
        doc = await sb.client._call(_ops.list_files(sb.id, sb.generation, path))
        items = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listFiles: want {'entries': [...]}")
        return [FileEntry.from_json(v) for v in items]

    async def exists(self, path: str) -> bool:
        """See :meth:`sandboxd.Files.exists`."""
        parent, name = posixpath.split(path.rstrip("/") or "/")
        try:
            return any(e.name == name for e in await self.list(parent or "."))
        except NotFound:
            return False

    async def upload(self, local: Union[str, "os.PathLike[str]"], remote: str) -> List[FileEntry]:
        """See :meth:`sandboxd.Files.upload`."""
        src = Path(local)
        if src.is_dir():
            out = []
            for f in sorted(p for p in src.rglob("*") if p.is_file()):
                out.append(await self.write(posixpath.join(remote, f.relative_to(src).as_posix()), f.read_bytes()))
            return out
        return [await self.write(remote, src.read_bytes())]

    async def download(self, remote: str, local: Union[str, "os.PathLike[str]"]) -> List[Path]:
        """See :meth:`sandboxd.Files.download`."""
        dst = Path(local)
        try:
            entries: Optional[Sequence[FileEntry]] = await self.list(remote)
        except ValidationError:
            entries = None
        if entries is None:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(await self.read(remote))
            return [dst]
        out: List[Path] = []
        dst.mkdir(parents=True, exist_ok=True)
        for e in entries:
            if e.is_dir:
                out += await self.download(e.path, dst / e.name)
            else:
                (dst / e.name).write_bytes(await self.read(e.path))
                out.append(dst / e.name)
        return out
