"""`torchjob convert`: a job in any dialect -> the same job in another, with what is lost."""

from __future__ import annotations

from typing import Any

from torchjob.api.model import TorchJob

TARGETS = ("torchjob", "kubeflow", "volcano", "trainjob")


def explicit(job: TorchJob) -> dict[str, Any]:
    """The job as plain data with its defaults written out (replicas, restartPolicy), no status
    and no generated metadata, so that conversions compare and read the same."""
    data = job.model_dump(mode="json", exclude_none=True, exclude={"status"})
    meta = data["metadata"]
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        meta.pop(key, None)
    for rtype, rspec in data["spec"]["pytorchReplicaSpecs"].items():
        rspec.setdefault("replicas", job.replica_count(rtype))
        rspec.setdefault("restartPolicy", job.restart_policy(rtype))
    return data


def convert(job: TorchJob, target: str) -> tuple[dict[str, Any], list[str]]:
    data = explicit(job)
    if target == "torchjob":
        return data, []
    if target == "kubeflow":
        from torchjob.dialects import kubeflow

        return kubeflow.write(data)
    if target == "volcano":
        from torchjob.dialects import volcano

        return volcano.write(data)
    if target == "trainjob":
        from torchjob.dialects import trainjob

        return trainjob.write(data)
    raise ValueError(f"unknown target {target!r}")
