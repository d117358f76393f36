"""Kubeflow Trainer v2's `trainer.kubeflow.org/v1alpha1` TrainJob, served by torchjob's controller
and core (`TRAINJOB`): read by the TrainJob dialect (the same reader as `torchjob run --kube` of the
file) with its runtime fetched from the cluster, its pods labelled as JobSet labels Trainer's
(kube/objects/labels/trainjob.py), and its status written in Trainer's shape (pure:
`trainjob_status`), with torchjob's whole status under `status.torchjob`.

Trainer v2.3's status, as its TrainJob controller writes it and the Kubeflow SDK 0.5 reads it:
- `conditions`: `Suspended` (reasons Suspended / Resumed) while or once suspended, and at the end
  `Complete` or `Failed`, each with every metav1.Condition field; no other condition while running
  (the SDK says `Running` only while there is none). torchjob's own: `Scheduled` False (reason
  `WaitingForNode`, the scheduler's words) while a pod waits for a node, gone once every pod has one
  (the SDK says `Created` then, its nodes not running). torchjob's Failed keeps its reason
  (`DeadlineExceeded` for activeDeadlineSeconds, as Trainer's; `BackoffLimitExceeded`,
  `ProgressDeadlineExceeded`, ...) and its message names the root cause (replica, exit code).
- `jobsStatus`: the runtime's initializer jobs (`dataset-initializer`, `model-initializer`), then its
  trainer job `node`, each with all six counters (Trainer copies JobSet's count of child Jobs:
  torchjob counts the one Job of each it stands in for).
- `trainerStatus`: the progress the replicas report (torchjob.report, or the SDK's
  update_trainjob_status), written by the progress writer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from torchjob.api.errors import InvalidJob
from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.source import Document
from torchjob.api.status import ConditionType, StepState
from torchjob.dialects import trainjob as trainjob_dialect
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.objects.labels.ownership import ANNOTATION_SERVED_AS
from torchjob.kube.served.reading import Unreadable
from torchjob.kube.served.trainer_objects import (
    API_VERSION,
    CLUSTER_RUNTIME_KIND,
    EXTRAS,
    KIND,
    MANAGED_BY_TRAINER,
    RUNTIME_KIND,
)

NODE_JOB = "node"
# JobSet's words for a finished JobSet, which Trainer copies into the TrainJob's Complete condition
COMPLETE_REASON, COMPLETE_MESSAGE = "AllJobsCompleted", "jobset completed successfully"
SUSPENDED_MESSAGE, RESUMED_MESSAGE = "TrainJob is suspended", "TrainJob is resumed"
MAX_METRICS = 256  # trainerStatus.metrics, as Trainer's CRD bounds it


def served_here(raw: dict[str, Any]) -> bool:
    """`spec.managedBy` unset or Trainer's TrainJob controller (torchjob stands in for it). Another
    manager (`kueue.x-k8s.io/multikueue`: it runs on a worker cluster) owns the job: nothing is
    made for it and its status is never written, as Trainer's controller skips it."""
    return ((raw.get("spec") or {}).get("managedBy") or MANAGED_BY_TRAINER) == MANAGED_BY_TRAINER


def runtime_ref(raw: dict[str, Any]) -> tuple[str, str, str | None]:
    """(kind, name, namespace or None) of the runtime a TrainJob names."""
    ref = (raw.get("spec") or {}).get("runtimeRef") or {}
    kind = str(ref.get("kind") or CLUSTER_RUNTIME_KIND)
    namespace = (raw.get("metadata") or {}).get("namespace") if kind == RUNTIME_KIND else None
    return kind, str(ref.get("name") or ""), namespace


