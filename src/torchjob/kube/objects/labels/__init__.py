"""How a job's pods and Service are named and labelled, and what those names and labels say back:
which job, which replica, which attempt (torchjob's own labels, on the pods of every kind served, here).
The labels a served kind's own clients select by, each in its module: `kubeflow` (a PyTorchJob's),
`trainjob` (JobSet's, on a TrainJob's pods), `t9k` (a PyTorchTrainingJob's); `ownership` (the owner
references torchjob sets, and whose an object found in the cluster is)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.core.shape.topology import ReplicaId

LABEL_JOB = "torchjob.dev/job-name"
LABEL_TYPE = "torchjob.dev/replica-type"
LABEL_INDEX = "torchjob.dev/replica-index"
ANNOTATION_ATTEMPT = "torchjob.dev/attempt"
LABEL_STEP = "torchjob.dev/initializer"  # an initializer step's pod (objects/steps.py): no replica type or index


def pod_name(job: TorchJob, rid: ReplicaId) -> str:
    return f"{job.name}-{rid.name}"


def host(job: TorchJob, rid: ReplicaId) -> str:
    """The replica's DNS name through the job's headless Service (pod hostname.subdomain)."""
    return f"{pod_name(job, rid)}.{job.name}"


def selector(job: TorchJob) -> dict[str, str]:
    return {LABEL_JOB: job.name}


def replica_name(labels: Mapping[str, str]) -> str | None:
    """The replica a pod or Service of a job is (`worker-1`), from its labels; None when not one."""
    rtype, index = labels.get(LABEL_TYPE), labels.get(LABEL_INDEX)
    if labels.get(LABEL_STEP) and not rtype:  # an initializer's: named as its attempts are (`model-initializer-0`)
        return f"{labels[LABEL_STEP]}-0"
    return f"{rtype}-{index}" if rtype and index is not None else None


def replica_of(obj: Mapping[str, Any]) -> ReplicaId | None:
    """The replica a pod of a job is; None when not one of a known type. Its name says, which never changes
    (`pod_name`: JOB-REPLICA); its labels, which whoever may patch pods can change, only where they agree
    with it: a worker's pod that succeeded, labelled as the master's, is still the worker's."""
    meta = obj.get("metadata", {})
    labels, name = meta.get("labels") or {}, str(meta.get("name", ""))
    said, prefix = replica_name(labels), f"{labels.get(LABEL_JOB)}-"
    try:
        rid = ReplicaId.parse(said) if said else None
        if rid is not None and name != prefix + rid.name:
            rid = ReplicaId.parse(name.removeprefix(prefix)) if name.startswith(prefix) else None
    except ValueError:
        return None
    return rid if rid is None or name == prefix + rid.name else None


def attempt_of(obj: Mapping[str, Any]) -> int:
    """Which attempt of its replica a pod runs (the annotation the operator sets); 0 where it is not a
    number (a pod anyone made: whoever may create pods can write any annotation, and nothing crashes)."""
    value = str((obj.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_ATTEMPT, "0"))
    return int(value) if value.isascii() and value.isdecimal() else 0
