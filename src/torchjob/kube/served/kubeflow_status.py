"""torchjob's job status in the shape of Kubeflow's `kubeflow.org/v1` PyTorchJob status, and the
labels Kubeflow's pods and Services carry: what Kubeflow's clients read (pure; no I/O, no clock).

Read in training-operator v1.8.1: `pkg/controller.v1/pytorch/pytorchjob_controller.go`
(UpdateJobStatus, onOwnerCreateFunc, GenLabelSelector, IsMasterRole), `pkg/util/status.go`
(reasons `PyTorchJob` + Created/Running/Restarting/Succeeded/Failed/Suspended/Resumed; a condition
set again moves to the end of the list, which is why `kubectl get`'s State, the last condition's
type, is the current state), `pkg/controller.v1/common/job.go` and `pod.go` (the failure,
suspend and resume messages; the labels). Who reads what:
- the Kubeflow SDK: conditions with status "True" (Created, Running, Restarting, Succeeded, Failed);
- Kueue: Succeeded/Failed (finished), Running, `replicaStatuses[*].active`, `runPolicy.suspend`
  and `runPolicy.managedBy`;
- Katib: `status.conditions.#(type=="Succeeded")#|#(status=="True")#` (and "Failed");
- `kubectl get pytorchjobs`: `.status.conditions[-1:].type`.

torchjob's own status (root cause with replica, attempt, exit code and signal; restart counts;
each replica's attempt; progress) goes whole under `status.torchjob` (`EXTRAS`), a key no reader
above looks at; it is also what the operator reads back (`torchjob_status`), so nothing of its
decisions is lost to the projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from torchjob.api.model import MASTER, REPLICA_TYPES, Condition, JobStatus, TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.objects.install.kubeflow_crd import EXTRAS, KIND, MANAGED_BY_KUBEFLOW
from torchjob.kube.objects.labels.kubeflow import (
    LABEL_REPLICA_TYPE,
    job_labels,
)

REASON_PREFIX = KIND  # Kubeflow's reasons: "PyTorchJob" + Created, Running, ...


def selector(job_name: str, rtype: str) -> str:
    """`replicaStatuses[rtype].selector`: Kubeflow's label selector of the replica type's pods, as
    metav1.FormatLabelSelector writes it (keys sorted, `k=v` joined by commas). The scale
    subresource reads the Worker's."""
    labels = {**job_labels(job_name), LABEL_REPLICA_TYPE: rtype.lower()}
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


# --- runPolicy: suspend and managedBy ---------------------------------------------------------


def manager(spec: Mapping[str, Any]) -> str | None:
    """`spec.runPolicy.managedBy` of a PyTorchJob's spec, None when unset."""
    run_policy = spec.get("runPolicy") or {}
    value = run_policy.get("managedBy")
    return str(value) if value else None


def served_here(spec: Mapping[str, Any]) -> bool:
    """Whether the PyTorchJob controller of this cluster (torchjob, standing in for Kubeflow's)
    reconciles the job: `managedBy` unset or Kubeflow's own value, `kubeflow.org/training-operator`.
    Any other manager (`kueue.x-k8s.io/multikueue`: the job runs on a worker cluster, and Kueue
    copies its status back here) owns the job: torchjob must then create no pod or Service for it
    and never write its status, as Kubeflow's controller skips it (v1.9 `managedBy`; v1.8.1 has
    no such field)."""
    return manager(spec) in (None, MANAGED_BY_KUBEFLOW)


def suspended(spec: Mapping[str, Any]) -> bool:
    """`spec.runPolicy.suspend` (Kueue sets it on creation and clears it on admission). While it is
    true Kubeflow deletes every pod and Service of the job whatever its cleanPodPolicy, sets
    Running False (reason PyTorchJobSuspended) and Suspended True, and counts no pod active; on
    resume, Suspended False (PyTorchJobResumed) and startTime restarts: torchjob's core does the
    same for `runPolicy.suspend`, and `kubeflow_status` words it as Kubeflow does."""
    run_policy = spec.get("runPolicy") or {}
    return bool(run_policy.get("suspend"))


