"""A pause of the sandbox under its open streams, against a real daemon (host and oci both pause): a
process's output (with both clients) and a watch are held on their connections, their heartbeats say
paused and then running, and every line or change comes once, in order; a terminate during the pause
ends them with their end events. At the edge, the fault proxy answers the streams itself with made-up
events: heartbeats that say nothing the readers know are skipped, without an error or a hang."""

from __future__ import annotations

import threading
from typing import Any, List

import pytest

import sandboxd
from conftest import Factory
from daemon import Daemon
from proxy import FaultProxy
from sandboxd.extensions import StreamHeartbeat, StreamState
from sandboxd.extensions.files import FileChange

COUNT = 300
TICKER = ["python3", "-c", f"import time\nfor i in range({COUNT}):\n print('line', i, flush=True)\n time.sleep(0.01)"]
"""Prints a line every 10 ms."""
WANT = "".join(f"line {i}\n" for i in range(COUNT)).encode()
MAKER = ["python3", "-c", f"import time\nfor i in range({COUNT}):\n open('w/f%03d' % i, 'w').close()\n time.sleep(0.01)"]
"""Makes a file under w every 10 ms."""
MADE = [f"w/f{i:03d}" for i in range(COUNT)]

GARBLED = b"".join(
    b"event: heartbeat\ndata: " + d + b"\n\n"
    for d in [
        b"not json",
        b"[1,2]",
        b"null",
        b'"paused"',
        b"{}",
        b'{"state":"frozen"}',
        b'{"state":"paused","offset":-1}',
        b'{"state":"paused","offset":"0"}',
        b'{"state":"paused","offset":1.5}',
        b'{"state":"running","offset":1e300}',
        b'{"state":"paused","offset":true}',
        b'{"state":["paused"]}',
        b"{" * 10_000,
        b"[" * 100_000 + b"]" * 100_000,
    ]
)
"""Heartbeat events none of which is a StreamHeartbeatEvent."""


def paused_then_running(states: List[StreamState]) -> bool:
    """Whether states are one or more ``paused``, then ``running``."""
    return len(states) >= 2 and states[-1] == "running" and all(s == "paused" for s in states[:-1])


def test_output_is_held_across_a_pause(make_client: Factory, daemon: Daemon, proxy: FaultProxy) -> None:
    via = make_client(proxy.url)
    with via.create_sandbox() as sb, sandboxd.Client(daemon.url, daemon.token) as ctl:
        other = ctl.get_sandbox(sb.id)
        p = sb.start_process(TICKER)
        where = f"/v1/sandboxes/{sb.id}/processes/{p.pid}/output"
        beats: List[StreamHeartbeat] = []
        paused_seen: List[bool] = []
        resumer: List[threading.Thread] = []

        def on_heartbeat(b: StreamHeartbeat) -> None:
            beats.append(b)
            paused_seen.append(stream.paused)
            if b.state == "paused" and not resumer:
                # This thread waits in the stream's read: the resume comes from another.
                resumer.append(threading.Thread(target=other.resume))
                resumer[0].start()

        stream = sb.process_output(p.pid, read_timeout=30, on_heartbeat=on_heartbeat)
        got = b""
        paused = False
        for chunk in stream:
            assert chunk.offset == len(got)
            got += chunk.data
            if got.count(b"\n") >= 20 and not paused:
                paused = True
                other.pause()
        resumer[0].join()
        assert got == WANT
        assert stream.end is not None and (stream.end.reason, stream.end.exit_code) == ("exited", 0)
        assert not stream.paused
        assert paused_then_running([b.state for b in beats]), beats
        assert paused_seen == [b.state == "paused" for b in beats]
        assert all(b.offset is not None and b.offset <= len(WANT) for b in beats), beats
        assert len(proxy.seen("GET", where)) == 1, "the pause was waited out on the one connection"


def test_watch_is_held_across_a_pause(daemon: Daemon) -> None:
    with sandboxd.Client(daemon.url, daemon.token) as api, sandboxd.Client(daemon.url, daemon.token) as ctl:
        with api.create_sandbox() as sb:
            other = ctl.get_sandbox(sb.id)
            sb.run(["mkdir", "w"], check=True)
            states: List[StreamState] = []
            resumer: List[threading.Thread] = []

            def on_heartbeat(b: StreamHeartbeat) -> None:
                assert b.offset is None  # a watch has none
                states.append(b.state)
                if b.state == "paused" and not resumer:
                    resumer.append(threading.Thread(target=other.resume))
                    resumer[0].start()

            created: List[str] = []
            with sb.watch("w", on_heartbeat=on_heartbeat) as w:
                p = sb.start_process(MAKER)
                for c in w:
                    if c.kind != "created":
                        continue
                    assert c.path is not None
                    created.append(c.path)
                    if len(created) == 20:
                        other.pause()
                    if c.path == MADE[-1]:
                        break
                assert not w.paused
            resumer[0].join()
            assert created == MADE
            assert paused_then_running(states), states
            assert sb.wait_process(p.pid, timeout=30).exit_code == 0


