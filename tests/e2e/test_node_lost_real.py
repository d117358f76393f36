"""A node that dies while a job trains on it: its kubelet is SIGKILLed and stays down. The node
controller marks the node NotReady and taints it; torchjob's pods tolerate a lost node for 30 s
(kube/objects/workload/pods.py: node_lost_tolerations), then the taint eviction deletes them, and the
operator force-deletes them once they are stuck terminating past their deletion time plus
--force-delete-after (no kubelet is left to confirm it), so the job's pods are made again: the job
does not hang on a dead node. When the kubelet comes back the new pods run and the job succeeds.

The bound, from the kubelet's death to the old pods gone and new ones made:
    node-monitor-grace-period (50 s, Kubernetes' default)  + the node monitor's period (5 s)
  + the pods' toleration of the taint                      + their grace period
  + --force-delete-after                                   + a round of reconciling.
With torchjob's defaults (a 30 s toleration, the pod's 30 s grace, 60 s) that is about 175 s: the
job's own toleration (5 s), grace (1 s) and an operator with --force-delete-after 10 keep this test
at about 75 s, asserted within 120 s on this shared machine (the defaults' pods carry the 30 s
toleration: tests/kube/test_render.py). With Kubernetes' default toleration (300 s) and no
force-delete, the pods would sit Terminating until the node came back.

A second node stays healthy meanwhile: a Node object whose heartbeat (its Lease in
kube-node-lease, its Ready condition) this test keeps, as KWOK keeps its fake nodes' and a kubelet
its own. Without it the node controller would see every node of the cluster down and, as
Kubernetes does then (full disruption: it blames the control plane's network), evict nothing. It is
tainted NoSchedule: nothing lands on it."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import NodeSpec, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from tests.e2e.conftest import HOST, INIT_IMAGE, STATE, pods, running_container, status_of, torchjob, wait_for
from tests.e2e.daemons import kill_daemon, start_daemon
from tests.e2e.test_real_pods import conditions, job_file
from tests.jobs import job_data
from tests.kube.conftest import Operator

pytestmark = pytest.mark.kube

BOUND_S = 120
TOLERATION_S = 5
FORCE_DELETE_AFTER_S = 10
REAL_NODE = "real-node-0"
STANDBY = "standby-node-0"


def node_ready(node: Client, name: str = REAL_NODE) -> str:
    n = node.get(Node, name)
    return next((c.status for c in (n.status.conditions or []) if c.type == "Ready"), "?") if n.status else "?"


def heartbeat(node: Client) -> None:
    now = datetime.now(UTC)
    node.patch(Lease, STANDBY, {"spec": {"renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}},
               namespace="kube-node-lease")
    node.patch(Node.Status, STANDBY, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kept by the test",
         "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
         "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")}]}})


@pytest.fixture
def standby(node: Client) -> Iterator[str]:
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            try:
                heartbeat(node)
            except Exception as e:  # the API server busy for a moment: the next beat is in 5 s
                print(f"standby heartbeat: {e}")
            stop.wait(5)

    beats = threading.Thread(target=beat, daemon=True)
    try:
        node.create(Node(metadata=ObjectMeta(name=STANDBY, labels={"kubernetes.io/hostname": STANDBY}),
                         spec=NodeSpec(taints=[Taint(key="torchjob.dev/standby", value="test", effect="NoSchedule")])))
        node.create(Lease(metadata=ObjectMeta(name=STANDBY, namespace="kube-node-lease"),
                          spec=LeaseSpec(holderIdentity=STANDBY, leaseDurationSeconds=40)))
        heartbeat(node)
        beats.start()
        wait_for("the standby node Ready", lambda: node_ready(node, STANDBY) == "True", timeout=30)
        yield STANDBY
    finally:
        stop.set()
        if beats.is_alive():
            beats.join(timeout=10)
        for res, namespace in ((Node, None), (Lease, "kube-node-lease")):
            try:
                node.delete(res, STANDBY, namespace=namespace)
            except ApiError as e:
                if e.status.code != 404:
                    raise


@pytest.fixture
def operator(node_kubeconfig: str, node_operator: Operator, tmp_path: Path) -> Iterator[Operator]:
    """The suite's operator, with --force-delete-after 10 for this test (stopped, and started again after)."""
    node_operator.stop()
    op = Operator(node_kubeconfig, tmp_path / "operator.log",
                  ("--no-leader-elect", "--init-image", INIT_IMAGE, "--force-delete-after", str(FORCE_DELETE_AFTER_S)),
                  progress_host=HOST)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(op.log.read_text()[-3000:])
        node_operator.start()


