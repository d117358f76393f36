"""Pods as `core` sees them: the current attempt of each replica, its phase and exit code."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.api.validate import training_container
from torchjob.core.reconcile import Observed, Phase, World
from torchjob.core.topology import ReplicaId
from torchjob.kube.render import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_TYPE

PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}
UNKNOWN_EXIT = 0xBEEF  # like Kubeflow: a pod that failed before its container ran (>= 128: retryable)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def replica_of(pod: dict[str, Any]) -> ReplicaId | None:
    labels = pod.get("metadata", {}).get("labels", {})
    try:
        return ReplicaId.parse(f"{labels[LABEL_TYPE]}-{labels[LABEL_INDEX]}")
    except (KeyError, ValueError):
        return None


def observe_pod(job: TorchJob, pod: dict[str, Any]) -> Observed | None:
    rid = replica_of(pod)
    if rid is None or rid.rtype not in job.spec.pytorchReplicaSpecs:
        return None
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    attempt = int(meta.get("annotations", {}).get(ANNOTATION_ATTEMPT, "0"))
    phase = PHASES.get(status.get("phase", "Pending"), Phase.PENDING)
    containers = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec.containers
    name = containers[training_container(containers)].name
    statuses = [cs for cs in status.get("containerStatuses", []) if cs.get("name") == name]
    state: dict[str, Any] = statuses[0].get("state", {}) if statuses else {}
    terminated = state.get("terminated") or {}
    exit_code: int | None = terminated.get("exitCode")
    reason = status.get("reason") or terminated.get("reason")
    message = terminated.get("message") or status.get("message")
    if phase is Phase.FAILED and exit_code is None:
        exit_code = UNKNOWN_EXIT
    if phase is Phase.SUCCEEDED and exit_code is None:
        exit_code = 0
    finished = _time(terminated.get("finishedAt")) if phase in (Phase.SUCCEEDED, Phase.FAILED) else None
    if finished is None and phase in (Phase.SUCCEEDED, Phase.FAILED):
        finished = _time(meta.get("creationTimestamp"))
    return Observed(rid, attempt, phase, exit_code, reason, message, finished,
                    stopping=meta.get("deletionTimestamp") is not None)


def observe(job: TorchJob, pods: Iterable[dict[str, Any]], stop_requested: str | None = None) -> World:
    seen: dict[str, Observed] = {}
    for p in pods:
        obs = observe_pod(job, p)
        if obs is None:
            continue
        old = seen.get(obs.replica.name)
        if old is None or obs.attempt > old.attempt:
            seen[obs.replica.name] = obs
    return World(replicas=seen, stop_requested=stop_requested)
