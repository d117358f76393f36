"""The operator with the real Volcano scheduler (vc-scheduler v1.10.0, built from the Go module proxy
by hack/volcano/build.sh) on the dev control plane, alone: no vc-controller-manager, no webhooks.
vc-scheduler admits a TorchJob's PodGroup (Pending -> Inqueue), binds the gang's pods to the KWOK
node (which makes them Running), and holds back a gang that cannot fit, with its own reasons.
How it runs alone: tests/kube/admitters.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.utils.quantity import parse_quantity

from tests.jobs import job_data
from tests.kube.admitters import SCHEDULER_NAME, run_vc_scheduler
from tests.kube.conftest import ENABLED, Operator, dev_cluster, finished, set_pod, wait_job
from tests.kube.test_gang_kube import gone, wait_for
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import VolcanoPodGroup

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]  # the first may build vc-scheduler (minutes)
VolcanoQueue = create_global_resource("scheduling.volcano.sh", "v1beta1", "Queue", "queues")
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def kubeconfig() -> Iterator[str]:
    """A cluster of its own: the session's keeps the gangs of earlier tests (their operators long
    gone, their PodGroups and pods left as they were), which a real scheduler would weigh too."""
    if not ENABLED:
        pytest.skip("Kubernetes tests need a control plane: set TORCHJOB_KUBE_TESTS=1")
    with dev_cluster("/tmp/torchjob-devcluster-volcano") as path:
        yield path


@pytest.fixture(scope="module")
def kube(kubeconfig: str) -> Client:
    return Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-tests")


@pytest.fixture(scope="module")
def vc_scheduler(kubeconfig: str, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with run_vc_scheduler(kubeconfig, kube, tmp_path_factory.mktemp("volcano")) as proc:
        yield
        assert proc.poll() is None, "vc-scheduler exited during the tests"


def gang_job(name: str, worker_cpu: str, min_resources: dict[str, str] | None = None) -> dict[str, Any]:
    """A master and two workers, all three needed at once, that tolerate the KWOK nodes' taint."""
    policy: dict[str, Any] = {"schedulerName": SCHEDULER_NAME, "minAvailable": 3}
    if min_resources:
        policy["minResources"] = min_resources
    data = job_data(name, workers=2, run_policy={"schedulingPolicy": policy})
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["tolerations"] = [KWOK_TOLERATION]
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": worker_cpu}}
    return data


def podgroup(kube: Client, name: str, namespace: str) -> Any:
    return kube.get(VolcanoPodGroup, name, namespace=namespace)


def phase(kube: Client, name: str, namespace: str) -> str | None:
    try:
        return (podgroup(kube, name, namespace).get("status") or {}).get("phase")
    except ApiError:
        return None