@pytest.mark.timeout(900)
def test_a_job_on_a_node_whose_kubelet_dies_is_not_left_hanging(node_kubeconfig: str, node: Client, ns: str,
                                                                 standby: str, operator: Operator,
                                                                 tmp_path: Path) -> None:
    data = job_data("lost", workers=1, restart_policy="OnFailure",
                    command=("python", "/opt/tests/ddp_step.py", "--sleep", "20"), restart_scope=None)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["terminationGracePeriodSeconds"] = 1
        rspec["template"]["spec"]["tolerations"] = [  # the template's own toleration wins over torchjob's 30 s
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": TOLERATION_S}]
    data["spec"]["runPolicy"] = {"backoffLimit": 3}
    assert torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns).returncode == 0
    wait_for("both pods running", lambda: len([p for p in pods(node, "lost", ns) if running_container(p)]) == 2)
    before = {p.metadata.name: p.metadata.uid for p in pods(node, "lost", ns)}
    tolerated = {t.key: t.tolerationSeconds for t in pods(node, "lost", ns)[0].spec.tolerations or []}
    assert tolerated["node.kubernetes.io/unreachable"] == TOLERATION_S, tolerated
    assert tolerated["node.kubernetes.io/not-ready"] == 30, tolerated  # torchjob's, where the template has none

    killed = time.monotonic()
    kill_daemon(STATE, "kubelet")
    try:
        wait_for("the node NotReady", lambda: node_ready(node) != "True", timeout=120, every=1)
        not_ready = time.monotonic() - killed

        def replaced() -> bool:
            now = {p.metadata.name: p.metadata.uid for p in pods(node, "lost", ns)}
            return set(now) == set(before) and not set(now.values()) & set(before.values())

        wait_for("the job's pods made again", replaced, timeout=BOUND_S - (time.monotonic() - killed), every=1)
        made_again = time.monotonic() - killed
        assert not {"Succeeded", "Failed"} & conditions(status_of(node, "lost", ns)).keys()
    finally:
        start_daemon(STATE, "kubelet")
    wait_for("the node Ready again", lambda: node_ready(node) == "True", timeout=120, every=1)
    done = wait_for("the job to end", lambda: {"Succeeded", "Failed"} & conditions(status_of(node, "lost", ns)).keys(),
                    timeout=240, every=1)
    status = status_of(node, "lost", ns)
    assert done == {"Succeeded"}, status
    print(f"kubelet SIGKILLed: node NotReady after {not_ready:.0f} s, the job's pods made again after "
          f"{made_again:.0f} s (bound {BOUND_S} s), succeeded {time.monotonic() - killed:.0f} s after the kill; "
          f"restartCount {status.get('restartCount')}")
    described = torchjob(node_kubeconfig, "describe", "lost", "-n", ns)
    print(described.stdout[-3000:])
    assert described.returncode == 0
    # what happened is on the job, not only in the operator's log
    assert re.search(r"PodDisrupted +pod lost-master-0 on node real-node-0 is being deleted by Kubernetes: "
                     r"DeletionByTaintManager", described.stdout), described.stdout
    assert re.search(r"ForceDeleted +pod lost-master-0 on node real-node-0 was still terminating 10 s past",
                     described.stdout), described.stdout