# --- status -----------------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    """metav1.Time's form: RFC 3339 in UTC, whole seconds."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _replica_type_of(name: str | None) -> str | None:
    """`worker-1` -> Worker; None when the text does not start with a replica's name."""
    if not name:
        return None
    try:
        return ReplicaId.parse(name.split(" ", 1)[0].rstrip(":,;")).rtype
    except ValueError:
        return None


def _failed_replicas(status: JobStatus, hint: str | None) -> tuple[int, str | None]:
    """How many replicas of which type failed, for Kubeflow's "because N Worker replica(s) failed":
    the type of the replica torchjob names (`hint`), else the first type counting failures."""
    rtype = _replica_type_of(hint)
    if rtype is None:
        rtype = next((t for t in REPLICA_TYPES if t in status.replicaStatuses and status.replicaStatuses[t].failed),
                     None)
    if rtype is None:
        return 0, None
    counted = status.replicaStatuses[rtype].failed if rtype in status.replicaStatuses else 0
    return max(counted, 1), rtype


def _said(status: JobStatus, c: Condition) -> str:
    """What the failing replica itself said (the end of its termination message: the script's own
    error line), appended to Kubeflow's words for a failure (which name no replica's words), or ''."""
    f = status.failure
    if f is None or not f.message.startswith(c.message + ": ") or not f.replica:
        return ""
    return f" {f.replica}: {f.message[len(c.message) + 2:]}"


def _wording(job: TorchJob, status: JobStatus, c: Condition) -> tuple[str, str]:
    reason, message = _kubeflow_wording(job, status, c)
    if c.type == "Failed":
        message += _said(status, c)
    return reason, message


def _kubeflow_wording(job: TorchJob, status: JobStatus, c: Condition) -> tuple[str, str]:
    """Kubeflow's reason (without the PyTorchJob prefix) and message for one torchjob condition."""
    name = job.name
    full = f"{job.metadata.namespace or 'default'}/{name}"
    has_master = MASTER in job.spec.pytorchReplicaSpecs
    true = c.status == "True"
    if c.type == "Created":
        return "Created", f"{KIND} {name} is created."
    if c.type == "Running":
        if not true and c.reason == "Suspended":
            return "Suspended", f"{KIND} {name} is suspended."
        # Running set False by the job's end keeps Kubeflow's reason and message (setCondition)
        return "Running", f"{KIND} {name} is running." if has_master else f"{KIND} {full} is running."
    if c.type == "Suspended":
        return ("Suspended", f"{KIND} {name} is suspended.") if true else ("Resumed", f"{KIND} {name} is resumed.")
    if c.type == "Succeeded":
        if has_master:
            return "Succeeded", f"{KIND} {name} is successfully completed."
        return "Succeeded", f"{KIND} {full} successfully completed."
    if c.type == "Restarting":
        count, rtype = _failed_replicas(status, c.message)
        if rtype is None:
            return "Restarting", f"{KIND} {name} is restarting because {c.message}."
        return "Restarting", f"{KIND} {name} is restarting because {count} {rtype} replica(s) failed."
    # Failed
    failure = status.failure
    reason = failure.reason if failure is not None else c.reason
    if reason == "BackoffLimitExceeded":
        return "Failed", f"Job {name} has failed because it has reached the specified backoff limit"
    if reason == "DeadlineExceeded":
        return "Failed", f"Job {name} has failed because it was active longer than specified deadline"
    if reason == "ProgressDeadlineExceeded":  # torchjob's (no Kubeflow wording): the replicas that went quiet
        return "Failed", f"{KIND} {name} is failed because {c.message}."
    # the root cause's replica, counted once: the replicas torchjob stops after it (Kubeflow leaves
    # them running) fail later, and a terminal condition's message does not change after the fact
    rtype = _replica_type_of(failure.replica if failure is not None else c.message)
    if rtype is not None and reason == "NonRetryableExitCode":
        return "Failed", f'job "{name}" is failing because "{rtype}" replica(s) failed.'
    if rtype is not None:
        return "Failed", f"{KIND} {name} is failed because 1 {rtype} replica(s) failed."
    return "Failed", f"{KIND} {name} is failed because {c.message}."


