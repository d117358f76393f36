"""Whether a job's current attempts meet its success rules (pure): Volcano's minSuccess when set
(it replaces the others), else the master succeeded, else every worker, else (elastic) any worker."""

from __future__ import annotations

from collections.abc import Mapping

from torchjob.api.model import MASTER, WORKER, TorchJob
from torchjob.api.status import Reason
from torchjob.core.round.world import Observed, Phase
from torchjob.core.shape.topology import ReplicaId, has_master, replicas


def success(job: TorchJob, current: Mapping[str, Observed]) -> tuple[Reason, str] | None:
    """The reason and message of the job's success, or None while its rules are not met."""
    done = [o for o in current.values() if o.phase is Phase.SUCCEEDED]
    workers = [current.get(rid.name) for rid in replicas(job) if rid.rtype == WORKER]
    if job.spec.minSuccess is not None:
        if len(done) >= job.spec.minSuccess:
            return Reason.MIN_SUCCESS, f"{len(done)} replicas succeeded (minSuccess {job.spec.minSuccess})"
        return None
    if has_master(job):
        master = current.get(ReplicaId(MASTER, 0).name)
        return (Reason.SUCCEEDED, "the master replica succeeded") if master is not None and \
            master.phase is Phase.SUCCEEDED else None
    if workers and all(w is not None and w.phase is Phase.SUCCEEDED for w in workers):
        return Reason.SUCCEEDED, "every worker succeeded"
    if job.spec.elasticPolicy is not None and any(w is not None and w.phase is Phase.SUCCEEDED for w in workers):
        return Reason.SUCCEEDED, "a worker of the elastic job succeeded"
    return None
