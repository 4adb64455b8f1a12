"""The synchronous client: :class:`Client` and its :class:`EventStream`."""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from . import _ops
from ._common import DEFAULT_READ_TIMEOUT, DEFAULT_WAIT, floor_search
from ._sse import Parser, SSEError
from ._sync import SyncStream, SyncTransport
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
from .errors import ConnectionFailed, EventHistoryUnavailable, SandboxdError, UnexpectedResponse
from .extensions.lifetime import Lifetime
from .extensions.network import NetworkPolicy
from .extensions.stats import get_metrics
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
from .extensions.ports import parse_port
from .relay import PortConnection, PortForward, dial
from .types import Resources, RuntimeInfo, SandboxEvent, SandboxResource

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["Client", "EventStream"]

SandboxRef = Union[str, "Sandbox", SandboxResource]


def sandbox_id_of(s: Any) -> Optional[str]:
    if s is None or isinstance(s, str):
        return s
    sid = getattr(s, "id", None)
    if not isinstance(sid, str):
        raise TypeError(f"want a sandbox or its id, got {type(s).__name__}")
    return sid


class Client:
    """A client of one sandboxd. It is safe to share between threads.

    ``url`` defaults to ``$SANDBOXD_URL``, then ``http://127.0.0.1:4311``; ``token`` (sent as a bearer
    token) to ``$SANDBOXD_TOKEN``. ``timeout`` is how many seconds the daemon may take to answer a call
    (a command's answer may take its own timeout on top). A call the contract makes safe to repeat is
    repeated up to ``max_retries`` times on a lost connection or a 5xx answer, waiting ``backoff``
    seconds, doubling up to ``max_backoff``; see the README for which calls are.

    Use it as a context manager, or call :meth:`close`, to close its kept-alive connections.
    """

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
        self._t = SyncTransport(self._base, resolve_token(token), timeout, self._backoff)
        self._lock = threading.Lock()
        self._cursor: Optional[int] = None

    @property
    def url(self) -> str:
        """The daemon's base URL."""
        return self._base.url

    @property
    def timeout(self) -> float:
        return self._t.timeout

    def close(self) -> None:
        """Closes the kept-alive connections. The client can still be used: it opens new ones."""
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # --- the contract ---

    def health(self) -> bool:
        """True when the daemon accepts requests (``GET /healthz``, which needs no token)."""
        doc = self._t.call(_ops.get_health())
        return isinstance(doc, dict) and doc.get("status") == "ok"

    def runtime(self) -> RuntimeInfo:
        """The protocol version and the provider's manifest: its name, runtime class and capabilities.
        Errors: ProviderProtocolError, ProviderUnavailable."""
        return RuntimeInfo.from_json(self._t.call(_ops.get_runtime_info()))

    def metrics(self) -> str:
        """The daemon's metrics (``GET /metrics``), in the Prometheus text exposition format (version
        0.0.4): requests by operation and status (``sandboxd_http_*``), provider operations, sandboxes
        by state, the event log, the warm pool, the process. It needs the token when the daemon has
        tokens. Errors: Unauthenticated."""
        text: str = self._t.call(get_metrics())
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
    ) -> Sandbox:
        """Creates a sandbox; the same as :meth:`sandboxd.Sandbox.create` with this client."""
        from .sandbox import Sandbox

        return Sandbox.create(
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

    def list_images(self) -> List[ImageInfo]:
        """The images the provider holds, by digest (``GET /v1/images``). Errors: UnsupportedCapability
        (a provider without images, such as ``host``), ProviderUnavailable."""
        return image_list(self._t.call(list_images()))

    def pull_image(
        self, reference: str, *, timeout: float = 600.0, progress: Optional[ProgressCallback] = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> ImageInfo:  # fmt: skip
        """Fetches an image from its registry (``registry/repository:tag`` or ``...@sha256:...``) and
        names it by that reference; answers once it is in the store, within ``timeout`` seconds. A
        create's ``image=reference`` then runs on it.

        With ``progress``, the daemon streams how far it has come, and ``progress`` is called (in this
        thread) with each :class:`~sandboxd.extensions.ImageProgress`, at most ten a second, the last
        one the whole image. A stream silent for ``read_timeout`` seconds (the daemon sends a heartbeat
        while nothing moves) or broken is a lost answer: the pull is asked again, up to ``max_retries``
        times, and goes on from the layers the store holds. An error the stream ends with is raised as
        the class of its code, as an answer's would be.

        Errors: ValidationError, NotFound (no such image in the registry), UnsupportedCapability,
        ProviderUnavailable."""
        return self._image_work(pull_image(reference, timeout, progress is not None), progress, timeout, read_timeout)

    def import_image(
        self, host_path: str, name: str, *, timeout: float = 600.0, progress: Optional[ProgressCallback] = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> ImageInfo:  # fmt: skip
        """Adds the image of an OCI layout directory or a docker-save / oci-archive tarball at
        ``host_path`` on the daemon's host (not this client's), named ``name`` (``repository:tag``).
        ``progress`` is told how far it has come, as :meth:`pull_image`'s (the bytes of a docker-save
        tarball's layers are not counted: ``total_bytes`` is 0). Errors: ValidationError (a path or
        archive the daemon refuses), UnsupportedCapability, ProviderUnavailable."""
        return self._image_work(import_image(host_path, name, timeout, progress is not None), progress, timeout, read_timeout)

    def _image_work(self, req: Request, progress: Optional[ProgressCallback], timeout: float, read_timeout: float) -> ImageInfo:
        if progress is None:
            return ImageInfo.from_json(self._t.call(req))
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._image_stream(req, progress, deadline, read_timeout)
            except (Unsent, Lost, SandboxdError) as e:
                ImageStream.retry(req, attempt, self._backoff, e, deadline, timeout)
            time.sleep(self._backoff.delay(attempt))

    def _image_stream(self, req: Request, progress: ProgressCallback, deadline: float, read_timeout: float) -> ImageInfo:
        s = self._t.open_stream(req, read_timeout, or_json=True)
        try:
            if s.doc is not None:
                return ImageInfo.from_json(s.doc)
            st = ImageStream(req.operation)
            while st.image is None:
                s.set_timeout(min(read_timeout, deadline - time.monotonic()))
                chunk = s.read()
                if not chunk:
                    raise Lost() from ConnectionError("the stream ended without its answer")
                for p in st.feed(chunk):
                    progress(p)
            return st.image
        finally:
            s.close()

    def get_image(self, digest: str) -> ImageInfo:
        """The image of that manifest digest (``sha256:`` and 64 hex digits). Errors: ValidationError,
        NotFound, UnsupportedCapability."""
        return ImageInfo.from_json(self._t.call(get_image(digest)))

    def remove_image(self, reference: str) -> str:
        """Forgets an image by name (that name only) or by digest (the image and all its names), and
        returns the reference removed. Errors: NotFound, InvalidState (a sandbox runs on it),
        UnsupportedCapability."""
        return removed_reference(self._t.call(remove_image(reference)))

    def prune_images(self) -> int:
        """Removes the images no name and no sandbox holds, and the layers no image has; returns the
        number of layers removed. Errors: UnsupportedCapability."""
        return layers_removed(self._t.call(prune_images()))

    # --- ports (api/extensions.yaml) ---

    def dial_port(self, sandbox_id: str, port: int, *, read_timeout: float = DEFAULT_READ_TIMEOUT) -> PortConnection:
        """A TCP connection to 127.0.0.1:``port`` inside the sandbox, carried over one WebSocket
        (``GET /v1/sandboxes/{id}/ports/{port}/tcp``): a :class:`~sandboxd.relay.PortConnection` to
        read, write and close like a socket. The daemon connects before it answers, so nothing
        listening is an error here, not a connection that ends. ``read_timeout`` bounds how long the
        connection waits for anything from the daemon, which pings every 15 s. Errors: PortUnreachable
        (nothing listens on the port), NotFound, InvalidState (not ready), UnsupportedCapability (no
        ``portForwarding``, such as ``host``), ProviderUnavailable; ValueError for a port that is not
        1-65535."""
        return dial(self._t, sandbox_id, port, read_timeout=read_timeout)

    def forward_port(
        self, sandbox_id: str, remote_port: int, local_port: int = 0, *, host: str = "127.0.0.1",
        on_error: Optional[Callable[[SandboxdError], None]] = None,
    ) -> PortForward:  # fmt: skip
        """Listens on ``host``:``local_port`` (0: a free port; the one taken is ``forward.port``) and
        relays every connection it accepts to ``remote_port`` inside the sandbox over a
        :meth:`dial_port` of its own, in a thread per connection, until closed (``with`` closes it).
        A connection whose relay cannot be opened is closed, its error kept in ``forward.errors`` and
        passed to ``on_error``. Raises OSError when it cannot listen, ValueError for a bad port."""
        parse_port(remote_port)
        return PortForward(lambda: self.dial_port(sandbox_id, remote_port), host, local_port, on_error)

    # --- snapshots and templates (api/extensions.yaml) ---

    def snapshot(self, sandbox_id: str, generation: int, *, name: Optional[str] = None, timeout: float = 600.0) -> SnapshotInfo:
        """Captures the filesystem of a ready or paused sandbox on an image or a template, frozen for
        the instant it takes, as a snapshot (``POST /v1/sandboxes/{id}/snapshots``); with ``name``, the
        snapshot is that template's newest version. Errors: NotFound, GenerationConflict, InvalidState
        (not running, or on no image), ValidationError, UnsupportedCapability."""
        return SnapshotInfo.from_json(self._t.call(snapshot_sandbox(sandbox_id, generation, name, timeout)))

    def list_snapshots(self) -> List[SnapshotInfo]:
        """Every snapshot, oldest first. Errors: UnsupportedCapability."""
        return snapshot_list(self._t.call(list_snapshots()))

    def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        """One snapshot. Errors: NotFound, UnsupportedCapability."""
        return SnapshotInfo.from_json(self._t.call(get_snapshot(snapshot_id)))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot and the template versions that are it. Errors: NotFound, InvalidState (a
        sandbox runs on it), UnsupportedCapability."""
        self._t.call(delete_snapshot(snapshot_id))

    def fork(
        self, snapshot_id: str, count: int, *, client_request_id: Optional[str] = None,
        spec: Optional[Dict[str, Any]] = None, timeout: float = 600.0,
    ) -> List[str]:
        """Creates ``count`` (1 to 32) sandboxes of a snapshot, each with its own copy-on-write
        filesystem, and returns their ids; ``spec`` holds what each has besides the snapshot
        (``resources``, ``requiredCapabilities``, ``extensions``). Errors: ValidationError, NotFound,
        UnsupportedCapability."""
        return fork_ids(self._t.call(fork_snapshot(snapshot_id, count, client_request_id, spec, timeout)))

    def build_template(
        self, name: str, base_image: str, steps: Sequence[Dict[str, Any]] = (), *,
        env: Optional[Sequence[str]] = None, workdir: Optional[str] = None, timeout: float = 1800.0,
    ) -> TemplateInfo:
        """Builds a new version of a template: a sandbox of ``base_image`` runs ``steps`` in order
        (``{"run": [argv...]}``, which must exit 0, or ``{"file": {"path": ..., "content": bytes or str,
        "mode": 0o755}}``), then is snapshotted as the name's newest version. Returns the template with
        that version only. Errors: ValidationError (a step failed), NotFound, UnsupportedCapability."""
        return TemplateInfo.from_json(self._t.call(build_template(name, base_image, steps, env, workdir, timeout)))

    def list_templates(self) -> List[TemplateInfo]:
        """Every template, by name. Errors: UnsupportedCapability."""
        return template_list(self._t.call(list_templates()))

    def get_template(self, ref: str) -> TemplateInfo:
        """A template (``name``) or one version (``name@version``, ``name@sha256:...``). Errors:
        ValidationError, NotFound, UnsupportedCapability."""
        return TemplateInfo.from_json(self._t.call(get_template(ref)))

    def delete_template(self, ref: str) -> None:
        """Removes a template's versions, or the one named. Errors: NotFound, InvalidState (a sandbox
        runs on one), UnsupportedCapability."""
        self._t.call(delete_template(ref))

    # --- volumes (api/extensions.yaml) ---

    def create_volume(self, name: str, size_mib: int, *, shared: Optional[bool] = None) -> Volume:
        """Makes an empty persistent volume of ``size_mib`` MiB (``POST /v1/volumes``), which sandboxes
        mount with a create's ``volumes=[VolumeMount(name, "/data")]``. Writes past its size fail with
        ENOSPC in the sandbox. ``shared=True`` lets several sandboxes write it at once; otherwise it
        has one writer and any number of readers. Errors: ValidationError (a name or size the daemon
        refuses), InvalidState (a volume of that name exists), UnsupportedCapability (no
        ``persistentVolume``, such as ``host``), ProviderUnavailable."""
        return Volume.from_json(self._t.call(create_volume(name, size_mib, shared)))

    def list_volumes(self) -> List[Volume]:
        """Every volume, with the live sandboxes that mount it. Errors: UnsupportedCapability."""
        return volume_list(self._t.call(list_volumes()))

    def get_volume(self, name: str) -> Volume:
        """The volume of that name. Errors: NotFound, UnsupportedCapability."""
        return Volume.from_json(self._t.call(get_volume(name)))

    def delete_volume(self, name: str) -> None:
        """Removes a volume and its data. Errors: InvalidState (a sandbox that is not terminated
        mounts it: terminate it first), NotFound, UnsupportedCapability."""
        self._t.call(delete_volume(name))

    def get_sandbox(self, sandbox_id: str) -> Sandbox:
        """The sandbox of that id, at its current generation. Errors: NotFound."""
        from .sandbox import Sandbox

        return Sandbox(self, self._get(sandbox_id))

    def list_sandboxes(self) -> List[Sandbox]:
        """Every sandbox the daemon knows, terminated ones included."""
        from .sandbox import Sandbox

        doc = self._t.call(_ops.list_sandboxes())
        items = doc.get("sandboxes") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listSandboxes: want {'sandboxes': [...]}")
        return [Sandbox(self, SandboxResource.from_json(v)) for v in items]

    def list_events(self, after: int = 0, sandbox: Optional[SandboxRef] = None) -> List[SandboxEvent]:
        """One page (at most 1000) of the events after the cursor ``after``, oldest first, only of
        ``sandbox`` when given. Page on by passing the last cursor. Errors: EventHistoryUnavailable when
        ``after`` is older than the history the daemon keeps."""
        evs = self._list_events(after, sandbox_id_of(sandbox))
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
    ) -> EventStream:
        """Follows the event log: an iterator of :class:`SandboxEvent`, first those after the cursor
        ``after`` (None: from the oldest the daemon still keeps), then live ones as they happen, only of
        ``sandbox`` when given. It never ends by itself; close it (or use it as a context manager) when
        done.

        When the connection drops, the daemon ends it, or nothing (not even a heartbeat) arrives for
        ``read_timeout`` seconds, it reconnects with ``Last-Event-ID`` set to the last cursor it gave
        out, so no event is lost or repeated; after ``max_reconnects`` failed reconnects in a row it
        raises ConnectionFailed. It raises EventHistoryUnavailable when the history it would resume
        from is gone (the daemon keeps a bounded log), and the error of any other refusal.
        """
        return EventStream(self, after, sandbox_id_of(sandbox), read_timeout, max_reconnects)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Any = None,
        idempotent: bool = False,
        timeout: Optional[float] = None,
    ) -> Any:
        """Sends a request the client has no method for (an endpoint newer than this package) and
        returns its decoded JSON answer. ``body`` is encoded as JSON; ``idempotent=True`` lets the call
        be repeated like a read. Errors are mapped like every other call's."""
        return self._t.call(_ops.custom(method, path, query=query, body=body, idempotent=idempotent, timeout=timeout))

    # --- for Sandbox and EventStream ---

    def _call(self, req: Request) -> Any:
        return self._t.call(req)

    def _get(self, sandbox_id: str) -> SandboxResource:
        return SandboxResource.from_json(self._t.call(_ops.get_sandbox(sandbox_id)))

    def _list_events(self, after: int, sandbox_id: Optional[str]) -> List[SandboxEvent]:
        doc = self._t.call(_ops.list_events(after, sandbox_id))
        items = doc.get("events") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise UnexpectedResponse("listEvents: want {'events': [...]}")
        return [SandboxEvent.from_json(v) for v in items]

    def _note(self, cursor: int) -> None:
        """Remembers a cursor the daemon has answered with: it is within the history kept, and no newer
        than the newest event, so a later wait can start after it."""
        with self._lock:
            if self._cursor is None or cursor > self._cursor:
                self._cursor = cursor

    def _known_cursor(self) -> int:
        """A cursor no newer than the newest event and within the history kept (when last seen)."""
        c = self._cursor
        return c if c is not None else self._find_floor()

    def _find_floor(self, hint: Optional[int] = None) -> int:
        """The oldest cursor the daemon still answers for, by probes of an empty filtered page."""
        search = floor_search(hint)
        probe = next(search)
        while True:
            try:
                self._t.call(_ops.list_events(probe, _ops.NO_SANDBOX))
                ok = True
            except EventHistoryUnavailable as e:
                ok = False
                if hint is None and e.oldest_cursor is not None:
                    hint = e.oldest_cursor - 1
                    search = floor_search(hint)
                    next(search)  # 0, which just failed
            try:
                probe = search.send(ok)
            except StopIteration as done:
                floor: int = done.value
                self._note(floor)
                return floor


class EventStream(Iterator[SandboxEvent]):
    """An open follow of the event log (see :meth:`Client.events`). Iterate it, or call :meth:`next`
    with a timeout; close it when done."""

    def __init__(
        self,
        client: Client,
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
        self._stream: Optional[SyncStream] = None
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
        """The cursor of the last event given out (or the one the stream started after)."""
        return self._after

    @property
    def connections(self) -> int:
        """How many connections the stream has opened (1 + reconnects)."""
        return self._connections

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> SandboxEvent:
        ev = self.next()
        assert ev is not None
        return ev

    def next(self, timeout: Optional[float] = None) -> Optional[SandboxEvent]:
        """The next event; None when ``timeout`` seconds pass without one (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self._closed:
                raise StopIteration
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._stream is None:
                if not self._connect(deadline):
                    return None
                continue
            stream = self._stream
            ours = left is not None and left < self._read_timeout
            stream.set_timeout(min(self._read_timeout, left) if ours and left is not None else self._read_timeout)
            try:
                chunk = stream.read()
            except Lost:
                # Dead, or quiet past the read timeout, or our own deadline: resume from the cursor.
                deadline_passed = ours and deadline is not None and time.monotonic() >= deadline - 0.001
                self._drop(failed=not deadline_passed)
                continue
            if not chunk:
                self._drop(failed=True)  # the daemon ended it (a slow reader, a shutdown)
                continue
            try:
                msgs = self._parser.feed(chunk)
            except SSEError as e:
                self.close()
                raise UnexpectedResponse(f"event stream: {e}") from None
            for m in msgs:
                self._take(m.data)
        ev = self._pending.popleft()
        self._yielded = True
        return ev

    def _take(self, data: str) -> None:
        try:
            doc = json.loads(data)
            ev = SandboxEvent.from_json(doc)
        except (ValueError, SandboxdError) as e:
            self.close()
            raise UnexpectedResponse(f"event stream: the data of an event is not an event: {e}") from None
        if RESPONSE_HOOKS:
            observe("streamEvents", 200, doc)
        if self._after is not None and ev.cursor <= self._after:
            return  # already given out
        self._after = ev.cursor
        self._pending.append(ev)
        self._on_conn += 1
        self._client._note(ev.cursor)

    def _connect(self, deadline: Optional[float]) -> bool:
        while True:
            if self._failures > self._max_reconnects:
                self.close()
                raise ConnectionFailed(f"event stream: {self._failures} connections failed in a row: {self._why}")
            if self._failures:
                pause = self._client._backoff.delay(self._failures)
                if deadline is not None and deadline - time.monotonic() <= pause:
                    time.sleep(max(deadline - time.monotonic(), 0))
                    return False
                time.sleep(pause)
            if self._after is None:
                self._after = self._client._find_floor()
            try:
                req = _ops.stream_events(self._after, self._sandbox_id, resumed=self._connections > 0)
                self._stream = self._t.open_stream(req, self._read_timeout)
                self._connections += 1
                self._on_conn = 0
                self._parser.reset()
                return True
            except EventHistoryUnavailable:
                if self._explicit or self._yielded:
                    self.close()
                    raise
                self._after = None  # pruned since the floor was found: find it again
                continue
            except SandboxdError as e:
                if e.status not in RETRY_STATUSES:
                    self.close()
                    raise
                self._why = str(e)
            except (Unsent, Lost) as e:
                self._why = str(e.__cause__ or e)
            self._failures += 1

    def _drop(self, failed: bool = False) -> None:
        """Closes the connection. A connection that failed before it brought an event counts as a
        failed attempt, so a daemon that keeps dropping streams is met with backoff, not a busy loop."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            if failed:
                self._failures = 0 if self._on_conn else self._failures + 1
                self._why = "the stream ended"

    def close(self) -> None:
        """Closes the connection; iteration then stops."""
        self._closed = True
        self._drop()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._drop()
