"""A node that dies while a job trains on it: its kubelet is SIGKILLed and stays down. The node
controller marks the node NotReady and taints it; torchjob's pods tolerate a lost node for 30 s
(kube/objects/pods.py: node_lost_tolerations), then the taint eviction deletes them, and the
operator force-deletes them once they are stuck terminating past their deletion time plus
--force-delete-after (no kubelet is left to confirm it), so the job's pods are made again: the job
does not hang on a dead node. When the kubelet comes back the new pods run and the job succeeds.

The bound, from the kubelet's death to the old pods gone and new ones made:
    node-monitor-grace-period (50 s, Kubernetes' default)  + the node monitor's period (5 s)
  + the pods' toleration of the taint (30 s)               + their grace period (1 s here)
  + --force-delete-after (60 s, the operator's default)    + a round of reconciling,
about 150 s, asserted within 210 s on this shared machine. With Kubernetes' default toleration
(300 s) and no force-delete, the pods would sit Terminating until the node came back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node

from tests.e2e.conftest import STATE, pods, running_container, status_of, torchjob, wait_for
from tests.e2e.daemons import kill_daemon, start_daemon
from tests.e2e.test_real_pods import conditions, job_file
from tests.jobs import job_data

pytestmark = pytest.mark.kube

BOUND_S = 210


def node_ready(node: Client) -> str:
    (n,) = list(node.list(Node))
    return next((c.status for c in (n.status.conditions or []) if c.type == "Ready"), "?") if n.status else "?"


@pytest.mark.timeout(900)
def test_a_job_on_a_node_whose_kubelet_dies_is_not_left_hanging(node_kubeconfig: str, node: Client, ns: str,
                                                                 tmp_path: Path) -> None:
    data = job_data("lost", workers=1, restart_policy="OnFailure",
                    command=("python", "/opt/tests/ddp_step.py", "--sleep", "20"), restart_scope=None)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    data["spec"]["runPolicy"] = {"backoffLimit": 3}
    assert torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns).returncode == 0
    wait_for("both pods running", lambda: len([p for p in pods(node, "lost", ns) if running_container(p)]) == 2)
    before = {p.metadata.name: p.metadata.uid for p in pods(node, "lost", ns)}
    tolerated = {t.key: t.tolerationSeconds for t in pods(node, "lost", ns)[0].spec.tolerations or []}
    assert tolerated["node.kubernetes.io/unreachable"] == 30, tolerated

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
