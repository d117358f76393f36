"""Kueue's own `kubeflow.org/pytorchjob` integration (a real Kueue manager, v0.13.2, built by
hack/kueue/build.sh) with torchjob's operator serving the PyTorchJob API (`--kubeflow-api on`), as
on a cluster that keeps running its PyTorchJobs: Kueue's webhook suspends a queued job on
creation, Kueue makes its Workload, admits it as the ClusterQueue's quota allows and resumes the
job through `spec.runPolicy.suspend`; torchjob's operator makes the pods (the test plays the
kubelet); Kueue reads the job's Kubeflow status (Running -> the Workload's PodsReady, Succeeded
-> Finished), and the finished job's quota goes to the next one. torchjob runs no Kueue handling
of its own for a PyTorchJob."""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.types import PatchType

from tests.kube.admitters import kueue_manager_config, running_kueue
from tests.kube.conftest import Operator, free_port, set_pod
from tests.kube.test_kubeflow_crd import PyTorchJobRes, pytorchjobs, seed  # noqa: F401 (the fixture)
from tests.kube.test_kueue_real import quota
from tests.kube.test_operator import pods_of, wait_pods
from torchjob.kube.machinery.client import KueueWorkload
from torchjob.kube.objects.admission import kueue

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]  # the first may build Kueue (~5 min)
FRAMEWORK = "kubeflow.org/pytorchjob"  # Kueue's name for its PyTorchJob integration (pytorchjob_controller.go)
WEBHOOKS = ("mpytorchjob.kb.io", "vpytorchjob.kb.io")  # its mutating and validating webhooks


