"""T9k's `batch.tensorstack.dev/v1beta1` PyTorchTrainingJob, served by torchjob's controller and core
(`T9K`): read by the T9k dialect (the same reader as `torchjob run --kube` of the file), its pods
and Service labelled `torchjob.dev/served-kind: PyTorchTrainingJob` and owned by it, and its status
written in T9k's shape (pure: `t9k_status`) with torchjob's whole status under `status.torchjob`.

T9k's PyTorchTrainingJobStatus, as its user manual's API reference gives it (t9k/user-docs,
docs/reference/api/build-console/jobs/pytorchtrainingjob.md):
- `phase`: Pending, Running, Paused, Resuming, Succeeded, Failed or Unknown (torchjob: Pending until
  its pods run, Running (restarts too), Paused while suspended (T9k's `runMode.pause`), Succeeded,
  Failed);
- `conditions[]`: {type, status, reason, message, lastTransitionTime} (torchjob's own types:
  Created, Running, Restarting, Succeeded, Failed, Suspended);
- `tasks[]`: {type, restartCount, replicaStatus[{name}]}, one per replica type;
- `backoffCount`: the restarts performed;
- `aggregate`: the tasks counted by state {creating, pending, running, succeeded, failed, unknown,
  deleted}.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from torchjob.api.errors import InvalidJob
from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.source import Document
from torchjob.api.status import ConditionType, JobState
from torchjob.dialects import t9k as t9k_dialect
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.objects.labels.ownership import ANNOTATION_SERVED_AS
from torchjob.kube.served.reading import Unreadable, stored
from torchjob.kube.served.t9k_objects import API_VERSION, CRD_NAME, EXTRAS, KIND
from torchjob.kube.served.trainer_api import decide_crd, read_crd

PHASES = {JobState.PENDING: "Pending", JobState.CREATED: "Pending", JobState.RUNNING: "Running",
          JobState.RESTARTING: "Running", JobState.SUSPENDED: "Paused", JobState.SUCCEEDED: "Succeeded",
          JobState.FAILED: "Failed"}


def read(raw: dict[str, Any], found: Sequence[dict[str, Any]] = ()) -> TorchJob:
    meta = raw["metadata"]
    doc = Document(stored(raw), f"{KIND} {meta.get('namespace', 'default')}/{meta['name']}")
    try:
        job = t9k_dialect.read(doc).job
    except InvalidJob as e:
        raise Unreadable(str(e)) from e
    annotations = {**(job.metadata.annotations or {}), ANNOTATION_SERVED_AS: f"{API_VERSION}/{KIND}"}
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})


def _time(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def t9k_status(job: TorchJob | None, status: JobStatus, now: datetime) -> dict[str, Any]:
    """The PyTorchTrainingJob's `status`, for a JSON merge patch of the status subresource."""
    running = status.is_true(ConditionType.RUNNING) and not status.finished
    counts = status.replicaStatuses.values()
    active = sum(r.active for r in counts)
    tasks = [{"type": rtype.lower(), "restartCount": r.restarts,
              "replicaStatus": [{"name": name} for name in sorted(status.replicas)
                                if name.startswith(f"{rtype.lower()}-")]}
             for rtype, r in status.replicaStatuses.items()]
    extras = status.model_dump(mode="json", exclude={"progress"})
    extras["state"] = status.state
    return {
        "phase": PHASES.get(status.state, "Unknown"),
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                        "lastTransitionTime": _time(c.lastTransitionTime)} for c in status.conditions],
        "tasks": tasks,
        "backoffCount": status.restartCount,
        "aggregate": {"creating": 0, "pending": 0 if running else active, "running": active if running else 0,
                      "succeeded": sum(r.succeeded for r in counts), "failed": sum(r.failed for r in counts),
                      "unknown": 0, "deleted": 0},
        EXTRAS: extras,
    }


def status_of(raw: dict[str, Any]) -> JobStatus:
    extras = (raw.get("status") or {}).get(EXTRAS)
    if isinstance(extras, dict):
        return JobStatus.model_validate({k: v for k, v in extras.items() if k != "state"})
    return JobStatus()


def decide(crd: dict[str, Any] | None, readable: bool) -> tuple[bool, str]:
    """(serve PyTorchTrainingJobs?, why): when the CRD is torchjob's (`torchjob install --t9k-api`);
    T9k's own CRD means T9k's controller serves them. Pure."""
    return decide_crd(CRD_NAME, "--t9k-api", crd, readable, "(T9k's?): its jobs are left to T9k")


async def should_serve(api: ApiProtocol) -> tuple[bool, str]:
    return decide(*await read_crd(api, CRD_NAME))
