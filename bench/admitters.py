"""The admitters of a big job, for bench/operator_scale.py's phases `volcano` and `kueue` (--job-pods):
Volcano's scheduler (vc-scheduler v1.10.0) and Kueue's manager (v0.13.2), each run alone as a process
against the bench's cluster, started as the tests start them (tests/kube/admitters.py: built when missing,
minutes once per machine), and the job each is given: the very TorchJob of the `torchjob` phase with a gang
(schedulingPolicy: Volcano binds its pods once all of them fit) or a Kueue queue (the operator holds the job
suspended behind a Workload until Kueue admits it)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the bench runs from bench/: the tests' start-up of the admitters
from tests.kube.admitters import (  # noqa: E402
    SCHEDULER_NAME,
    ClusterQueue,
    LocalQueue,
    kueue_manager_config,
    run_vc_scheduler,
    running_kueue,
)
from tests.kube.conftest import free_port  # noqa: E402

from torchjob.kube.machinery.client import KueueResourceFlavor  # noqa: E402

QUEUE = "bench"  # the Kueue LocalQueue the job names
POD_CPU = "10m"  # each pod's request, which Kueue counts against the ClusterQueue's quota


def gang(job: dict[str, Any]) -> dict[str, Any]:
    """The job as one gang for Volcano: every pod needed at once."""
    pods = sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values())
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"schedulerName": SCHEDULER_NAME, "minAvailable": pods}}
    return job


def queued(job: dict[str, Any]) -> dict[str, Any]:
    """The job in Kueue's queue: each pod requests POD_CPU, which the whole job's admission counts."""
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = QUEUE
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"] = [{**c, "resources": {"requests": {"cpu": POD_CPU}}}
                                                  for c in rspec["template"]["spec"]["containers"]]
    return job


def _client(kubeconfig: str) -> Client:
    return Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench")


@contextmanager
def vc_scheduler(kubeconfig: str, work: Path) -> Iterator[str]:
    """vc-scheduler against the cluster, scheduling (its `default` Queue it makes itself); yields its log's path."""
    with run_vc_scheduler(kubeconfig, _client(kubeconfig), work, verbosity=1):  # -v=1: a 1,024-pod gang's log
        yield str(work / "vc-scheduler.log")


@contextmanager
def kueue(kubeconfig: str, work: Path, namespace: str, pods: int) -> Iterator[str]:
    """Kueue's manager against the cluster, integrating TorchJobs, with a ClusterQueue whose CPU quota
    holds the job's `pods` (POD_CPU each) and the LocalQueue QUEUE in `namespace`; yields its log's path."""
    kube = _client(kubeconfig)
    config = kueue_manager_config(work, free_port(), ["batch/job"], ["TorchJob.v1.torchjob.dev"])
    with running_kueue(kubeconfig, kube, work, config):
        flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
        quota = f"{pods * int(POD_CPU.removesuffix('m')) // 1000 + 1}"
        kube.create(KueueResourceFlavor.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                                   "metadata": {"name": flavor}}))
        kube.create(ClusterQueue.from_dict({
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": quota}]}]}]}}))
        kube.create(LocalQueue.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                          "metadata": {"name": QUEUE, "namespace": namespace},
                                          "spec": {"clusterQueue": cq}}))
        yield str(work / "kueue.log")
