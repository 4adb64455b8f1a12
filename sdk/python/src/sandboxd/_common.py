"""The logic the synchronous and asynchronous classes share, without I/O: specs, commands, the state of a
generation followed through its events, and the search for a cursor the daemon still holds."""

from __future__ import annotations

import posixpath
import secrets
from typing import Any, Dict, Generator, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from .errors import (
    CommandFailed,
    GenerationConflict,
    SandboxFailed,
    UnexpectedState,
    ValidationError,
    WaitTimeout,
)
from .extensions.lifetime import LIFETIME_KEY, Lifetime
from .extensions.network import NETWORK_KEY, NetworkPolicy
from .extensions.volumes import VOLUMES_KEY, VolumeMount, volumes_json
from .types import SETTLED_STATES, CommandResult, FileEntry, Resources, SandboxEvent, SandboxResource, SandboxSpec

DEFAULT_WAIT = 60.0
"""Seconds a wait for a state takes at most, unless told."""

DEFAULT_READ_TIMEOUT = 45.0
"""Seconds an event stream may stay silent before it is taken for dead and reopened: three of the
daemon's 15 s heartbeats."""

Argv = Union[str, Sequence[str]]


def new_request_id() -> str:
    """A fresh clientRequestId: one create intent."""
    return "py-" + secrets.token_hex(12)


def make_spec(
    *,
    image: Optional[str],
    template: Optional[str],
    resources: Optional[Resources],
    required_capabilities: Optional[Iterable[str]],
    extensions: Optional[Mapping[str, Any]],
    client_request_id: Optional[str],
    lifetime: Optional[Lifetime] = None,
    volumes: Optional[Sequence[VolumeMount]] = None,
    network: Optional[NetworkPolicy] = None,
) -> SandboxSpec:
    extensions = with_extension(extensions, LIFETIME_KEY, "lifetime", None if lifetime is None else lifetime.to_json())
    extensions = with_extension(extensions, VOLUMES_KEY, "volumes", None if volumes is None else volumes_json(volumes))
    extensions = with_extension(extensions, NETWORK_KEY, "network", None if network is None else network.to_json())
    return SandboxSpec(
        client_request_id=client_request_id or new_request_id(),
        image=image,
        template=template,
        resources=resources,
        required_capabilities=tuple(required_capabilities) if required_capabilities else None,
        extensions=dict(extensions) if extensions else None,
    )


def with_extension(extensions: Optional[Mapping[str, Any]], key: str, arg: str, value: Any) -> Optional[Dict[str, Any]]:
    """extensions with value under key, unless value is None (ValidationError when extensions has the
    key already: the typed argument arg and the key would both say it)."""
    if value is None:
        return dict(extensions) if extensions else None
    out = dict(extensions or {})
    if key in out:
        raise ValidationError(f"{arg} given twice: as {arg}= and as extensions[{key!r}]")
    out[key] = value
    return out


def recreate_spec(current: SandboxSpec, spec: Optional[SandboxSpec]) -> SandboxSpec:
    """The spec of a recreate: spec, or the current one, with a fresh clientRequestId unless spec brings
    one of its own (the current generation's is spent, so it does not count as its own)."""
    s = spec or current
    if not s.client_request_id or s.client_request_id == current.client_request_id:
        s = SandboxSpec(
            client_request_id=new_request_id(),
            image=s.image,
            template=s.template,
            resources=s.resources,
            required_capabilities=s.required_capabilities,
            extensions=s.extensions,
        )
    return s


def is_own_recreate(err: GenerationConflict, res: SandboxResource, expected: int, spec: SandboxSpec) -> bool:
    """Whether the sandbox, found at err, is the generation our recreate made (its answer was lost, and
    the repeat met the generation it had made)."""
    return res.generation == expected + 1 and res.spec.client_request_id == spec.client_request_id


STDIN_SCRIPT = 'exec <"$0" && rm -f -- "$0" && exec "$@"'


def command_argv(argv: Argv) -> List[str]:
    """argv as a list: a string is a shell command line, run by ``sh -c``."""
    if isinstance(argv, str):
        return ["sh", "-c", argv]
    out = list(argv)
    if not out or not all(isinstance(a, str) for a in out):
        raise ValidationError("argv: want a non-empty sequence of strings, or a shell command line")
    return out


