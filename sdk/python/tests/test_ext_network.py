"""The group "network" of api/extensions.yaml, with both clients against a real daemon: on host the 422
of a capability it lacks; on oci a sandbox's egress policy, read, replaced under its generation's fence,
and the stream of what it refuses. The only traffic is to addresses that go nowhere off the machine."""

from __future__ import annotations

from typing import Any

import pytest

import sandboxd
from conftest import PROVIDER
from sandboxd.extensions import NetworkPolicy

# 198.51.100.0/24 and 192.0.2.0/24 are documentation ranges (RFC 5737): nothing answers there.
POLICY = NetworkPolicy(egress="deny", allow=("198.51.100.0/24",))
DENIED = "192.0.2.1"
CONNECT = [
    "python3",
    "-c",
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.settimeout(2)\n"
    "try:\n"
    f"    s.connect(({DENIED!r}, 80))\n"
    "except OSError as e:\n"
    "    sys.exit(f'refused: {e}')\n",
]


def _unsupported(api: Any) -> None:
    # The host provider has no networkPolicy: a create asking for one, and each call, is a 422.
    with pytest.raises(sandboxd.UnsupportedCapability) as e:
        api.create_sandbox(network=POLICY, wait=False)
    assert e.value.status == 422 and e.value.code == "unsupported_capability"
    with api.create_sandbox() as sb:
        for call in (sb.network, lambda: sb.set_network(POLICY), sb.network_denials):
            with pytest.raises(sandboxd.UnsupportedCapability) as e:
                call()
            assert e.value.status == 422
        with pytest.raises(sandboxd.UnsupportedCapability):  # the same through request()
            api.request("GET", f"/v1/sandboxes/{sb.id}/network", idempotent=True)


def test_network(api: Any) -> None:
    if PROVIDER == "host":
        _unsupported(api)
        return
    with api.create_sandbox(network=POLICY) as sb:
        assert sb.spec.extensions["sandboxd.network"] == POLICY.to_json()
        st = sb.network()
        assert isinstance(st, sandboxd.NetworkStatus)
        assert st.generation == sb.generation
        assert (st.policy.egress, tuple(st.policy.allow or ())) == ("deny", ("198.51.100.0/24",))
        assert st.allowed_connections >= 0 and st.denied_connections >= 0

        # A PUT replaces the policy, fenced by the generation the handle knows.
        stale = api.get_sandbox(sb.id)
        new = NetworkPolicy(egress="deny", allow=("198.51.100.0/24",), deny=("192.0.2.0/24",))
        st = sb.set_network(new)
        assert tuple(st.policy.deny or ()) == ("192.0.2.0/24",) and st.generation == sb.generation
        assert tuple(sb.network().policy.deny or ()) == ("192.0.2.0/24",)
        sb.terminate()
        sb.recreate()  # a new generation: the handle read before it is stale
        with pytest.raises(sandboxd.GenerationConflict) as e:
            stale.set_network(POLICY)
        assert e.value.status == 409 and e.value.code == "generation_conflict"
        # The recreated generation has the spec's policy, the one asked at create.
        assert sb.network().policy.deny in (None, ())

        # What the policy refuses comes on the stream, which ends with the generation.
        stream = sb.network_denials(read_timeout=60)
        res = sb.run(CONNECT)
        assert res.exit_code != 0, res.text
        denial = next(stream)
        while denial.destination != DENIED:
            denial = next(stream)
        assert isinstance(denial, sandboxd.NetworkDenial) and denial.time.utcoffset() is not None
        st = sb.network()
        assert st.denied_connections >= 1 and DENIED in [d.destination for d in st.denials]
        sb.terminate()
        rest = list(stream)  # ends: no hang past the terminate
        assert all(isinstance(d, sandboxd.NetworkDenial) for d in rest)
        assert stream.end is not None and stream.end.reason == "invalid_state", stream.end
        with pytest.raises(sandboxd.InvalidState):
            sb.network()
