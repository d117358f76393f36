"""Gang scheduling objects, Kueue's suspend and T9k's TensorBoard against a real kube-apiserver,
with the Volcano and scheduler-plugins PodGroup CRDs as those projects publish them."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Service
from lightkube.types import PatchType

from tests.jobs import job_data
from tests.kube.conftest import (
    Operator,
    admit_podgroup,
    apiserver_requests,
    finished,
    kueue_condition,
    kueue_status,
    set_pod,
    third_party_crds,
    wait_established,
    wait_job,
)
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import (
    KueueResourceFlavor,
    KueueWorkload,
    PluginsPodGroup,
    TorchJobRes,
    VolcanoPodGroup,
)
from torchjob.kube.objects.admission import gang, kueue

pytestmark = pytest.mark.kube


def wait_for(fn: Any, timeout: float = 30) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got = fn()
        except ApiError:
            got = None
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {fn}")


def gone(kube: Client, res: Any, name: str, namespace: str) -> bool:
    try:
        kube.get(res, name, namespace=namespace)
    except ApiError as e:
        return e.status.code == 404
    return False


def test_volcano_podgroup_comes_before_the_pods_and_goes_when_the_job_ends(
        kubeconfig: str, kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    data = job_data("vc", workers=2, run_policy={"schedulingPolicy": {"schedulerName": "volcano", "queue": "research",
                                                                       "minAvailable": 3}})
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "2Gi"}}
    create(kube, data, namespace)
    # Volcano admits the gang first: until its PodGroup leaves Pending there is no pod, and the
    # job's events say what it waits for.
    wait_for(lambda: kube.get(VolcanoPodGroup, "vc", namespace=namespace))
    waiting = wait_for(lambda: [e for e in kube.list(Event, namespace=namespace) if e.reason == "PodGroupPending"])
    message = waiting[0].message or ""
    assert "queue 'research'" in message and "volcano scheduler running" in message
    looks = apiserver_requests(kubeconfig, "GET", "podgroups")
    before = operator.reconciles()
    kube.patch(TorchJobRes, "vc", {"metadata": {"annotations": {"test.torchjob.dev/poke": "1"}}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    operator.wait_idle(before)  # it looked again: from its PodGroup watch, not by asking the API server
    assert pods_of(kube, "vc", namespace) == []
    assert apiserver_requests(kubeconfig, "GET", "podgroups") == looks
    admit_podgroup(kube, "vc", namespace)
    pods = wait_pods(kube, "vc", namespace, 3)
    pg = kube.get(VolcanoPodGroup, "vc", namespace=namespace)
    assert pg["spec"]["minMember"] == 3 and pg["spec"]["queue"] == "research"
    assert pg["spec"]["minResources"] == {"cpu": "2", "memory": "4294967296"}  # two workers; the master asks none
    assert pg.metadata.ownerReferences[0].name == "vc"
    assert all(int(pg.metadata.resourceVersion) < int(p.metadata.resourceVersion) for p in pods)
    for p in pods:
        assert p.metadata.annotations[gang.VOLCANO_GROUP_ANNOTATION] == "vc" and p.spec.schedulerName == "volcano"
        set_pod(kube, p, "Running")
    set_pod(kube, next(p for p in pods if p.metadata.name == "vc-master-0"), "Succeeded", 0)
    wait_job(kube, "vc", namespace, finished)
    wait_for(lambda: gone(kube, VolcanoPodGroup, "vc", namespace))


def test_a_policy_scheduler_gets_a_scheduler_plugins_podgroup(
        kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    create(kube, job_data("sp", workers=1, run_policy={"schedulingPolicy": {
        "schedulerName": "scheduler-plugins-scheduler", "scheduleTimeoutSeconds": 60}}), namespace)
    pods = wait_pods(kube, "sp", namespace, 2)
    pg = kube.get(PluginsPodGroup, "sp", namespace=namespace)
    assert pg["spec"]["minMember"] == 2 and pg["spec"]["scheduleTimeoutSeconds"] == 60
    assert {p.metadata.labels[gang.PLUGINS_POD_GROUP_LABEL] for p in pods} == {"sp"}


def test_a_missing_podgroup_crd_fails_the_job_with_the_fix(
        kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    kube.delete(CustomResourceDefinition, gang.PLUGINS_PG.crd)
    try:
        wait_for(lambda: gone(kube, CustomResourceDefinition, gang.PLUGINS_PG.crd, ""), timeout=60)
        create(kube, job_data("nopg", workers=1, run_policy={"schedulingPolicy": {"schedulerName": "coscheduler"}}),
               namespace)
        status = wait_job(kube, "nopg", namespace, finished)
        assert status["failure"]["reason"] == "PodGroupUnavailable"
        assert gang.PLUGINS_PG.crd in status["failure"]["message"]
        assert "remove schedulerName" in status["failure"]["message"]
        assert pods_of(kube, "nopg", namespace) == []
    finally:
        for obj in third_party_crds():
            kube.apply(obj, force=True)
        wait_established(kube, gang.PLUGINS_PG.crd)


def admit(kube: Client, workload: str, namespace: str, flavor: str) -> None:
    assignments = [{"name": name, "count": n, "flavors": {"cpu": flavor}} for name, n in (("master", 1), ("worker", 2))]
    kueue_status(kube, workload, namespace, {
        "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": assignments},
        "conditions": [kueue_condition("QuotaReserved", "True", "QuotaReserved"),
                       kueue_condition("Admitted", "True", "Admitted")]})


def events_of(kube: Client, job: str, namespace: str) -> list[tuple[str, str]]:
    return [(e.reason or "", e.message or "") for e in kube.list(Event, namespace=namespace,
                                                                  fields={"involvedObject.name": job})]


def test_a_job_under_a_kueue_queue_runs_while_its_workload_is_admitted(
        kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    flavor = f"{namespace}-on-demand"
    kube.create(KueueResourceFlavor.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"example.com/pool": "on-demand"},
                 "tolerations": [{"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"}]}}))
    data = job_data("kq", workers=2)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    create(kube, data, namespace)

    # Queued: suspended, no pod, and a Workload asking for the whole job.
    wl = wait_for(lambda: kube.get(KueueWorkload, "torchjob-kq", namespace=namespace))
    assert wl["spec"]["queueName"] == "team-a"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("master", 1), ("worker", 2)]
    assert wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] == "example/trainer:1"
    assert wl.metadata.ownerReferences[0].name == "kq"
    wait_job(kube, "kq", namespace, lambda s: s.get("state") == "Suspended")
    assert pods_of(kube, "kq", namespace) == []
    assert any(r == "Queued" and "team-a" in m for r, m in events_of(kube, "kq", namespace))

    # Admitted: resumed onto the flavor's nodes.
    admit(kube, "torchjob-kq", namespace, flavor)
    pods = wait_pods(kube, "kq", namespace, 3)
    for p in pods:
        assert p.spec.nodeSelector["example.com/pool"] == "on-demand"
        assert any(t.key == "example.com/pool" for t in p.spec.tolerations or [])
    assert next(p for p in pods if p.metadata.name == "kq-master-0").spec.nodeSelector["disk"] == "ssd"
    assert any(r == "Admitted" and "cluster-queue" in m and flavor in m for r, m in events_of(kube, "kq", namespace))

    # Preempted: Kueue takes the admission back; the job is suspended and its templates restored.
    kueue_status(kube, "torchjob-kq", namespace, {"conditions": [
        kueue_condition("QuotaReserved", "False", "Pending"), kueue_condition("Admitted", "False", "Pending"),
        kueue_condition("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority Workload")]})
    wait_job(kube, "kq", namespace, lambda s: s.get("state") == "Suspended")
    wait_pods(kube, "kq", namespace, 0)
    spec = kube.get(TorchJobRes, "kq", namespace=namespace).spec["pytorchReplicaSpecs"]
    assert spec["Master"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert "nodeSelector" not in spec["Worker"]["template"]["spec"]
    assert "tolerations" not in spec["Worker"]["template"]["spec"]
    assert any(r == "Queued" and "higher priority" in m for r, m in events_of(kube, "kq", namespace))

    # Admitted again, and run to the end: the Workload is Finished, so Kueue frees the quota.
    admit(kube, "torchjob-kq", namespace, flavor)
    pods = wait_pods(kube, "kq", namespace, 3)
    for p in pods:
        set_pod(kube, p, "Running")
    wait_job(kube, "kq", namespace, lambda s: s.get("state") == "Running")
    set_pod(kube, next(p for p in pods if p.metadata.name == "kq-master-0"), "Succeeded", 0)
    wait_job(kube, "kq", namespace, finished)
    done = wait_for(lambda: [c for c in kube.get(KueueWorkload, "torchjob-kq", namespace=namespace).status.get(
        "conditions", []) if c["type"] == "Finished" and c["status"] == "True"])
    assert done[0]["reason"] == "Succeeded"
    conditions = kube.get(KueueWorkload, "torchjob-kq", namespace=namespace).status["conditions"]
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)  # Kueue's, left alone


def test_an_admitted_workload_an_earlier_job_of_the_name_left_never_admits_the_new_one(
        kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    """The Workload torchjob-<name> is read only when the job controls it: one left by a deleted job of
    the same name (no garbage collector runs here), admitted, admits nothing past the queue's quota."""
    data = job_data("kw", workers=2)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    create(kube, data, namespace)
    wait_for(lambda: kube.get(KueueWorkload, "torchjob-kw", namespace=namespace))
    admit(kube, "torchjob-kw", namespace, "any")
    wait_pods(kube, "kw", namespace, 3)
    kube.delete(TorchJobRes, "kw", namespace=namespace)  # its Workload stays, admitted
    for p in pods_of(kube, "kw", namespace):
        kube.delete(type(p), p.metadata.name, namespace=namespace)
    create(kube, data, namespace)
    wait_job(kube, "kw", namespace, lambda s: s.get("state") == "Suspended")
    told = wait_for(lambda: [m for r, m in events_of(kube, "kw", namespace) if r == "NotOurs"])
    assert "Workload torchjob-kw" in told[0]
    time.sleep(2)
    assert pods_of(kube, "kw", namespace) == [] and kube.get(TorchJobRes, "kw", namespace=namespace).spec[
        "runPolicy"]["suspend"] is True
    # the collector takes it: the job makes its own, which Kueue has yet to admit
    kube.delete(KueueWorkload, "torchjob-kw", namespace=namespace)
    uid = kube.get(TorchJobRes, "kw", namespace=namespace).metadata.uid
    wait_for(lambda: kube.get(KueueWorkload, "torchjob-kw", namespace=namespace).metadata.ownerReferences[0].uid
             == uid)
    assert pods_of(kube, "kw", namespace) == []