def stdin_plan(argv: List[str], cwd: Optional[str]) -> Tuple[str, List[str]]:
    """Where to write a command's stdin, and the argv that runs the command with that file as its
    stdin: the contract has no stdin, so a small shell opens the file, removes it, and execs the
    command. The file is written where the command's cwd resolves."""
    name = ".sandboxd-stdin-" + secrets.token_hex(8)
    where = posixpath.join(cwd, name) if cwd else name
    return where, ["sh", "-c", STDIN_SCRIPT, "./" + name] + argv


def as_bytes(data: Union[bytes, bytearray, memoryview, str], encoding: str = "utf-8") -> bytes:
    if isinstance(data, str):
        return data.encode(encoding)
    return bytes(data)


def checked(result: CommandResult, argv: Sequence[str], check: bool) -> CommandResult:
    if check and not result.ok:
        if result.timed_out:
            why = "timed out"
        elif result.cancelled:
            why = "was cancelled"
        else:
            why = f"exited {result.exit_code}"
        tail = result.stderr_text.strip()[-500:]
        raise CommandFailed(f"{list(argv)!r} {why}" + (f": {tail}" if tail else ""), result=result)
    return result


def written(path: str, size: int) -> FileEntry:
    return FileEntry(path=path, kind="file", size=size)


# --- waiting for a state ---


class Tracker:
    """One generation of one sandbox followed through its events, from a state known to be current."""

    def __init__(self, res: SandboxResource, after: int) -> None:
        self.id = res.id
        self.generation = res.generation
        self.state = res.state
        self.cursor = after
        self.superseded = False  # a newer generation appeared

    def apply(self, ev: SandboxEvent) -> None:
        if ev.cursor <= self.cursor:
            return
        self.cursor = ev.cursor
        if ev.sandbox_id != self.id:
            return
        if ev.generation > self.generation:
            self.superseded = True
        elif ev.generation == self.generation:
            st = ev.new_state
            if st is not None:
                self.state = st

    def done(self, wanted: str) -> bool:
        return self.superseded or self.state == wanted or self.state in SETTLED_STATES


def outcome(res: SandboxResource, wanted: str) -> None:
    """Raises unless res is in the wanted state."""
    if res.state == wanted:
        return
    if res.state == "failed":
        f = res.failure
        why = f": {f.code}: {f.message}" if f else ""
        raise SandboxFailed(f"sandbox {res.id} failed{why}", sandbox=res, wanted=wanted)
    raise UnexpectedState(f"sandbox {res.id} is {res.state}, not {wanted}", sandbox=res, wanted=wanted)


def settled(res: SandboxResource, wanted: str) -> bool:
    """Whether a wait for wanted is over at res (then outcome says how)."""
    return res.state == wanted or res.state in SETTLED_STATES


def timed_out(res: SandboxResource, wanted: str, timeout: float) -> WaitTimeout:
    return WaitTimeout(
        f"sandbox {res.id} still {res.state} after {timeout:g}s of waiting for {wanted}", sandbox=res, wanted=wanted
    )


T = TypeVar("T")


def finish(res: SandboxResource, tr: Tracker, wanted: str, value: T) -> T:
    """The end of a wait whose events said tr, res read after them: value, or the error of the state."""
    if tr.superseded and res.generation != tr.generation:
        raise GenerationConflict(
            f"sandbox {res.id} was recreated while waiting for generation {tr.generation} to be {wanted}: "
            f"generation {tr.generation}, current {res.generation}"
        )
    if tr.state != wanted:
        outcome(res, wanted)
    return value


def floor_search(hint: Optional[int]) -> Generator[int, bool, int]:
    """Finds the oldest cursor the daemon still answers for (the newest event it has pruned; 0 if none):
    it yields a cursor to probe and is sent whether the daemon answered 200 (True) or 410 (False). hint,
    the cursor a 410's message names, is tried first. Between probes the daemon may prune on, so the
    answer is a lower bound that was valid when found; a later 410 means searching again."""
    if (yield 0):
        return 0
    if hint is not None and hint > 0 and (yield hint):
        return hint
    lo, hi = 0, 1  # lo is pruned, hi not yet known
    while not (yield hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (yield mid):
            hi = mid
        else:
            lo = mid
    return hi
