"""Gang scheduling on Kubernetes: which PodGroup a job needs (Volcano's or scheduler-plugins'),
what it holds, and how its pods point at it (Kueue, which admits whole jobs, is in `kueue`).
Pure: dicts in, dicts out.

The scheduler is chosen by the document itself (Kubeflow chose it with an operator-wide flag):
- `runPolicy.schedulingPolicy.schedulerName`, else the `schedulerName` every pod template shares;
- `volcano` -> a `scheduling.volcano.sh/v1beta1` PodGroup;
- another name given in schedulingPolicy -> a `scheduling.x-k8s.io/v1alpha1` (scheduler-plugins)
  PodGroup. A name only in the pod templates is just the pods' scheduler: no PodGroup.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from lightkube.utils.quantity import parse_quantity

from torchjob.api.model import SchedulingPolicy, TorchJob
from torchjob.core.shape.topology import replicas

VOLCANO = "volcano"
NO_GANG = {"", "default-scheduler", "t9k-scheduler"}  # T9k's scheduler keeps its own queue objects
PLUGINS_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"

Flavor = Literal["volcano", "scheduler-plugins"]


@dataclass(frozen=True)
class PodGroupKind:
    api_version: str
    flavor: Flavor
    crd: str  # the CRD's name, for the message when it is not installed

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/")[1]


VOLCANO_PG = PodGroupKind("scheduling.volcano.sh/v1beta1", "volcano", "podgroups.scheduling.volcano.sh")
PLUGINS_PG = PodGroupKind("scheduling.x-k8s.io/v1alpha1", "scheduler-plugins", "podgroups.scheduling.x-k8s.io")


def scheduler_name(job: TorchJob) -> str:
    """The scheduler the job asks for: schedulingPolicy first, else the one all templates name."""
    sp = job.run_policy.schedulingPolicy
    if sp is not None and sp.schedulerName:
        return sp.schedulerName
    names = {r.template.spec.schedulerName or "" for r in job.spec.pytorchReplicaSpecs.values()}
    return names.pop() if len(names) == 1 else ""


def with_default_scheduler(job: TorchJob, name: str | None) -> TorchJob:
    """The operator's `--gang-scheduler-name` (Kubeflow's flag) for a job that names no scheduler."""
    if not name or scheduler_name(job):
        return job
    sp = job.run_policy.schedulingPolicy
    policy = sp.model_copy(update={"schedulerName": name}) if sp else SchedulingPolicy(schedulerName=name)
    run_policy = job.run_policy.model_copy(update={"schedulingPolicy": policy})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"runPolicy": run_policy})})


def podgroup_kind(job: TorchJob) -> PodGroupKind | None:
    name = scheduler_name(job)
    if name == VOLCANO:
        return VOLCANO_PG
    sp = job.run_policy.schedulingPolicy
    if name not in NO_GANG and sp is not None and sp.schedulerName == name:
        return PLUGINS_PG
    return None


def min_member(job: TorchJob) -> int:
    sp = job.run_policy.schedulingPolicy
    total = len(replicas(job))
    return sp.minAvailable if sp is not None and sp.minAvailable else total


def _fmt(q: Decimal) -> str:
    return str(int(q)) if q == q.to_integral_value() else format(q.normalize(), "f")


def min_resources(job: TorchJob) -> dict[str, str]:
    """What the first minMember pods (master first) request, limits where a container has no
    requests: the gang's size that the scheduler must find room for at once."""
    total: dict[str, Decimal] = {}
    for rid in replicas(job)[: min_member(job)]:
        for c in job.spec.pytorchReplicaSpecs[rid.rtype].template.spec.containers:
            res = c.resources
            amounts = (res.requests or res.limits or {}) if res is not None else {}
            for name, value in amounts.items():
                q = parse_quantity(str(value))
                if q is not None:
                    total[name] = total.get(name, Decimal(0)) + q
    return {k: _fmt(v) for k, v in sorted(total.items())}


def podgroup(job: TorchJob, owner: dict[str, Any]) -> dict[str, Any] | None:
    """The job's PodGroup, named like the job, or None when its scheduler needs none."""
    kind = podgroup_kind(job)
    if kind is None:
        return None
    sp = job.run_policy.schedulingPolicy
    spec: dict[str, Any] = {"minMember": min_member(job)}
    resources = dict(sp.minResources) if sp is not None and sp.minResources else min_resources(job)
    if resources:
        spec["minResources"] = {k: str(v) for k, v in resources.items()}
    if kind is VOLCANO_PG:
        spec["queue"] = (sp.queue if sp is not None and sp.queue else None) or "default"
        if sp is not None and sp.priorityClass:
            spec["priorityClassName"] = sp.priorityClass
    elif sp is not None and sp.scheduleTimeoutSeconds:
        spec["scheduleTimeoutSeconds"] = sp.scheduleTimeoutSeconds
    meta: dict[str, Any] = {"name": job.name, "namespace": job.metadata.namespace or "default",
                            "ownerReferences": [owner]}
    if job.metadata.annotations:
        meta["annotations"] = dict(job.metadata.annotations)
    return {"apiVersion": kind.api_version, "kind": "PodGroup", "metadata": meta, "spec": spec}


def decorate_pod(job: TorchJob, rtype: str, spec: dict[str, Any], labels: dict[str, str],
                 annotations: dict[str, str]) -> None:
    """Point a pod at the job's scheduler and PodGroup (in place)."""
    name = scheduler_name(job)
    if name:
        spec.setdefault("schedulerName", name)
    kind = podgroup_kind(job)
    if kind is VOLCANO_PG:
        annotations[VOLCANO_GROUP_ANNOTATION] = job.name
        annotations[VOLCANO_TASK_ANNOTATION] = rtype.lower()
    elif kind is PLUGINS_PG:
        labels[PLUGINS_POD_GROUP_LABEL] = job.name
    sp = job.run_policy.schedulingPolicy
    if sp is not None and sp.priorityClass:
        spec.setdefault("priorityClassName", sp.priorityClass)


def awaits_admission(job: TorchJob) -> bool:
    """Whether the job's pods wait for its PodGroup to be admitted. Volcano admits a gang by moving
    its PodGroup out of `Pending` (into `Inqueue`) once the queue has room for all of it; like
    Volcano's own job controller and Kubeflow's, no pod is created before, so an over-full queue
    holds PodGroups, not thousands of pending pods. scheduler-plugins admits pods as they come."""
    return podgroup_kind(job) is VOLCANO_PG


def admitted(group: dict[str, Any]) -> bool:
    return ((group.get("status") or {}).get("phase") or "Pending") != "Pending"


def admission_message(job: TorchJob) -> str:
    group = podgroup(job, {})
    queue = group["spec"]["queue"] if group else "default"
    return (f"waiting for the volcano scheduler to admit PodGroup {job.name} from queue {queue!r}: the pods are "
            f"created when its phase leaves Pending (is the volcano scheduler running, and has the queue room for "
            f"{min_member(job)} pods?)")
