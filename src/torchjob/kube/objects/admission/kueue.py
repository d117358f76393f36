"""Kueue: a job labelled `kueue.x-k8s.io/queue-name` runs while Kueue admits its Workload, as
Kueue's own job integrations do. Pure: dicts in, dicts out; the controller applies them.

- The job starts suspended; the operator creates a `kueue.x-k8s.io/v1beta1` Workload that asks
  for one pod set per replica type (`master` x1, `worker` xN) with the replica's pod template.
- When Kueue admits the Workload (condition `Admitted`), the job is resumed with the admitted
  ResourceFlavors' node labels and tolerations added to its pod templates.
- When the Workload loses its admission (evicted, preempted, deactivated), the job is suspended
  (its pods deleted) and its templates restored from the Workload.
- When the job ends, the Workload gets `Finished`, so Kueue frees the quota.
- `torchjob suspend`/`resume` of such a job deactivate/activate its Workload (`spec.active`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.shape.topology import replicas

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
API_VERSION = "kueue.x-k8s.io/v1beta1"
WORKLOAD = f"{API_VERSION}/Workload"
RESOURCE_FLAVOR = f"{API_VERSION}/ResourceFlavor"
WORKLOAD_CRD = "workloads.kueue.x-k8s.io"


def queue_name(job: TorchJob) -> str | None:
    return (job.metadata.labels or {}).get(QUEUE_LABEL) or None


def workload_name(job_name: str) -> str:
    return f"torchjob-{job_name}"


def pod_set(rtype: str) -> str:
    return rtype.lower()  # Kueue's pod set names are DNS labels


def workload(job: TorchJob, owner: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    counts = Counter(r.rtype for r in replicas(job))
    pod_sets = [{"name": pod_set(rtype), "count": counts[rtype],
                 "template": spec.template.model_dump(exclude_none=True, by_alias=True)}
                for rtype, spec in job.spec.pytorchReplicaSpecs.items() if counts[rtype]]
    return {
        "apiVersion": API_VERSION, "kind": "Workload",
        "metadata": {"name": workload_name(job.name), "namespace": job.metadata.namespace or "default",
                     "labels": labels, "ownerReferences": [owner]},
        "spec": {"queueName": queue_name(job), "podSets": pod_sets, "active": True},
    }


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def admitted(wl: dict[str, Any]) -> bool:
    """Admitted and still wanted: Kueue's admission stands and nobody deactivated the Workload."""
    cond = _condition(wl, "Admitted")
    return (cond is not None and cond.get("status") == "True" and bool((wl.get("status") or {}).get("admission"))
            and (wl.get("spec") or {}).get("active", True) is not False)


def finished(wl: dict[str, Any]) -> bool:
    cond = _condition(wl, "Finished")
    return cond is not None and cond.get("status") == "True"


def cluster_queue(wl: dict[str, Any]) -> str:
    return str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))


def flavor_names(wl: dict[str, Any]) -> set[str]:
    assignments = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    return {name for a in assignments for name in (a.get("flavors") or {}).values()}


def admit_patch(job: TorchJob, wl: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The spec merge patch that resumes the job where Kueue placed it: each replica's template
    gets its admitted flavors' nodeLabels (as nodeSelector) and tolerations."""
    assignments = {a["name"]: a for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments")
                   or []}
    specs: dict[str, Any] = {}
    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        names = sorted(set((assignments.get(pod_set(rtype)) or {}).get("flavors", {}).values()))
        pod = rspec.template.spec
        selector, tolerations = dict(pod.nodeSelector or {}), list(pod.tolerations or [])
        for name in names:
            fspec = flavors.get(name, {}).get("spec") or {}
            selector.update(fspec.get("nodeLabels") or {})
            tolerations += [t for t in fspec.get("tolerations") or [] if t not in tolerations]
        if names:
            placed = {"nodeSelector": selector or None, "tolerations": tolerations or None}
            specs[rtype] = {"template": {"spec": placed}}
    return {"runPolicy": {"suspend": False}, **({"pytorchReplicaSpecs": specs} if specs else {})}


def suspend_patch(job: TorchJob, wl: dict[str, Any]) -> dict[str, Any]:
    """The spec merge patch that suspends the job and puts back the templates it was queued with
    (the Workload holds them), undoing what an admission added."""
    pod_sets = (wl.get("spec") or {}).get("podSets") or []
    originals = {ps["name"]: (ps.get("template") or {}).get("spec") or {} for ps in pod_sets}
    specs: dict[str, Any] = {}
    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        if pod_set(rtype) not in originals:
            continue
        was = originals[pod_set(rtype)]
        now = rspec.template.spec
        was_selector: dict[str, str] = was.get("nodeSelector") or {}
        if was_selector != (now.nodeSelector or {}) or (was.get("tolerations") or None) != (now.tolerations or None):
            # merge-patch: keys the admission added are set to null; no selector at all is null
            selector = {**{k: None for k in now.nodeSelector or {}}, **was_selector} if was_selector else None
            specs[rtype] = {"template": {"spec": {"nodeSelector": selector,
                                                  "tolerations": was.get("tolerations") or None}}}
    return {"runPolicy": {"suspend": True}, **({"pytorchReplicaSpecs": specs} if specs else {})}


def lost_admission(wl: dict[str, Any]) -> str:
    """Why a Workload is no longer admitted, in Kueue's words where it gave them."""
    if (wl.get("spec") or {}).get("active") is False:
        return f"its Kueue Workload {wl['metadata']['name']} is deactivated"
    cond = _condition(wl, "Evicted") or _condition(wl, "Preempted") or _condition(wl, "Admitted")
    if cond is None:  # resumed by hand before Kueue admitted it
        return f"waiting for Kueue to admit its Workload {wl['metadata']['name']}"
    why = cond.get("message") or "its admission was withdrawn"
    return f"Kueue took back the admission of Workload {wl['metadata']['name']}: {why}"


def finished_status(wl_name: str, namespace: str, status: JobStatus, now: str) -> dict[str, Any]:
    """A server-side apply body for the Workload's status: only the `Finished` condition is ours."""
    ok = status.is_true(ConditionType.SUCCEEDED)
    message = "the TorchJob succeeded" if ok else (status.failure.message if status.failure else "the TorchJob failed")
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": wl_name, "namespace": namespace},
            "status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded" if ok else "Failed",
                                       "message": message[:32768], "lastTransitionTime": now}]}}
