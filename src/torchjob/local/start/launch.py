"""What a local replica is launched with (`LaunchSpec`), and how a local job runs on this machine
(`LocalOptions`, stored with the job)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from torchjob.core.shape.topology import ReplicaId

DEFAULT_GRACE_S = 30.0  # torchrun's own shutdown timeout, so the agent can stop its workers


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass
class LaunchSpec:
    replica: ReplicaId
    argv: list[str]
    env: dict[str, str]  # what torchjob and the job set; the process also inherits os.environ
    cwd: str
    mounts: list[Mount] = field(default_factory=list)
    gpus: list[str] | None = None  # None: CUDA_VISIBLE_DEVICES left alone
    grace_period_s: float = DEFAULT_GRACE_S
    torchrun: bool = False

    @property
    def name(self) -> str:
        return self.replica.name


@dataclass
class LocalOptions:
    """How a job runs on this machine (stored with the job, so a detached run sees the same)."""

    cwd: str = field(default_factory=os.getcwd)
    configmaps: dict[str, str] = field(default_factory=dict)  # name -> file or directory
    pvcs: dict[str, str] = field(default_factory=dict)  # persistentVolumeClaim name -> directory
    resolve_python: bool = True
    document_ports: bool = False  # use the document's ports instead of free ones
    grace_period_s: float | None = None  # overrides terminationGracePeriodSeconds
    # The master and rendezvous ports of the plan `render` showed: the run uses these (None: pick).
    ports: tuple[int, int] | None = None

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)

    @staticmethod
    def from_json(data: dict[str, object]) -> LocalOptions:
        ports = data.get("ports")
        fields = {**data, "ports": tuple(ports) if isinstance(ports, list | tuple) else None}
        return LocalOptions(**fields)  # type: ignore[arg-type]