async def runtime_of(api: ApiProtocol, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The runtime the TrainJob names, as the cluster has it now ([] when there is none)."""
    kind, name, namespace = runtime_ref(raw)
    if not name or kind not in (RUNTIME_KIND, CLUSTER_RUNTIME_KIND):
        return []  # the reader says what is wrong with the reference
    found = await api.find(f"{API_VERSION}/{kind}", name, namespace)
    return [found] if found is not None else []


def _own(raw: dict[str, Any]) -> dict[str, Any]:
    meta = raw.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "uid", "generation",
                                 "resourceVersion") if k in meta}
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": keep, "spec": raw.get("spec")}


def read(raw: dict[str, Any], found: list[dict[str, Any]]) -> TorchJob:
    """A stored TrainJob as the dialect reads it, with `found` (its runtime, from the cluster), marked
    as served for that kind: its pods are owned by it and carry JobSet's labels. Raises Unreadable."""
    kind, name, namespace = runtime_ref(raw)
    if name and kind in (RUNTIME_KIND, CLUSTER_RUNTIME_KIND) and not found:
        where = f" in namespace {namespace}" if namespace else ""
        listing = "trainingruntimes -n " + namespace if namespace else "clustertrainingruntimes"
        raise Unreadable(
            f"spec.runtimeRef.name: {kind} {name!r} does not exist{where}\n    fix: create it first, or name one "
            f"that exists (kubectl get {listing}); `torchjob install --trainer-api` installs torch-distributed")
    meta = raw["metadata"]
    runtimes = [Document(_own(r), f"{kind} {name}") for r in found]
    doc = Document(_own(raw), f"{KIND} {meta.get('namespace', 'default')}/{meta['name']}", companions=runtimes)
    try:
        job = trainjob_dialect.read(doc).job
    except InvalidJob as e:
        raise Unreadable(str(e)) from e
    annotations = {**(job.metadata.annotations or {}), ANNOTATION_SERVED_AS: f"{API_VERSION}/{KIND}"}
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})


def _time(value: datetime | None, fallback: datetime) -> str:
    value = value or fallback
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(status: JobStatus, now: datetime, generation: int | None = None) -> list[dict[str, Any]]:
    """torchjob's conditions as Trainer's: Suspended, Scheduled while False, then Complete or Failed."""
    out = []

    def add(type_: str, true: bool, reason: str, message: str, at: datetime | None) -> None:
        c: dict[str, Any] = {"type": type_, "status": "True" if true else "False", "reason": reason,
                             "message": message, "lastTransitionTime": _time(at, now)}
        if generation is not None:
            c["observedGeneration"] = generation
        out.append(c)

    suspended = status.condition(ConditionType.SUSPENDED)
    if suspended is not None:
        true = suspended.status == "True"
        add("Suspended", true, "Suspended" if true else "Resumed", SUSPENDED_MESSAGE if true else RESUMED_MESSAGE,
            suspended.lastTransitionTime)
    waits = status.condition(ConditionType.SCHEDULED)
    if waits is not None and waits.status == "False":
        add("Scheduled", False, waits.reason, waits.message, waits.lastTransitionTime)
    done = status.condition(ConditionType.SUCCEEDED)
    if done is not None and done.status == "True":
        add("Complete", True, COMPLETE_REASON, COMPLETE_MESSAGE, done.lastTransitionTime)
    failed = status.condition(ConditionType.FAILED)
    if failed is not None and failed.status == "True":
        reason = (status.failure.reason if status.failure is not None else failed.reason) or "Failed"
        # the root cause's words where the replica left some (the script's own error line), as the SDK shows it
        said = status.failure.message if status.failure is not None and \
            status.failure.message.startswith(failed.message) else failed.message
        add("Failed", True, reason, said or reason, failed.lastTransitionTime)
    return out


def jobs_status(status: JobStatus) -> list[dict[str, Any]]:
    """The initializer jobs' and the node job's counters, as JobSet counts its child Jobs (one of each here)."""
    suspended = status.is_true(ConditionType.SUSPENDED)
    succeeded, failed = status.is_true(ConditionType.SUCCEEDED), status.is_true(ConditionType.FAILED)
    running = not (suspended or succeeded or failed)
    steps = [{"name": name, "ready": int(running and s.state is StepState.RUNNING),
              "succeeded": int(s.state is StepState.SUCCEEDED), "failed": int(s.state is StepState.FAILED),
              "active": int(running and s.state in (StepState.PENDING, StepState.RUNNING)),
              "suspended": int(suspended and s.state is not StepState.SUCCEEDED)}
             for name, s in status.initializers.items()]
    active = running and any(r.active for r in status.replicaStatuses.values())
    ready = running and status.is_true(ConditionType.RUNNING)
    failed = failed and not any(s.state is StepState.FAILED for s in status.initializers.values())  # not the node's
    return [*steps, {"name": NODE_JOB, "ready": int(ready), "succeeded": int(succeeded), "failed": int(failed),
             "active": int(active), "suspended": int(suspended and not (succeeded or failed))}]


