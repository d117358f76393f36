"""Pods as `core` sees them: the current attempt of each replica, its phase and exit code."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.api.validate import training_container
from torchjob.core import torch_errors
from torchjob.core.reconcile import Observed, Phase, World
from torchjob.core.topology import ReplicaId
from torchjob.kube.objects.pods import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_TYPE

# Unknown: the pod's node stopped reporting after the pod was scheduled there; its container most likely
# still runs, so it stays active (not Pending, which would flip a Running job back) until the node
# controller evicts it, which the operator sees as a deletion.
PHASES = {"Pending": Phase.PENDING, "Running": Phase.RUNNING, "Unknown": Phase.RUNNING,
          "Succeeded": Phase.SUCCEEDED, "Failed": Phase.FAILED}
UNKNOWN_EXIT = 0xBEEF  # like Kubeflow: a pod that failed before its container ran (>= 128: retryable)


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, `Z`) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as the operator caches it: its metadata and status, which is all `observe` and the
    controller read. The spec (containers, env, volumes) is the bulk of a pod and is left out."""
    return {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "metadata": pod["metadata"],
            "status": pod.get("status") or {}}


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
    # torch's error file is the termination message (TORCHELASTIC_ERROR_FILE=/dev/termination-log)
    message = torch_errors.headline(terminated["message"]) if terminated.get("message") else status.get("message")
    if phase is Phase.FAILED and exit_code is None:
        exit_code = UNKNOWN_EXIT
    if phase is Phase.SUCCEEDED and exit_code is None:
        exit_code = 0
    finished = parse_time(terminated.get("finishedAt")) if phase in (Phase.SUCCEEDED, Phase.FAILED) else None
    if finished is None and phase in (Phase.SUCCEEDED, Phase.FAILED):
        finished = parse_time(meta.get("creationTimestamp"))
    return Observed(rid, attempt, phase, exit_code, reason, message, finished,
                    stopping=meta.get("deletionTimestamp") is not None)


def observe(job: TorchJob, pods: Iterable[dict[str, Any]], stop_requested: str | None = None,
            gone: Iterable[dict[str, Any]] = ()) -> World:
    """The world as `core` sees it. A pod being deleted that torchjob did not stop, or one of `gone`
    (deleted since; its last state), is `deleted`: core decides whether that is an eviction."""
    seen: dict[str, Observed] = {}
    for p, was_deleted in [*((p, False) for p in pods), *((p, True) for p in gone)]:
        obs = observe_pod(job, p)
        if obs is None:
            continue
        if was_deleted or obs.stopping:
            since = parse_time(p["metadata"].get("deletionTimestamp"))
            obs = replace(obs, deleted=True, stopping=not was_deleted, finished_at=obs.finished_at or since)
        old = seen.get(obs.replica.name)
        if old is None or obs.attempt > old.attempt:
            seen[obs.replica.name] = obs
    return World(replicas=seen, stop_requested=stop_requested)