def test_terminate_during_a_pause_ends_the_streams(daemon: Daemon) -> None:
    with sandboxd.Client(daemon.url, daemon.token) as api, sandboxd.Client(daemon.url, daemon.token) as ctl:
        with api.create_sandbox() as sb:
            other = ctl.get_sandbox(sb.id)
            sb.run(["mkdir", "w"], check=True)
            p = sb.start_process(["sh", "-c", "echo ready; exec sleep 600"])
            out_paused, watch_paused = threading.Event(), threading.Event()
            stream = sb.process_output(p.pid, read_timeout=30, on_heartbeat=lambda b: out_paused.set())
            w = sb.watch("w", on_heartbeat=lambda b: watch_paused.set())
            assert next(stream).data == b"ready\n"
            rest: dict[str, List[Any]] = {}

            def read(name: str, it: Any) -> None:
                rest[name] = list(it)

            readers = [threading.Thread(target=read, args=a) for a in (("output", stream), ("watch", w))]
            for t in readers:
                t.start()
            try:
                other.pause()
                assert out_paused.wait(60) and watch_paused.wait(60), "no heartbeat said paused"
                assert (stream.paused, w.paused) == (True, True)
                other.terminate()
            finally:
                for t in readers:
                    t.join(60)
                w.close()
                stream.close()
            assert not any(t.is_alive() for t in readers)
            assert rest == {"output": [], "watch": []}  # held by the pause until the terminate ended them
            assert stream.end is not None and stream.end.reason == "terminated"
            assert w.end is not None and w.end["reason"] == "terminated"
            assert (stream.paused, w.paused) == (False, False)


def test_heartbeats_that_say_nothing_are_skipped(make_client: Factory, proxy: FaultProxy) -> None:
    via = make_client(proxy.url, max_retries=2, backoff=0.01)
    with via.create_sandbox() as sb:
        out = f"/v1/sandboxes/{sb.id}/processes/7/output"
        watch = f"/v1/sandboxes/{sb.id}/files/watch"
        proxy.answer_stream(
            out,
            GARBLED
            + b'event: heartbeat\ndata: {"state":"paused","offset":0}\n\n'
            + GARBLED
            + b'event: heartbeat\ndata: {"state":"running","offset":0}\n\n'
            + b'event: output\ndata: {"offset":0,"dataBase64":"aGk="}\n\n'
            + GARBLED
            + b'event: end\ndata: {"reason":"exited","offset":2,"exitCode":0}\n\n',
        )
        beats: List[StreamHeartbeat] = []
        stream = sb.process_output(7, read_timeout=30, on_heartbeat=beats.append)
        assert stream.read_all() == b"hi"
        assert beats == [StreamHeartbeat(state="paused", offset=0), StreamHeartbeat(state="running", offset=0)]
        assert stream.end is not None and (stream.end.reason, stream.offset, stream.paused) == ("exited", 2, False)

        # Only heartbeats that say nothing, and no end event, on every connection: the reader gives up
        # after its retries, as it does on any connection that ends early.
        proxy.answer_stream(out, GARBLED, times=10)
        heard: List[StreamHeartbeat] = []
        with pytest.raises(sandboxd.ConnectionFailed):
            sb.process_output(7, read_timeout=30, on_heartbeat=heard.append).read_all()
        assert heard == [] and len(proxy.seen("GET", out)) == 1 + 3

        if isinstance(via, sandboxd.Client):  # the watch is the synchronous client's
            proxy.answer_stream(
                watch,
                GARBLED
                + b'event: heartbeat\ndata: {"state":"paused"}\n\n'
                + GARBLED
                + b'event: heartbeat\ndata: {"state":"running"}\n\n'
                + b'event: change\ndata: {"kind":"created","path":"w/a"}\n\n'
                + GARBLED
                + b'event: end\ndata: {"reason":"terminated","offset":0}\n\n',
            )
            states: List[StreamState] = []
            with sb.watch("w", on_heartbeat=lambda b: states.append(b.state)) as w:
                assert list(w) == [FileChange(kind="created", path="w/a")]
                assert w.end is not None and (w.end["reason"], w.paused) == ("terminated", False)
            assert states == ["paused", "running"]
            proxy.answer_stream(watch, GARBLED)
            with pytest.raises(sandboxd.ConnectionFailed):
                list(sb.watch("w", on_heartbeat=heard.append))
            # A change whose data is not JSON is the daemon's error, not a crash of the reader.
            proxy.answer_stream(watch, b"event: change\ndata: {oops\n\n")
            with pytest.raises(sandboxd.UnexpectedResponse):
                list(sb.watch("w"))
            assert heard == []


def test_what_on_heartbeat_raises_ends_the_stream(make_client: Factory, proxy: FaultProxy) -> None:
    via = make_client(proxy.url)
    with via.create_sandbox() as sb:
        out = f"/v1/sandboxes/{sb.id}/processes/7/output"
        proxy.answer_stream(out, b'event: heartbeat\ndata: {"state":"paused","offset":0}\n\n')

        def refuse(b: StreamHeartbeat) -> None:
            raise KeyError(b.state)

        stream = sb.process_output(7, read_timeout=30, on_heartbeat=refuse)
        with pytest.raises(KeyError, match="paused"):
            next(stream)
        assert list(stream) == [] and len(proxy.seen("GET", out)) == 1
