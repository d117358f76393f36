"""A failed job's root cause on a cluster, as `run --kube`, `describe --kube` and the dashboard show
it: the block the local runtime prints (the replica, its exit code, its last words), the last words
read from what the cluster kept: the failing pod's log while the pod is there, else its termination
message (torch's error file, or the end of its log: the pods' `FallbackToLogsOnError`). Which lines
say why is decided in core (torch_errors)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType, JobStatus
from torchjob.api.validate import training_container
from torchjob.core.diagnosis import torch_errors
from torchjob.core.round.initializers import step_named
from torchjob.core.shape.topology import ReplicaId, node_rank
from torchjob.kube.machinery.client import parse_time, to_dict
from torchjob.kube.objects.labels import attempt_of, replica_name
from torchjob.kube.objects.workload.pod_status import terminated

LOG_LINES = 15  # the failing replica's last lines shown, as locally
READ_LINES = 400  # of its log, read to find them (torchrun's report alone is 40-odd lines)
READ_BYTES = 64 * 1024  # as locally (local/inspect/read.py tail)

ReadLog = Callable[[str], list[str] | None]  # a pod's name -> its log's last lines; None: not readable


def _failed_pod(pods: list[Any], replica: str, attempt: int | None) -> dict[str, Any] | None:
    for p in pods:
        data = to_dict(p)
        if replica_name(data["metadata"].get("labels") or {}) == replica and \
                (attempt is None or attempt_of(data) == attempt):
            return data
    return None


def _message(job: TorchJob, pod: dict[str, Any], replica: str) -> tuple[str, str | None]:
    """The training container's termination message and when it ended."""
    step = step_named(job, replica)  # an initializer's: its first container
    containers = (step.template if step else job.spec.pytorchReplicaSpecs[ReplicaId.parse(replica).rtype].template
                  ).spec.containers
    ended = terminated(pod, containers[0 if step else training_container(containers)].name)
    return str(ended.get("message") or ""), ended.get("finishedAt")


def text(name: str, job: TorchJob, status: JobStatus, pods: list[Any], read_log: ReadLog) -> str | None:
    """The root cause block of a failed job (None unless it failed): `pods` the job's pods, `read_log`
    reads one's last lines."""
    f = status.failure
    if not status.is_true(ConditionType.FAILED) or f is None:
        return None
    bar = "=" * 72
    out = [bar, f"{name} FAILED: {f.reason}", "-" * 72, f.message]
    if f.replica is not None:
        rank = "" if step_named(job, f.replica) else f", node rank {node_rank(job, ReplicaId.parse(f.replica))}"
        pod = _failed_pod(pods, f.replica, f.attempt)
        where = f", pod {pod['metadata']['name']}" if pod is not None else ""
        out += ["", "Root cause (the failure that ended the job):",
                f"  replica   : {f.replica} (attempt {f.attempt}{rank}{where})"]
        if f.exitCode is not None:
            out.append(f"  exit code : {f.exitCode}" + (f" ({f.signal})" if f.signal else ""))
        if pod is not None:
            message, finished = _message(job, pod, f.replica)
            when = parse_time(finished) if isinstance(finished, str) else finished
            if when is not None:
                out.append(f"  time      : {when.astimezone(UTC).isoformat(sep=' ')}")
            trace = torch_errors.traceback(message) if message else None
            if trace:
                out += ["  traceback (from torch's error file):", *("    " + t for t in trace.splitlines())]
            else:
                lines = read_log(pod["metadata"]["name"])
                if not lines and message:  # its log is gone (its node, its container): what the kubelet kept
                    lines = message.splitlines()
                out += torch_errors.last_words(lines or [], LOG_LINES)
        else:
            out.append("  its pod is gone (its last words, where it left any, are in the message above)")
    out.append(bar)
    return "\n".join(out)
