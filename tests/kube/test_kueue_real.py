"""The operator with a real Kueue manager (v0.13.2, built from the Go module proxy by
hack/kueue/build.sh) on the real control plane: Kueue admits the operator's Workloads as its
ClusterQueue's quota allows, and a finished job frees the quota for the next one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError

from tests.jobs import job_data
from tests.kube.admitters import ClusterQueue, LocalQueue, kueue_manager_config, running_kueue
from tests.kube.conftest import Operator, finished, free_port, set_pod, wait_job
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import KueueResourceFlavor, KueueWorkload, TorchJobRes
from torchjob.kube.objects.admission import kueue

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]  # the first may build Kueue (~5 min)


@pytest.fixture(scope="module")
def kueue_manager(kubeconfig: str, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    work = tmp_path_factory.mktemp("kueue")
    config = kueue_manager_config(work, free_port(), ["batch/job"], ["TorchJob.v1.torchjob.dev"])
    with running_kueue(kubeconfig, kube, work, config):
        yield


def queued(name: str, queue: str) -> dict[str, Any]:
    data = job_data(name, workers=1)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: queue}
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return data


def running_on_admission(kube: Client, name: str, namespace: str) -> bool:
    """Resumed by the operator after Kueue admitted its Workload."""
    try:
        admitted = conditions(kube, f"torchjob-{name}", namespace).get("Admitted", {}).get("status") == "True"
    except ApiError:
        return False  # no Workload yet
    spec = kube.get(TorchJobRes, name, namespace=namespace).spec
    return admitted and (spec.get("runPolicy") or {}).get("suspend") is False


def conditions(kube: Client, workload: str, namespace: str) -> dict[str, dict[str, Any]]:
    status = kube.get(KueueWorkload, workload, namespace=namespace).status or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def quota(kube: Client, namespace: str, cpus: int, queue: str = "team-a") -> str:
    """A ResourceFlavor with a node label, a ClusterQueue of `cpus` CPUs on it and a LocalQueue
    `queue` in the namespace: the flavor's name (its node label's value)."""
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    kube.create(KueueResourceFlavor.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                               "metadata": {"name": flavor},
                                               "spec": {"nodeLabels": {"example.com/pool": flavor}}}))
    kube.create(ClusterQueue.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}}))
    kube.create(LocalQueue.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                      "metadata": {"name": queue, "namespace": namespace},
                                      "spec": {"clusterQueue": cq}}))
    return flavor


def test_a_real_kueue_admits_jobs_as_its_quota_allows_and_a_finished_job_frees_it(
        kube: Client, namespace: str, operator: Operator, kueue_manager: None) -> None:
    flavor = quota(kube, namespace, 2)  # one 2-pod job at a time
    create(kube, queued("qa", "team-a"), namespace)
    create(kube, queued("qb", "team-a"), namespace)

    end = time.monotonic() + 60
    while sum(running_on_admission(kube, j, namespace) for j in ("qa", "qb")) != 1:
        assert time.monotonic() < end, [conditions(kube, f"torchjob-{j}", namespace) for j in ("qa", "qb")]
        time.sleep(0.2)
    first, second = ("qa", "qb") if running_on_admission(kube, "qa", namespace) else ("qb", "qa")
    # Kueue has looked at it with the ClusterQueue in its cache: on a loaded machine its first answer can be
    # "ClusterQueue ... doesn't exist" (its cache had the LocalQueue first), which the quota's answer follows
    while True:
        waiting = conditions(kube, f"torchjob-{second}", namespace).get("QuotaReserved")
        if waiting is not None and "doesn't exist" not in waiting.get("message", ""):
            break
        assert time.monotonic() < end, conditions(kube, f"torchjob-{second}", namespace)
        time.sleep(0.2)
    assert waiting["status"] == "False" and "insufficient unused quota" in waiting["message"]
    assert conditions(kube, f"torchjob-{first}", namespace)["Admitted"]["status"] == "True"
    pods = wait_pods(kube, first, namespace, 2)
    assert all(p.spec.nodeSelector == {"example.com/pool": flavor} for p in pods)  # Kueue's flavor
    assert pods_of(kube, second, namespace) == []

    for p in pods:
        set_pod(kube, p, "Running")
    wait_job(kube, first, namespace, lambda s: s.get("state") == "Running")
    set_pod(kube, next(p for p in pods if p.metadata.name == f"{first}-master-0"), "Succeeded", 0)
    wait_job(kube, first, namespace, finished)
    # Finished -> Kueue releases the quota -> admits the other job -> the operator resumes it.
    assert wait_pods(kube, second, namespace, 2)
    assert conditions(kube, f"torchjob-{first}", namespace)["Finished"]["status"] == "True"
    assert conditions(kube, f"torchjob-{second}", namespace)["Admitted"]["status"] == "True"
