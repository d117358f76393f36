"""One job of 512 pods on KWOK fake nodes of its own, against a real kube-apiserver, kube-scheduler and the
operator (issue 46; bench/operator_scale.py --job-pods 4096 measures the big one): every pod Running and
the job Running, and `torchjob describe --kube` showing the replicas summarised (counts by state) unless
--replicas all asks for each line. The nodes are tainted and labelled for this test alone, so that no
other test's pod lands on them and this job's pods land nowhere else."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, wait_job
from tests.kube.test_guarded_patch import run
from torchjob.kube.machinery.client import TorchJobRes, to_dict

pytestmark = pytest.mark.kube
PODS = 512
NodeG = create_global_resource("", "v1", "Node", "nodes")


def fake_node(name: str, mark: str) -> dict[str, Any]:
    """A KWOK node (scripts/dev-cluster.sh's node_json, which KWOK keeps Ready by its annotation), for
    this test's pods only."""
    room = {"cpu": "400", "memory": "400Gi", "pods": "400"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"torchjob.dev/test-nodes": mark, "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": "torchjob.dev/test-nodes", "value": mark, "effect": "NoSchedule"}]},
            "status": {"capacity": room, "allocatable": room}}


@pytest.fixture
def nodes(kube: Client) -> Iterator[str]:
    mark = uuid.uuid4().hex[:8]
    names = [f"big-{mark}-{i}" for i in range(2)]
    for n in names:
        kube.create(NodeG.from_dict(fake_node(n, mark)))
    try:
        yield mark
    finally:
        for n in names:
            kube.delete(NodeG, n)


def big_job(name: str, namespace: str, mark: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"torchjob.dev/wait-for-master": "false"}},
                "spec": {"nodeSelector": {"torchjob.dev/test-nodes": mark},
                         "tolerations": [{"key": "torchjob.dev/test-nodes", "operator": "Exists"}],
                         "containers": [{"name": "pytorch", "image": "example/trainer:1",
                                         "command": ["python", "train.py"]}]}}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": PODS - 1, "template": template}}}}


def delete_pods(kubeconfig: str, namespace: str, timeout: float = 180) -> None:
    """Every pod of the namespace deleted with grace 0, and gone. One DELETE of the collection: the API
    server answers it once every pod is deleted, which for 512 pods under the suite's load took longer
    than lightkube's 10 s read timeout (a CI teardown failed so); its own client waits up to `timeout`,
    and the server goes on deleting even if that runs out, so what counts is the list emptying."""
    slow = patient(kubeconfig, timeout)
    end, left = time.monotonic() + timeout, -1
    while left and time.monotonic() < end:
        try:  # the listing of 512 pods under load is slow too: the same patient client
            if left := len(list(slow.list(Pod, namespace=namespace))):
                slow.deletecollection(Pod, namespace=namespace, grace_period=0)
        except (httpx.TimeoutException, ApiError):  # the server's own timeout (504) too: asked again
            time.sleep(1)
    assert not left, f"{left} pods of {namespace} not gone {timeout} s after their deletion"


def patient(kubeconfig: str, read_s: float) -> Client:
    """A client whose reads wait up to `read_s`: lightkube's 10 s is too short for 512 pods under the suite's load."""
    return Client(config=KubeConfig.from_file(kubeconfig), timeout=httpx.Timeout(10, read=read_s))


def running(kube: Client, namespace: str) -> int:
    """How many of the namespace's pods run (-1: the listing timed out, to be asked again)."""
    try:
        return sum(1 for p in kube.list(Pod, namespace=namespace) if p.status and p.status.phase == "Running")
    except httpx.TimeoutException:
        return -1


def describe(kubeconfig: str, namespace: str, *extra: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "torchjob", "describe", "big", "--kube", "--kubeconfig", kubeconfig,
                          "-n", namespace, *extra], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_a_job_of_512_pods_runs_and_describe_summarises_its_replicas(kubeconfig: str, kube: Client, namespace: str,
                                                                     nodes: str, operator: Operator) -> None:
    kube.create(TorchJobRes.from_dict(big_job("big", namespace, nodes)))
    try:
        end, lister = time.monotonic() + 240, patient(kubeconfig, 60)
        while (n := running(lister, namespace)) < PODS and time.monotonic() < end:
            time.sleep(1)
        assert n == PODS, f"{n} of {PODS} pods Running"
        wait_job(kube, "big", namespace, lambda s: s.get("state") == "Running", timeout=180)

        lines = describe(kubeconfig, namespace)
        attempts = next(i for i, line in enumerate(lines) if line.startswith("Attempts:"))
        assert lines[attempts] == f"Attempts:    {PODS} replicas: {PODS} Running (each replica's line: --replicas all)"
        assert lines[attempts + 1] == "Conditions:"  # none to name: no table
        assert len(lines) < 40, lines
        every = describe(kubeconfig, namespace, "--replicas", "all")
        assert sum(1 for line in every if line.startswith(("  master-0 ", "  worker-"))) == PODS
        listed = subprocess.run([sys.executable, "-m", "torchjob", "list", "--kube", "--kubeconfig", kubeconfig, "-n",
                                 namespace, "-o", "json"], capture_output=True, text=True, timeout=120)
        assert [(j["name"], j["state"], j["replicas"]) for j in json.loads(listed.stdout)] == [("big", "Running", PODS)]
    finally:  # no garbage collector in this cluster: the pods go with grace 0, before their nodes
        kube.delete(TorchJobRes, "big", namespace=namespace)
        delete_pods(kubeconfig, namespace)


def test_the_status_of_a_job_of_4096_replicas_is_written(kubeconfig: str, kube: Client, namespace: str) -> None:
    """The operator's guarded status write (kube/machinery/guarded_patch.py) of 4,096 replicas: one JSON
    patch of 16,403 ops before, which the API server refuses past 10,000 (413)."""
    job = to_dict(kube.create(TorchJobRes.from_dict(big_job("huge", namespace, "none"))))
    first = {f"worker-{i}": {"attempt": 0, "restarts": 0} for i in range(4095)} | {"master-0": {"attempt": 0}}
    again = {name: {"attempt": 1, "restarts": 1, "notBefore": None} for name in first}

    async def write(api: Any) -> dict[str, Any]:
        seen = await api.patch_status("huge", namespace, {"state": "Created", "replicas": first}, seen=job)
        return dict(await api.patch_status("huge", namespace, {"state": "Restarting", "replicas": again}, seen=seen))

    try:
        stored = run(kubeconfig, write)["status"]
        assert stored["state"] == "Restarting" and len(stored["replicas"]) == 4096
        assert stored["replicas"]["worker-4094"] == {"attempt": 1, "restarts": 1}
    finally:  # not left for an operator to run (a later test's, which watches every namespace)
        kube.delete(TorchJobRes, "huge", namespace=namespace)
