"""What sandboxd offers beyond the contract, as ``api/extensions.yaml`` describes it: one module per
group of that document, each with the group's data types (frozen dataclasses like
:mod:`sandboxd.types`, whose ``schema`` names their schema in ``extensions.yaml``) and its requests.

- :mod:`sandboxd.extensions.lifetime`: ``spec.extensions["sandboxd.lifetime"]``, a sandbox's time to
  live and idle bound.
- :mod:`sandboxd.extensions.stats`: ``GET /v1/sandboxes/{sandboxId}/stats`` and ``GET /metrics``.

The clients' methods for them (:meth:`sandboxd.Sandbox.stats`, :meth:`sandboxd.Client.metrics`, the
``lifetime`` argument of a create and :attr:`sandboxd.Sandbox.lifetime`) are used like every other one.
"""

from __future__ import annotations

from .lifetime import LIFETIME_KEY, Lifetime, OnIdle, RecordedLifetime
from .stats import SandboxStats

__all__ = ["LIFETIME_KEY", "Lifetime", "OnIdle", "RecordedLifetime", "SandboxStats"]
