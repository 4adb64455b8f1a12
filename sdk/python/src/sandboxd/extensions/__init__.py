"""What sandboxd offers beyond the contract, as ``api/extensions.yaml`` describes it: one module per
group of that document, each with the group's data types (frozen dataclasses like
:mod:`sandboxd.types`, whose ``schema`` names their schema in ``extensions.yaml``) and its requests.

- :mod:`sandboxd.extensions.checkpoints`: checkpoints of a sandbox's memory and processes, and
  ``spec.extensions["sandboxd.checkpoint"]``, a sandbox started from one.
- :mod:`sandboxd.extensions.images`: ``/v1/images``, the images a provider holds (list, pull and
  import, with their progress, inspect, remove, prune); a create's ``image=`` runs on one.
- :mod:`sandboxd.extensions.snapshots`: ``/v1/snapshots`` and ``/v1/templates``, snapshots of a
  sandbox's filesystem, forks of them, and templates (names whose versions are snapshots); a create's
  ``template=`` runs one.
- :mod:`sandboxd.extensions.lifetime`: ``spec.extensions["sandboxd.lifetime"]``, a sandbox's time to
  live and idle bound.
- :mod:`sandboxd.extensions.stats`: ``GET /v1/sandboxes/{sandboxId}/stats`` and ``GET /metrics``.
- :mod:`sandboxd.extensions.volumes`: ``/v1/volumes`` (persistent volumes) and
  ``spec.extensions["sandboxd.volumes"]``, the volumes a sandbox mounts.
- :mod:`sandboxd.extensions.network`: ``spec.extensions["sandboxd.network"]``, a sandbox's egress
  policy; ``GET|PUT /v1/sandboxes/{sandboxId}/network`` and the stream of its denials.
- :mod:`sandboxd.extensions.ports`: the proxy to a port inside a sandbox, the raw TCP relay
  (:mod:`sandboxd.relay`) and preview tokens.
- :mod:`sandboxd.extensions.files`: ``/v1/sandboxes/{sandboxId}/files/raw``, files of any size
  streamed in and out with their SHA-256 checked and uploads resumed, and the stream of a
  directory's changes (``.../files/watch``).
- :mod:`sandboxd.extensions.processes`: ``/v1/sandboxes/{sandboxId}/processes``, background
  processes, their stdin, signals and the resumable stream of their output.

The clients' methods for them (:meth:`sandboxd.Sandbox.stats`, :meth:`sandboxd.Client.metrics`, the
``lifetime``, ``volumes`` and ``network`` arguments of a create, :attr:`sandboxd.Sandbox.lifetime`,
:meth:`sandboxd.Client.create_volume` and the other volume methods, :meth:`sandboxd.Sandbox.network`,
:meth:`sandboxd.Sandbox.set_network`, :meth:`sandboxd.Sandbox.network_denials`,
:meth:`sandboxd.Client.list_images` and the other image methods, :meth:`sandboxd.Sandbox.start_process`
and the other process methods, :meth:`sandboxd.Sandbox.process_output`) are used like every other one.
"""

from __future__ import annotations

from .checkpoints import CHECKPOINT_KEY, Checkpoint, from_checkpoint
from .files import FileChange, RawFileWritten, UploadState
from .images import ImageInfo, ImageList, ImageProgress, ImagePruneResult, ImageRemoved
from .lifetime import LIFETIME_KEY, Lifetime, OnIdle, RecordedLifetime
from .network import NETWORK_KEY, Egress, NetworkDenial, NetworkDenialsEnd, NetworkPolicy, NetworkStatus
from .ports import PreviewToken, parse_port
from .processes import OutputChunk, OutputDropped, Process, ProcessEnd, Signal, StreamHeartbeat, StreamState, TerminalSize
from .snapshots import ForkResult, SnapshotInfo, SnapshotList, TemplateInfo, TemplateList, TemplateVersion
from .stats import SandboxStats
from .volumes import VOLUMES_KEY, Volume, VolumeMount

__all__ = [
    "CHECKPOINT_KEY",
    "LIFETIME_KEY",
    "NETWORK_KEY",
    "VOLUMES_KEY",
    "Checkpoint",
    "Egress",
    "ForkResult",
    "SnapshotInfo",
    "SnapshotList",
    "TemplateInfo",
    "TemplateList",
    "TemplateVersion",
    "FileChange",
    "ImageInfo",
    "ImageList",
    "ImageProgress",
    "ImagePruneResult",
    "ImageRemoved",
    "Lifetime",
    "NetworkDenial",
    "NetworkDenialsEnd",
    "NetworkPolicy",
    "NetworkStatus",
    "OnIdle",
    "OutputChunk",
    "OutputDropped",
    "PreviewToken",
    "Process",
    "TerminalSize",
    "ProcessEnd",
    "RawFileWritten",
    "RecordedLifetime",
    "SandboxStats",
    "Signal",
    "StreamHeartbeat",
    "StreamState",
    "UploadState",
    "Volume",
    "VolumeMount",
    "parse_port",
    "from_checkpoint",
]
