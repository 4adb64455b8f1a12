"""The group "processes" of api/extensions.yaml, with both clients against a real daemon (host and oci
run background processes alike): a process's output read whole through the iterator, also across a
connection the fault proxy cuts; its exit code by a wait; a stdin round trip; a KILL and the end it
gives the stream; the fence of the sandbox's generation."""

from __future__ import annotations

from typing import Any

import pytest

import sandboxd
from conftest import Factory
from proxy import FaultProxy

LINES = ["python3", "-c", "import sys\nfor i in range(200): print('line', i)\nsys.exit(3)"]
WANT = "".join(f"line {i}\n" for i in range(200)).encode()


def test_output_and_exit(api: Any) -> None:
    with api.create_sandbox() as sb:
        p = sb.start_process(LINES, tag="lines", env={"A": "1"})
        assert isinstance(p, sandboxd.Process) and p.pid >= 1 and p.tag == "lines" and p.argv == tuple(LINES)
        stream = sb.process_output(p.pid, read_timeout=30)
        got = b""
        for chunk in stream:
            assert isinstance(chunk, sandboxd.OutputChunk) and chunk.offset == len(got)
            got += chunk.data
        assert got == WANT
        end = stream.end
        assert isinstance(end, sandboxd.ProcessEnd)
        assert (end.reason, end.exit_code, end.offset) == ("exited", 3, len(WANT))
        done = sb.wait_process(p.pid, timeout=30)
        assert (done.running, done.exit_code, done.output_end) == (False, 3, len(WANT))
        assert done.finished_at is not None and done.finished_at >= done.started_at
        assert [x.pid for x in sb.processes()] == [p.pid] and sb.process(p.pid).exit_code == 3
        # From an offset: only what comes after it.
        tail = sb.process_output(p.pid, after=len(WANT) - 8, read_timeout=30)
        assert tail.read_all() == WANT[-8:] and tail.end is not None and tail.end.reason == "exited"


def test_output_resumes_after_a_cut(make_client: Factory, proxy: FaultProxy) -> None:
    via = make_client(proxy.url)
    with via.create_sandbox() as sb:
        p = sb.start_process(LINES)
        assert sb.wait_process(p.pid, timeout=30).exit_code == 3
        where = f"/v1/sandboxes/{sb.id}/processes/{p.pid}/output"
        proxy.cut_stream(0, times=2, path=where)  # two connections end in the middle of an event
        stream = sb.process_output(p.pid, read_timeout=30)
        assert stream.read_all() == WANT
        assert stream.end is not None and stream.end.reason == "exited"
        seen = proxy.seen("GET", where)
        assert len(seen) == 3 and {s.query["after"] for s in seen} == {"0"}


def test_stdin_round_trip(api: Any) -> None:
    with api.create_sandbox() as sb:
        p = sb.start_process(["cat"])
        assert sb.write_stdin(p.pid, b"first\n") == len("first\n")
        assert sb.write_stdin(p.pid, "second\n") == len("second\n")
        assert sb.write_stdin(p.pid, close=True) == 0
        assert sb.wait_process(p.pid, timeout=30).exit_code == 0
        assert sb.process_output(p.pid, read_timeout=30).read_all() == b"first\nsecond\n"
        # stdin given and closed at the start
        q = sb.start_process(["cat"], stdin="all at once", close_stdin=True)
        assert sb.wait_process(q.pid, timeout=30).exit_code == 0
        assert sb.process_output(q.pid, read_timeout=30).read_all() == b"all at once"


def test_kill_ends_the_stream(api: Any) -> None:
    with api.create_sandbox() as sb:
        p = sb.start_process(["sh", "-c", "echo ready; exec sleep 600"])
        stream = sb.process_output(p.pid, read_timeout=30)
        assert next(stream).data == b"ready\n"
        running = sb.wait_process(p.pid, timeout=0)
        assert running.running and running.exit_code is None
        sb.signal_process(p.pid, "KILL")
        assert list(stream) == []
        assert stream.end is not None and (stream.end.reason, stream.end.exit_code) == ("exited", 128 + 9)
        assert sb.wait_process(p.pid, timeout=30).exit_code == 137
        with pytest.raises(sandboxd.InvalidState) as e:  # it has ended
            sb.signal_process(p.pid, "TERM")
        assert e.value.status == 409


def test_generation_fence(api: Any) -> None:
    with api.create_sandbox() as sb:
        stale = api.get_sandbox(sb.id)
        p = sb.start_process(["true"])
        sb.terminate()
        sb.recreate()
        for call in (
            lambda: stale.start_process(["true"]),
            stale.processes,
            lambda: stale.process(p.pid),
            lambda: stale.wait_process(p.pid, timeout=0),
            lambda: stale.write_stdin(p.pid, b"x"),
            lambda: stale.signal_process(p.pid, "KILL"),
            lambda: stale.process_output(p.pid).read_all(),
        ):
            with pytest.raises(sandboxd.GenerationConflict) as e:
                call()
            assert e.value.status == 409 and e.value.code == "generation_conflict"
        # The new generation starts with no processes.
        assert sb.processes() == []
        with pytest.raises(sandboxd.NotFound):
            sb.process(p.pid)


def test_pty_size_and_resize(api: Any) -> None:
    with api.create_sandbox() as sb:
        if not api.runtime().provider.capabilities.interactive_terminal:
            pytest.skip("the provider has no terminals")
        p = sb.start_process(["sh", "-c", "stty size; read x; stty size"], pty=(24, 80))
        assert p.pty
        stream = sb.process_output(p.pid, read_timeout=30)
        first = b""
        while b"24 80" not in first:
            first += next(stream).data
        sb.resize_process(p.pid, 30, 100)
        sb.write_stdin(p.pid, "\n")
        assert sb.wait_process(p.pid, timeout=30).exit_code == 0
        out = sb.process_output(p.pid, read_timeout=30).read_all()
        assert b"24 80" in out and b"30 100" in out, out
        url = sb.terminal_url(p.pid, after=0, mode="watch")
        assert url.startswith("ws://") and "/terminal?" in url and "mode=watch" in url
        for rows, cols in ((0, 80), (24, 65536)):
            with pytest.raises(sandboxd.ValidationError) as e:
                sb.start_process(["true"], pty=(rows, cols))
            assert e.value.status == 400
        with pytest.raises(sandboxd.InvalidState):  # it has ended
            sb.resize_process(p.pid, 10, 10)
        plain = sb.start_process(["sleep", "30"])
        with pytest.raises(sandboxd.InvalidState):  # no terminal
            sb.resize_process(plain.pid, 10, 10)
        sb.signal_process(plain.pid, "KILL")
