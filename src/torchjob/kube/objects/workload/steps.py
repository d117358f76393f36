"""A job's initializer steps (`spec.initializers`, core/round/initializers.py) as Pods
`{job}-{step}-0`: the step's own pod template as written (its containers, image, env, volumes),
`restartPolicy: Never` (core decides each retry), the end of its log as the termination message (the
root cause's words when it fails), owned by the job; labelled with the job and the step, and on a
TrainJob's with JobSet's labels as Trainer's initializer pods carry them (the Kubeflow SDK lists
them as the steps `dataset-initializer`, `model-initializer`). What a step pod says back to core:
`observe_step`. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.core.diagnosis import torch_errors
from torchjob.core.round.world import Observed, Phase
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.objects.front.inplace import parse_time
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_JOB, LABEL_STEP, attempt_of, pod_name
from torchjob.kube.objects.labels import trainjob as trainjob_labels
from torchjob.kube.objects.labels.ownership import owner_reference, served_as
from torchjob.kube.objects.workload import pod_status

PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Unknown": Phase.RUNNING,
          "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}
UNKNOWN_EXIT = 0xBEEF  # as observe.py: a pod that failed before its container ran


def step_pod(job: TorchJob, rid: ReplicaId, attempt: int) -> dict[str, Any]:
    """The pod of attempt `attempt` of the step `rid.rtype` (core/round/initializers.step)."""
    step = next(s for s in job.spec.initializers or [] if s.name == rid.rtype)
    template = step.template.model_dump(mode="json", exclude_none=True)
    spec: dict[str, Any] = template["spec"]
    meta = template.get("metadata", {})
    for c in spec["containers"]:
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    spec["restartPolicy"] = "Never"
    labels = {**(meta.get("labels") or {}), LABEL_JOB: job.name, LABEL_STEP: step.name}
    annotations = {**(meta.get("annotations") or {}), ANNOTATION_ATTEMPT: str(attempt)}
    if served_as(job)[1] == "TrainJob":
        labels.update(trainjob_labels.step_labels(job.name, step.name))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(job, rid), "namespace": job.metadata.namespace or "default",
                     "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner_reference(job)]},
        "spec": spec,
    }


def step_of(pod: Mapping[str, Any], job: TorchJob) -> str | None:
    """The step a pod of the job runs, from its label; None for a replica's pod or an unknown step."""
    name = (pod.get("metadata", {}).get("labels") or {}).get(LABEL_STEP)
    return name if any(s.name == name for s in job.spec.initializers or []) else None


def observe_step(job: TorchJob, pod: Mapping[str, Any]) -> Observed | None:
    """A step's pod as core sees it: its phase, its first container's exit code and last words."""
    name = step_of(pod, job)
    if name is None:
        return None
    status = pod.get("status") or {}
    phase = PHASES.get(status.get("phase", "Pending"), Phase.PENDING)
    step = next(s for s in job.spec.initializers or [] if s.name == name)
    # its first container's, by the job's template: the operator's cache keeps no pod spec
    terminated = pod_status.terminated(pod, step.template.spec.containers[0].name)
    code: int | None = terminated.get("exitCode")
    if phase is Phase.FAILED and code is None:
        code = UNKNOWN_EXIT
    if phase is Phase.SUCCEEDED and code is None:
        code = 0
    said = terminated.get("message") or status.get("message")
    message = torch_errors.said(said) if said else None
    meta = pod.get("metadata", {})
    stopping = meta.get("deletionTimestamp") is not None
    # when it ended (a retry's backoff counts from it, as a Job's from its failed pod's end)
    finished = None
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        finished = parse_time(terminated.get("finishedAt")) or parse_time(meta.get("creationTimestamp"))
    return Observed(ReplicaId(name, 0), attempt_of(pod), phase, code, status.get("reason") or terminated.get("reason"),
                    message, finished, stopping=stopping,
                    unschedulable=pod_status.unschedulable(pod) if phase is Phase.PENDING else None)