def pytorchjob_webhooks(build: Path, port: int, ca: bytes, suffix: str) -> list[Any]:
    """Kueue's own webhook configurations (config/components/webhook/manifests.yaml), its
    PyTorchJob webhooks only, pointed at the manager on loopback instead of its in-cluster Service."""
    out = []
    for doc in yaml.safe_load_all((build / "webhooks.yaml").read_text()):
        hooks = [h for h in doc.get("webhooks", []) if h["name"] in WEBHOOKS]
        for h in hooks:
            path = h["clientConfig"]["service"]["path"]
            h["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
        if hooks:
            out.append(codecs.from_dict({**doc, "metadata": {"name": f"kueue-pytorchjob-{suffix}"}, "webhooks": hooks}))
    assert len(out) == 2, "Kueue's manifests have no PyTorchJob webhooks"
    return out


@pytest.fixture(scope="module")
def kueue_for_pytorchjobs(kubeconfig: str, kube: Client, pytorchjobs: Client,  # noqa: F811 (the CRD first)
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Kueue with its PyTorchJob integration on (the CRD is there before it starts, so the
    integration is set up at once rather than when the CRD appears) and waitForPodsReady on (so
    that it reads the job's Running condition into the Workload's PodsReady)."""
    work = tmp_path_factory.mktemp("kueue-pytorchjob")
    config = kueue_manager_config(work, free_port(), ["batch/job", FRAMEWORK], ["TorchJob.v1.torchjob.dev"])
    config["waitForPodsReady"] = {"enable": True, "timeout": "5m", "blockAdmission": False}
    with running_kueue(kubeconfig, kube, work, config) as build:
        ca = (Path(kubeconfig).parent / "pki" / "apiserver" / "apiserver.crt").read_bytes()
        hooks = pytorchjob_webhooks(build, config["webhook"]["port"], ca, work.name.lower().replace("_", "-"))
        for h in hooks:
            kube.create(h)
        try:
            yield
        finally:  # failurePolicy Fail: left behind, they would refuse every PyTorchJob once Kueue stops
            for h in hooks:
                kube.delete(type(h), h.metadata.name)


@pytest.fixture
def kubeflow_operator(kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect", "--kubeflow-api", "on"))
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


def queued(name: str, queue: str, namespace: str) -> dict[str, Any]:
    """Kubeflow's simple PyTorchJob (a master, two workers), each pod asking for a CPU, in a queue."""
    data = seed(name)
    data["metadata"] = {"name": name, "namespace": namespace, "labels": {kueue.QUEUE_LABEL: queue}}
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return data


def workload(kube: Client, job: str, namespace: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the PyTorchJob (named by Kueue; found by its owner)."""
    for wl in kube.list(KueueWorkload, namespace=namespace):
        if any(o.kind == "PyTorchJob" and o.name == job for o in wl.metadata.ownerReferences or []):
            out: dict[str, Any] = wl.to_dict()
            return out
    return None


def wl_conditions(kube: Client, job: str, namespace: str) -> dict[str, dict[str, Any]]:
    wl = workload(kube, job, namespace) or {}
    return {c["type"]: c for c in (wl.get("status") or {}).get("conditions", [])}


def job(kube: Client, name: str, namespace: str) -> dict[str, Any]:
    out: dict[str, Any] = kube.get(PyTorchJobRes, name, namespace=namespace).to_dict()
    return out


def suspended(kube: Client, name: str, namespace: str) -> bool:
    return bool((job(kube, name, namespace)["spec"].get("runPolicy") or {}).get("suspend"))


def job_condition(kube: Client, name: str, namespace: str, type_: str) -> bool:
    status = job(kube, name, namespace).get("status") or {}
    return any(c["type"] == type_ and c["status"] == "True" for c in status.get("conditions", []))


def held_for_quota(kube: Client, name: str, namespace: str) -> None:
    """The job waits: Kueue made its Workload and reserved no quota for it, it stays suspended and
    torchjob made no pod. Kueue's scheduler says why in QuotaReserved False, but may fail to write
    it: with waitForPodsReady its job controller adds the new Workload's PodsReady condition at the
    same moment, the scheduler's update conflicts, and it puts the Workload back among the
    inadmissible ones without retrying the write (v0.13.2, scheduler.go requeueAndUpdate). On a
    loaded machine its first answer can be "ClusterQueue  doesn't exist" (its cache has the
    LocalQueue before the queue it points to): the quota's answer follows."""
    assert workload(kube, name, namespace) is not None
    end = time.monotonic() + 30
    while True:
        reserved = wl_conditions(kube, name, namespace).get("QuotaReserved")
        if reserved is None or "doesn't exist" not in reserved["message"] or time.monotonic() > end:
            break
        time.sleep(0.2)
    if reserved is not None:
        assert reserved["status"] == "False" and "insufficient unused quota" in reserved["message"], reserved
    assert "Admitted" not in wl_conditions(kube, name, namespace) or \
        wl_conditions(kube, name, namespace)["Admitted"]["status"] == "False"
    assert suspended(kube, name, namespace) and pods_of(kube, name, namespace) == []


def wait(what: str, pred: Any, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_kueues_pytorchjob_integration_queues_admits_and_frees_quota_for_jobs_torchjob_runs(
        kube: Client, namespace: str, kueue_for_pytorchjobs: None, kubeflow_operator: Operator) -> None:
    flavor = quota(kube, namespace, 3)  # one 3-pod job at a time
    for name in ("pa", "pb"):
        created = kube.create(PyTorchJobRes.from_dict(copy.deepcopy(queued(name, "team-a", namespace))))
        # Kueue's webhook suspended it on creation: torchjob makes no pod for it until Kueue says so
        assert created.spec["runPolicy"]["suspend"] is True

    def admitted(name: str) -> bool:
        return wl_conditions(kube, name, namespace).get("Admitted", {}).get("status") == "True" and \
            not suspended(kube, name, namespace)

    wait("one job admitted and resumed by Kueue", lambda: sum(map(admitted, ("pa", "pb"))) == 1)
    first, second = ("pa", "pb") if admitted("pa") else ("pb", "pa")
    wl = workload(kube, first, namespace)
    assert wl is not None
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("master", 1), ("worker", 2)]

    # torchjob's operator makes the admitted job's pods, with Kueue's flavor (which Kueue put in the
    # job's templates on admission), and none of the waiting one's.
    pods = wait_pods(kube, first, namespace, 3)
    assert all(p.spec.nodeSelector == {"example.com/pool": flavor} for p in pods)
    assert all(p.metadata.labels["training.kubeflow.org/job-name"] == first for p in pods)
    held_for_quota(kube, second, namespace)
    # as Kubeflow's status says it: the operator's status write, not Kueue's, so waited for
    wait("the second job's Suspended condition", lambda: job_condition(kube, second, namespace, "Suspended"))

    for p in pods:
        set_pod(kube, p, "Running")
    wait("the first job Running", lambda: job_condition(kube, first, namespace, "Running"))
    # Kueue reads the PyTorchJob's Running condition as its pods being ready
    wait("the Workload PodsReady", lambda: wl_conditions(kube, first, namespace).get("PodsReady", {}).get(
        "status") == "True")
    set_pod(kube, next(p for p in pods if p.metadata.name == f"{first}-master-0"), "Succeeded", 0)
    wait("the first job Succeeded", lambda: job_condition(kube, first, namespace, "Succeeded"))
    # Succeeded -> Kueue finishes the Workload, releasing its quota -> admits the other job ->
    # resumes it -> torchjob makes its pods.
    wait("the first Workload Finished", lambda: wl_conditions(kube, first, namespace).get("Finished", {}).get(
        "status") == "True")
    wait("the second job admitted and resumed", lambda: admitted(second))
    # Kueue admitted it and resumed its spec; the operator's status write saying so comes after
    wait("the second job's Suspended condition gone", lambda: not job_condition(kube, second, namespace, "Suspended"))
    assert len(wait_pods(kube, second, namespace, 3)) == 3
    assert wl_conditions(kube, first, namespace)["Finished"]["reason"] == "Succeeded"


def test_a_job_kueue_evicts_is_suspended_by_it_and_its_quota_goes_once_torchjob_has_stopped_its_pods(
        kube: Client, namespace: str, kueue_for_pytorchjobs: None, kubeflow_operator: Operator) -> None:
    """Kueue takes a running job's admission back (its Workload deactivated, as `kubectl` or a
    preemption would): it suspends the job and restores its templates, torchjob deletes the pods
    and counts none active, and only then does Kueue release the quota, to the waiting job."""
    quota(kube, namespace, 3, "team-b")  # one 3-pod job at a time
    kube.create(PyTorchJobRes.from_dict(queued("ea", "team-b", namespace)))
    wait("the first job resumed", lambda: not suspended(kube, "ea", namespace))
    pods = wait_pods(kube, "ea", namespace, 3)
    for p in pods:
        set_pod(kube, p, "Running")
    wait("the first job Running", lambda: job_condition(kube, "ea", namespace, "Running"))
    kube.create(PyTorchJobRes.from_dict(queued("eb", "team-b", namespace)))
    wait("Kueue's Workload of the second job", lambda: workload(kube, "eb", namespace) is not None)
    held_for_quota(kube, "eb", namespace)

    wl = workload(kube, "ea", namespace)
    assert wl is not None
    kube.patch(KueueWorkload, wl["metadata"]["name"], {"spec": {"active": False}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    wait("Kueue to suspend the evicted job", lambda: suspended(kube, "ea", namespace))
    wait("torchjob to delete its pods", lambda: pods_of(kube, "ea", namespace) == [])
    wait("no replica of it active", lambda: all(
        r["active"] == 0 for r in job(kube, "ea", namespace)["status"]["replicaStatuses"].values()))
    # Kueue put the templates back as they were written (no flavor), and released the quota
    master = job(kube, "ea", namespace)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert "nodeSelector" not in master["spec"]
    wait("the second job admitted and resumed", lambda: not suspended(kube, "eb", namespace), timeout=90)
    assert wl_conditions(kube, "eb", namespace)["Admitted"]["status"] == "True"
    assert wl_conditions(kube, "ea", namespace)["Evicted"]["status"] == "True"
    assert len(wait_pods(kube, "eb", namespace, 3)) == 3
    assert job_condition(kube, "ea", namespace, "Suspended") and not job_condition(kube, "ea", namespace, "Failed")
