"""What sandboxd offers beyond the contract, as ``api/extensions.yaml`` describes it: one module per
group of that document, each with the group's data types (frozen dataclasses like
:mod:`sandboxd.types`, whose ``schema`` names their schema in ``extensions.yaml``) and its requests.

- :mod:`sandboxd.extensions.lifetime`: ``spec.extensions["sandboxd.lifetime"]``, a sandbox's time to
  live and idle bound.
- :mod:`sandboxd.extensions.stats`: ``GET /v1/sandboxes/{sandboxId}/stats`` and ``GET /metrics``.
- :mod:`sandboxd.extensions.volumes`: ``/v1/volumes`` (persistent volumes) and
  ``spec.extensions["sandboxd.volumes"]``, the volumes a sandbox mounts.
- :mod:`sandboxd.extensions.network`: ``spec.extensions["sandboxd.network"]``, a sandbox's egress
  policy; ``GET|PUT /v1/sandboxes/{sandboxId}/network`` and the stream of its denials.

The clients' methods for them (:meth:`sandboxd.Sandbox.stats`, :meth:`sandboxd.Client.metrics`, the
``lifetime``, ``volumes`` and ``network`` arguments of a create, :attr:`sandboxd.Sandbox.lifetime`,
:meth:`sandboxd.Client.create_volume` and the other volume methods, :meth:`sandboxd.Sandbox.network`,
:meth:`sandboxd.Sandbox.set_network`, :meth:`sandboxd.Sandbox.network_denials`) are used like every
other one.
"""

from __future__ import annotations

from .lifetime import LIFETIME_KEY, Lifetime, OnIdle, RecordedLifetime
from .network import NETWORK_KEY, Egress, NetworkDenial, NetworkDenialsEnd, NetworkPolicy, NetworkStatus
from .stats import SandboxStats
from .volumes import VOLUMES_KEY, Volume, VolumeMount

__all__ = [
    "LIFETIME_KEY",
    "NETWORK_KEY",
    "VOLUMES_KEY",
    "Egress",
    "Lifetime",
    "NetworkDenial",
    "NetworkDenialsEnd",
    "NetworkPolicy",
    "NetworkStatus",
    "OnIdle",
    "RecordedLifetime",
    "SandboxStats",
    "Volume",
    "VolumeMount",
]
