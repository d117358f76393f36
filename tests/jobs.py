"""Building valid `TorchJob`s for tests without writing YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob

DEFAULT_COMMAND = ("python", "train.py")


def job_data(
    name: str = "demo",
    *,
    workers: int = 2,
    master: bool = True,
    restart_policy: str | None = "Never",
    command: Sequence[str] = DEFAULT_COMMAND,
    run_policy: Mapping[str, Any] | None = None,
    elastic: Mapping[str, Any] | None = None,
    nproc_per_node: str | int | None = None,
    master_port: int | None = None,
    uid: str | None = None,
    restart_scope: str | None = "Replica",
) -> dict[str, Any]:
    """Plain data of a native job: `workers` Worker replicas (none when 0), one Master when
    `master`, the same restart policy and command for every replica. `restart_scope` is
    runPolicy.restartScope: these tests were written for Kubeflow's per-replica restarts (Replica);
    None leaves the field out (the default: Job unless the job is elastic)."""

    def replica(n: int, port: int | None) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "pytorch", "command": list(command)}
        if port is not None:
            container["ports"] = [{"name": "pytorchjob-port", "containerPort": port}]
        spec: dict[str, Any] = {"replicas": n, "template": {"spec": {"containers": [container]}}}
        if restart_policy is not None:
            spec["restartPolicy"] = restart_policy
        return spec

    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = replica(1, master_port)
    if workers:
        specs["Worker"] = replica(workers, None if master else master_port)
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if run_policy or restart_scope:
        spec["runPolicy"] = {**({"restartScope": restart_scope} if restart_scope else {}), **(run_policy or {})}
    if elastic is not None:
        spec["elasticPolicy"] = dict(elastic)
    if nproc_per_node is not None:
        spec["nprocPerNode"] = nproc_per_node
    metadata: dict[str, Any] = {"name": name}
    if uid is not None:
        metadata["uid"] = uid
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": metadata, "spec": spec}


def make_job(name: str = "demo", **kwargs: Any) -> TorchJob:
    """A validated job (see `job_data`); raises InvalidJob when the arguments make an invalid one."""
    return job_from_data(job_data(name, **kwargs))