def trainjob_status(job: TorchJob | None, status: JobStatus, now: datetime) -> dict[str, Any]:
    """The TrainJob's `status`, for a JSON merge patch of the status subresource (a list replaces the
    stored one whole); torchjob's own status under `status.torchjob`, less progress (the writer's)."""
    extras = status.model_dump(mode="json", exclude={"progress"})
    extras["state"] = status.state
    return {"conditions": conditions(status, now), "jobsStatus": jobs_status(status), EXTRAS: extras}


def status_of(raw: dict[str, Any]) -> JobStatus:
    """torchjob's status of a TrainJob: what `trainjob_status` put under `status.torchjob`; for one
    Trainer's controller ran, its Complete/Failed/Suspended conditions as torchjob's (a job it
    finished stays finished)."""
    stored = raw.get("status") or {}
    extras = stored.get(EXTRAS)
    if isinstance(extras, dict):
        return JobStatus.model_validate({k: v for k, v in extras.items() if k != "state"})
    names = {"Complete": "Succeeded", "Failed": "Failed", "Suspended": "Suspended"}
    kept = [{"type": names[c["type"]], "status": c.get("status", "True"), "reason": c.get("reason", ""),
             "message": c.get("message", ""), "lastTransitionTime": c.get("lastTransitionTime")}
            for c in stored.get("conditions") or []
            if isinstance(c, dict) and c.get("type") in names and c.get("status") in ("True", "False")]
    return JobStatus.model_validate({"conditions": kept})


def progress_patch(progress: dict[str, Any]) -> dict[str, Any]:
    """A job's progress -> the status merge patch: torchjob's whole under `status.torchjob.progress`,
    and Trainer's `trainerStatus` (progressPercentage, estimatedRemainingSeconds, metrics,
    lastUpdatedTime) as Trainer's status server writes it."""
    out: dict[str, Any] = {EXTRAS: {"progress": progress}}
    if progress.get("lastReportTime"):
        trainer: dict[str, Any] = {"lastUpdatedTime": progress["lastReportTime"]}
        if progress.get("percent") is not None:
            trainer["progressPercentage"] = max(0, min(100, int(progress["percent"])))
        if progress.get("etaSeconds") is not None:
            trainer["estimatedRemainingSeconds"] = int(progress["etaSeconds"])
        metrics = [{"name": m["name"], "value": str(m["value"])} for m in progress.get("metrics") or []]
        if metrics:
            trainer["metrics"] = metrics[:MAX_METRICS]
        out["trainerStatus"] = trainer
    return out


KUEUE_MANAGER = "kueue.x-k8s.io/manager"  # the runtimePatches entry Kueue's own integration writes


def kueue_spec_patch(raw: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A TorchJob-shaped spec merge patch (Kueue's hold, admission or eviction: kube/objects/admission/kueue.py)
    as the TrainJob's: `runPolicy.suspend` -> `spec.suspend`; the placement on the replicas' templates
    (nodeSelector, tolerations; every replica type gets the same) -> a `runtimePatches` entry of
    manager `kueue.x-k8s.io/manager` on the node job, as Kueue's TrainJob integration writes it;
    an eviction's (placement put back) drops that entry. The other managers' entries are kept (a merge
    patch replaces the list whole)."""
    out: dict[str, Any] = {}
    if "suspend" in (patch.get("runPolicy") or {}):
        out["suspend"] = patch["runPolicy"]["suspend"]
    specs = patch.get("pytorchReplicaSpecs") or {}
    if not specs:
        return out
    kept = [p for p in (raw.get("spec") or {}).get("runtimePatches") or [] if p.get("manager") != KUEUE_MANAGER]
    first = next(iter(specs.values()))
    placed = {k: v for k, v in ((first.get("template") or {}).get("spec") or {}).items() if v is not None}
    if "nodeSelector" in placed:
        placed["nodeSelector"] = {k: v for k, v in placed["nodeSelector"].items() if v is not None}
    if out.get("suspend") is False and placed:
        kept.append({"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": NODE_JOB, "template": {"spec": {"template": {"spec": placed}}}}]}}}})
    out["runtimePatches"] = kept
    return out
