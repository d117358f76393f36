"""What goes wrong on a real cluster: an expired watch (410 Gone after a kube-apiserver restart),
and names that are already taken (409 Conflict) by an earlier job's pods."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import pytest
from lightkube import Client
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Binding, Event, Pod, Service

from tests.jobs import job_data
from tests.kube.conftest import REPO, Operator, job_status, set_pod, wait_job
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import Api, TorchJobRes, connect
from torchjob.kube.machinery.informer import Informer

pytestmark = pytest.mark.kube


def expire_watches(kubeconfig: str) -> None:
    """Make every resourceVersion handed out so far too old to watch from: restart kube-apiserver
    (its watch cache starts anew) and compact etcd's history (nothing older is left to serve)."""
    state = Path(kubeconfig).parent  # scripts/dev-cluster.sh keeps the kubeconfig in its state dir
    if not (state / "kube-apiserver.cmdline").exists():
        pytest.skip("the control plane was not started by scripts/dev-cluster.sh; cannot restart its apiserver")
    out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "restart-apiserver"], capture_output=True,
                         text=True, timeout=180, env={**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(state)})
    assert out.returncode == 0, out.stderr
    etcd = f"http://127.0.0.1:{(state / 'etcd.port').read_text().strip()}"  # etcd's JSON gateway

    def post(path: str, body: dict[str, object]) -> dict[str, Any]:
        req = urllib.request.Request(f"{etcd}{path}", json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            data: dict[str, Any] = json.load(resp)
            return data

    revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


def test_an_expired_watch_gets_410_and_relists(
        kubeconfig: str, kube: Client, namespace: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> set[str]:
        api = Api(connect(kubeconfig))
        seen: set[str] = set()
        informer = Informer(api, "Service", namespace, lambda o: seen.add(o["metadata"]["name"]))
        _, rv = await api.list("Service", namespace)  # where a watch that lost its connection resumes
        kube.create(Service(metadata=ObjectMeta(name="after-restart", namespace=namespace),
                            spec={"ports": [{"port": 80}]}))
        expire_watches(kubeconfig)
        task = asyncio.create_task(informer.watch_from(rv))
        try:
            for _ in range(200):
                if (namespace, "after-restart") in informer.cache:
                    break
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await api.client.close()
        return seen

    with caplog.at_level(logging.INFO, logger="torchjob.kube"):
        seen = asyncio.run(scenario())
    assert "after-restart" in seen
    assert any("watch ended (410)" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_job_recreated_under_the_same_name_replaces_the_earlier_pods(
        kube: Client, namespace: str, operator: Operator) -> None:
    create(kube, job_data("again", workers=2), namespace)
    first = {p.metadata.name: p.metadata.uid for p in wait_pods(kube, "again", namespace, 3)}
    kube.delete(TorchJobRes, "again", namespace=namespace)  # no garbage collector runs here: the pods stay
    create(kube, job_data("again", workers=2), namespace)
    uid = kube.get(TorchJobRes, "again", namespace=namespace).metadata.uid
    for _ in range(300):
        pods = pods_of(kube, "again", namespace)
        if len(pods) == 3 and all(p.metadata.ownerReferences[0].uid == uid for p in pods):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"pods not replaced: {[(p.metadata.name, p.metadata.ownerReferences) for p in pods]}")
    assert sorted(p.metadata.name for p in pods) == sorted(first)  # same names, no duplicate
    assert not {p.metadata.uid for p in pods} & set(first.values())  # new pods, not the earlier job's
    # A name an earlier job of this name still holds is waited for: no reconcile of this job failed
    # (the operator is shared: other tests' jobs may log their own).
    assert f"reconcile {namespace}/again failed" not in operator.log.read_text()


def test_a_pod_labelled_as_the_jobs_that_it_did_not_make_is_left_alone_and_said(
        kube: Client, namespace: str, operator: Operator) -> None:
    bystander = Pod.from_dict({"metadata": {"name": "bystander", "namespace": namespace,
                                            "labels": {"torchjob.dev/job-name": "left"}},
                               "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
    kube.create(bystander)
    create(kube, job_data("left", workers=1), namespace)
    pods = wait_pods(kube, "left", namespace, 3)  # the job's two, and the bystander (labelled as the job's)
    assert sorted(p.metadata.name for p in pods) == ["bystander", "left-master-0", "left-worker-0"]
    for _ in range(100):
        events = [e.message for e in kube.list(Event, namespace=namespace, fields={"involvedObject.name": "left"})
                  if e.reason == "NotOurs"]
        if events:
            break
        time.sleep(0.1)
    assert events and "pod bystander" in events[0] and "left alone" in events[0]
    pod = kube.get(Pod, "bystander", namespace=namespace)
    assert pod.metadata.deletionTimestamp is None  # not deleted (it was, with grace 0, before)


def test_a_pod_deleted_under_a_running_job_is_an_eviction_its_policy_acts_on(
        kube: Client, namespace: str, operator: Operator) -> None:
    data = job_data("drain", workers=2, restart_policy="Never")
    data["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]
    create(kube, data, namespace)
    for p in wait_pods(kube, "drain", namespace, 3):
        set_pod(kube, p, "Running")
    wait_job(kube, "drain", namespace, lambda s: s.get("state") == "Running")
    kube.delete(Pod, "drain-worker-1", namespace=namespace)  # a drain, or kubectl delete pod
    for _ in range(300):
        pods = pods_of(kube, "drain", namespace)
        if len(pods) == 3 and {p.metadata.annotations["torchjob.dev/attempt"] for p in pods} == {"1"}:
            break
        time.sleep(0.1)
    else:
        raise AssertionError([(p.metadata.name, p.metadata.annotations) for p in pods_of(kube, "drain", namespace)])
    assert job_status(kube, "drain", namespace)["restartCount"] == 1


def wait_made_again(kube: Client, job: str, namespace: str, n: int, pod: str, old_uid: str,
                    log: Path | None = None) -> dict[str, Any]:
    """The job's n pods by name, once `pod` is a new object (not `old_uid`); fails after 30 s."""
    for _ in range(300):
        pods = {p.metadata.name: p for p in pods_of(kube, job, namespace)}
        if len(pods) == n and pods[pod].metadata.uid != old_uid:
            return pods
        time.sleep(0.1)
    raise AssertionError(f"{pod} was not made again" + (f":\n{log.read_text()[-2000:]}" if log else ""))


def test_without_a_policy_a_deleted_pod_is_made_again_uncounted(kube: Client, namespace: str,
                                                                operator: Operator) -> None:
    create(kube, job_data("del", workers=1, restart_policy="Never"), namespace)
    before = {p.metadata.name: p.metadata.uid for p in wait_pods(kube, "del", namespace, 2)}
    kube.delete(Pod, "del-worker-0", namespace=namespace)
    pods = wait_made_again(kube, "del", namespace, 2, "del-worker-0", before["del-worker-0"])
    assert pods["del-worker-0"].metadata.annotations["torchjob.dev/attempt"] == "0"
    assert pods["del-master-0"].metadata.uid == before["del-master-0"]
    status = job_status(kube, "del", namespace)
    assert status["restartCount"] == 0 and status["state"] != "Failed"


def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted_and_made_again(
        kubeconfig: str, kube: Client, namespace: str, tmp_path: Path) -> None:
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect", "--force-delete-after", "2"))
    op.start()
    try:
        create(kube, job_data("lost", workers=1), namespace)
        before = {p.metadata.name: p.metadata.uid for p in wait_pods(kube, "lost", namespace, 2)}
        # Bound to a node with no kubelet (nothing will ever confirm the pod's end), then deleted
        # gracefully: the API server keeps it, terminating, as it does for a pod on a node that died.
        bind = Binding(metadata=ObjectMeta(name="lost-worker-0"), target=ObjectReference(kind="Node", name="lost-node"))
        with contextlib.suppress(msgspec.ValidationError):  # bound; lightkube reads the answer as a Binding
            kube.create(bind, namespace=namespace)
        assert kube.get(Pod, "lost-worker-0", namespace=namespace).spec.nodeName == "lost-node"
        # as the taint eviction controller does when the node's NoExecute taint outlives the toleration
        kube.patch(Pod.Status, "lost-worker-0", {"status": {"conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "message": "Taint manager: deleting due to NoExecute taint"}]}}, namespace=namespace)
        kube.delete(Pod, "lost-worker-0", namespace=namespace, grace_period=1)
        assert kube.get(Pod, "lost-worker-0", namespace=namespace).metadata.deletionTimestamp  # stuck
        pods = wait_made_again(kube, "lost", namespace, 2, "lost-worker-0", before["lost-worker-0"], op.log)
        assert "force-deleting lost-worker-0" in op.log.read_text()
        assert pods["lost-master-0"].metadata.uid == before["lost-master-0"]
        said = {}
        for _ in range(100):
            said = {e.reason: e.message for e in kube.list(Event, namespace=namespace,
                                                            fields={"involvedObject.name": "lost"})}
            if {"PodDisrupted", "ForceDeleted"} <= said.keys():
                break
            time.sleep(0.1)
        assert said.get("PodDisrupted") == ("pod lost-worker-0 on node lost-node is being deleted by Kubernetes: "
                                            "DeletionByTaintManager: Taint manager: deleting due to NoExecute taint")
        assert said.get("ForceDeleted", "").startswith("pod lost-worker-0 on node lost-node was still terminating 2 s"
                                                       " past its grace period"), said
    finally:
        op.stop()