def condition(kube: Client, name: str, namespace: str, type_: str) -> dict[str, Any] | None:
    status = podgroup(kube, name, namespace).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def volcano_events(kube: Client, namespace: str, kind: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the events vc-scheduler recorded on an object."""
    return [(e.reason or "", e.message or "") for e in kube.list(Event, namespace=namespace,
                                                                  fields={"involvedObject.name": name})
            if e.involvedObject.kind == kind and e.source is not None and e.source.component == SCHEDULER_NAME]


def test_the_real_volcano_admits_the_gang_binds_its_pods_to_the_node_and_the_job_runs(
        kube: Client, namespace: str, operator: Operator, vc_scheduler: None) -> None:
    node = next(n.metadata.name for n in kube.list(Node, labels={"type": "kwok"}))
    create(kube, gang_job("vc", "1"), namespace)
    # Pending -> Inqueue by vc-scheduler's enqueue action; then the operator makes the pods.
    wait_for(lambda: phase(kube, "vc", namespace) in ("Inqueue", "Running"), timeout=60)
    pods = wait_pods(kube, "vc", namespace, 3)
    assert all(p.spec.schedulerName == SCHEDULER_NAME for p in pods)

    # Bound by vc-scheduler (not kube-scheduler), then made Running by KWOK.
    def bound_and_running() -> list[Any]:
        got = [kube.get(Pod, p.metadata.name, namespace=namespace) for p in pods]
        return got if all(p.spec.nodeName == node and p.status.phase == "Running" for p in got) else []
    wait_for(bound_and_running, timeout=60)
    # vc-scheduler records its events apart from the binding (client-go's broadcaster): waited for, not read once
    for p in pods:
        said = ("Scheduled", f"Successfully assigned {namespace}/{p.metadata.name} to {node}")
        wait_for(lambda name=p.metadata.name, said=said: said in volcano_events(kube, namespace, "Pod", name))
    wait_job(kube, "vc", namespace, lambda s: s.get("state") == "Running")

    # vc-scheduler's own view: the gang runs, in the default Queue it created, which holds its CPU.
    wait_for(lambda: phase(kube, "vc", namespace) == "Running" and
             (podgroup(kube, "vc", namespace).get("status") or {}).get("running") == 3)
    scheduled = condition(kube, "vc", namespace, "Scheduled")
    assert scheduled is not None and scheduled["status"] == "True"
    assert podgroup(kube, "vc", namespace)["spec"]["queue"] == "default"
    wait_for(lambda: parse_quantity(((kube.get(VolcanoQueue, "default").get("status") or {}).get("allocated") or {})
                                    .get("cpu", "0")) == 2)

    # The job's end, played: the master exits 0.
    set_pod(kube, next(p for p in pods if p.metadata.name == "vc-master-0"), "Succeeded", 0)
    wait_job(kube, "vc", namespace, finished)
    wait_for(lambda: gone(kube, VolcanoPodGroup, "vc", namespace))


def test_a_gang_bigger_than_the_cluster_stays_pending_with_volcanos_reason(
        kube: Client, namespace: str, operator: Operator, vc_scheduler: None) -> None:
    # 2 x 64 CPUs: more than the 32-CPU KWOK node, even with enqueue's overcommit factor (1.2).
    create(kube, gang_job("big", "64"), namespace)
    unschedulable = wait_for(lambda: condition(kube, "big", namespace, "Unschedulable"), timeout=60)
    assert unschedulable["status"] == "True" and unschedulable["reason"] == "NotEnoughResources"
    assert "tasks in gang unschedulable" in unschedulable["message"]
    assert phase(kube, "big", namespace) == "Pending"  # written by vc-scheduler (the operator writes no status)
    assert ("Unschedulable", "resource in cluster is overused") in wait_for(
        lambda: volcano_events(kube, namespace, "PodGroup", "big"))
    assert pods_of(kube, "big", namespace) == []


def test_volcano_binds_no_pod_of_a_gang_that_is_admitted_but_does_not_fit(
        kube: Client, namespace: str, operator: Operator, vc_scheduler: None) -> None:
    # minResources claims 2 CPUs, so the PodGroup is admitted and its pods are made; but the two
    # 20-CPU workers do not fit the 32-CPU node together. The master and one worker would: the
    # gang plugin binds none of them.
    node = next(n.metadata.name for n in kube.list(Node, labels={"type": "kwok"}))
    create(kube, gang_job("part", "20", min_resources={"cpu": "2"}), namespace)
    wait_for(lambda: phase(kube, "part", namespace) == "Inqueue", timeout=60)
    pods = wait_pods(kube, "part", namespace, 3)

    def gang_unschedulable() -> dict[str, Any] | None:
        c = condition(kube, "part", namespace, "Unschedulable")
        # "/3": a session that saw all three pods.
        return c if c is not None and "/3 tasks in gang unschedulable" in c["message"] else None
    unschedulable = wait_for(gang_unschedulable, timeout=60)
    assert unschedulable["reason"] == "NotEnoughResources"

    def failed_scheduling() -> list[str]:
        got = [[m for r, m in volcano_events(kube, namespace, "Pod", p.metadata.name) if r == "FailedScheduling"]
               for p in pods]
        return [m for ms in got for m in ms] if all(got) else []
    failed = wait_for(failed_scheduling)
    # Room for some of the pods on the node, one without: none is bound.
    assert any(m.endswith(f"can possibly be assigned to {node}") for m in failed), failed
    assert any(m.startswith("pod group is not ready") and "1 Unschedulable" in m for m in failed), failed
    assert all(not kube.get(Pod, p.metadata.name, namespace=namespace).spec.nodeName for p in pods)
    assert phase(kube, "part", namespace) == "Inqueue"