def test_suspending_a_kueue_job_deactivates_its_workload(
        kubeconfig: str, kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    data = job_data("ks", workers=2)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    create(kube, data, namespace)
    wait_for(lambda: kube.get(KueueWorkload, "torchjob-ks", namespace=namespace))
    admit(kube, "torchjob-ks", namespace, "default-flavor")  # no such ResourceFlavor: no node labels to add
    wait_pods(kube, "ks", namespace, 3)
    before = operator.reconciles()
    out = subprocess.run([sys.executable, "-m", "torchjob", "suspend", "ks", "--kube", "--kubeconfig", kubeconfig,
                          "-n", namespace], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert kube.get(KueueWorkload, "torchjob-ks", namespace=namespace)["spec"]["active"] is False
    wait_job(kube, "ks", namespace, lambda s: s.get("state") == "Suspended")
    wait_pods(kube, "ks", namespace, 0)
    operator.wait_idle(before)  # still admitted in Kueue's status, but deactivated: the operator leaves it suspended
    assert kube.get(TorchJobRes, "ks", namespace=namespace).spec["runPolicy"]["suspend"] is True


def test_a_missing_kueue_fails_a_queued_job_with_the_fix(
        kube: Client, namespace: str, operator: Operator, scheduling_crds: list[str]) -> None:
    kube.delete(CustomResourceDefinition, kueue.WORKLOAD_CRD)
    try:
        wait_for(lambda: gone(kube, CustomResourceDefinition, kueue.WORKLOAD_CRD, ""), timeout=60)
        data = job_data("nokueue", workers=1)
        data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
        create(kube, data, namespace)
        status = wait_job(kube, "nokueue", namespace, finished)
        assert status["failure"]["reason"] == "KueueUnavailable"
        assert kueue.WORKLOAD_CRD in status["failure"]["message"] and kueue.QUEUE_LABEL in status["failure"]["message"]
        assert pods_of(kube, "nokueue", namespace) == []
    finally:
        for obj in third_party_crds():
            kube.apply(obj, force=True)
        wait_established(kube, kueue.WORKLOAD_CRD)


def test_a_t9k_tensorboard_runs_as_a_deployment_and_service(kube: Client, namespace: str, operator: Operator) -> None:
    data = job_data("tb", workers=1)
    data["spec"]["tensorboard"] = {"logDirs": ["t9k://pvc/runs/tb"]}
    create(kube, data, namespace)
    deployment = wait_for(lambda: kube.get(Deployment, "tb-tensorboard", namespace=namespace))
    assert deployment.metadata.ownerReferences[0].name == "tb"
    pod = deployment.spec.template.spec
    assert pod.volumes[0].persistentVolumeClaim.claimName == "runs"
    assert "0:/tensorboard/runs/tb" in pod.containers[0].command
    svc = wait_for(lambda: kube.get(Service, "tb-tensorboard", namespace=namespace))
    assert svc.spec.ports[0].port == 6006
    assert {p.metadata.name for p in wait_pods(kube, "tb", namespace, 2)} == {"tb-master-0", "tb-worker-0"}