def conditions(job: TorchJob, status: JobStatus) -> list[dict[str, Any]]:
    """torchjob's conditions worded as Kubeflow's, in Kubeflow's order: the one updated last at the
    end (Kubeflow moves a condition it sets to the end), a true one after a false one set at the
    same moment (Running turned False by the job's end, before its Succeeded)."""
    epoch = datetime.min.replace(tzinfo=UTC)

    def when(c: Condition) -> datetime:
        t = c.lastUpdateTime or c.lastTransitionTime
        if t is None:
            return epoch
        return t if t.tzinfo is not None else t.replace(tzinfo=UTC)

    out = []
    for c in sorted(status.conditions, key=lambda c: (when(c), c.status == "True")):
        if c.type == ConditionType.SCHEDULED:
            continue  # Kubeflow has none (`kubectl get pytorchjobs` shows the last type): status.torchjob's
        reason, message = _wording(job, status, c)
        item: dict[str, Any] = {"type": c.type, "status": c.status, "reason": REASON_PREFIX + reason,
                                "message": message}
        for key, value in (("lastUpdateTime", c.lastUpdateTime), ("lastTransitionTime", c.lastTransitionTime)):
            if value is not None:
                item[key] = _time(value)
        out.append(item)
    return out


def kubeflow_status(job: TorchJob, status: JobStatus, reconciled_at: datetime | None = None) -> dict[str, Any]:
    """The PyTorchJob's `status`, for a JSON merge patch of the status subresource: Kubeflow's
    fields (every count written, 0 included, and an unset time as null, so that a merge patch never
    leaves a stale value behind) and torchjob's whole status under `status.torchjob`, less
    `progress`, which the progress writer patches there itself (`status.torchjob.progress`; a
    reconcile neither writes nor clears it). `reconciled_at`: lastReconcileTime (left as stored when None)."""
    replica_statuses = {}
    for rtype in REPLICA_TYPES:
        if rtype not in job.spec.pytorchReplicaSpecs:
            continue
        counts = status.replicaStatuses.get(rtype)
        replica_statuses[rtype] = {
            "active": counts.active if counts else 0,
            "succeeded": counts.succeeded if counts else 0,
            "failed": counts.failed if counts else 0,
            "selector": selector(job.name, rtype),
        }
    extras = status.model_dump(mode="json", exclude={"progress"})
    extras["state"] = status.state
    out: dict[str, Any] = {
        "conditions": conditions(job, status),
        "replicaStatuses": replica_statuses,
        "startTime": _time(status.startTime),
        "completionTime": _time(status.completionTime),
        EXTRAS: extras,
    }
    if reconciled_at is not None:
        out["lastReconcileTime"] = _time(reconciled_at)
    return out


def torchjob_status(stored: Mapping[str, Any] | None) -> JobStatus:
    """torchjob's status of a PyTorchJob, from its stored `status`: what `kubeflow_status` put under
    `status.torchjob`. A job that has none was last served by Kubeflow's operator: its conditions
    and times are taken as they are (reasons without the PyTorchJob prefix), so that a job Kubeflow
    finished stays finished and one it started keeps its startTime."""
    stored = stored or {}
    extras = stored.get(EXTRAS)
    if isinstance(extras, Mapping):
        return JobStatus.model_validate({k: v for k, v in extras.items() if k != "state"})
    known = {"Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"}
    kept = [{"type": c["type"], "status": c.get("status", "True"),
             "reason": str(c.get("reason", "")).removeprefix(REASON_PREFIX), "message": c.get("message", ""),
             "lastTransitionTime": c.get("lastTransitionTime"), "lastUpdateTime": c.get("lastUpdateTime")}
            for c in stored.get("conditions") or [] if c.get("type") in known and c.get("status") in ("True", "False")]
    return JobStatus.model_validate({"conditions": kept, "startTime": stored.get("startTime"),
                                     "completionTime": stored.get("completionTime")})
