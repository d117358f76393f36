"""A job whose pods no node fits says so in its own status: the dev cluster's real kube-scheduler
finds no node for the pods of a TorchJob and of a TrainJob (their node selector names a pool that has
no node yet) and writes each pod's PodScheduled False/Unschedulable condition; the operator (a
process) turns that into the job's Scheduled condition, False with reason WaitingForNode and the
scheduler's words, and a Warning event, shown by `describe --kube`, the dashboard's job data, the
TrainJob's status and the Kubeflow SDK's events; once a node of the pool is there (a KWOK node,
which runs the pods) the condition goes and the jobs run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.generic_resource import get_generic_resource
from lightkube.resources.core_v1 import Event, Pod

from tests.jobs import job_data
from tests.kube.conftest import job_status, wait_job
from tests.kube.test_big_job import fake_node
from tests.kube.test_operator import create
from tests.kube.test_served_kinds_clientside import torchjob, wait_for
from tests.kube.test_trainjob_api import (  # noqa: F401 (fixtures used here)
    condition,
    events_of,
    sdk,
    trainer_api,
    trainer_operator,
    wait_trainjob,
)
from torchjob.connect import Target
from torchjob.kube.machinery.client import TorchJobRes, TrainJobRes
from torchjob.ui.source import Source

pytestmark = pytest.mark.kube
pytest.importorskip("kubeflow.trainer")
NodeG = get_generic_resource("v1", "Node")


@pytest.fixture
def pool() -> str:
    return uuid.uuid4().hex[:8]


def placed(mark: str) -> dict[str, Any]:
    """A pod spec's placement on the test's pool (its nodes labelled and tainted torchjob.dev/test-nodes=mark)."""
    return {"nodeSelector": {"torchjob.dev/test-nodes": mark},
            "tolerations": [{"key": "torchjob.dev/test-nodes", "operator": "Exists"}]}


def said(kube: Client, name: str, namespace: str) -> str:
    """The scheduler's words on the pod `name`, once it has tried it."""
    def words() -> str | None:
        found = [p for p in kube.list(Pod, namespace=namespace) if p.metadata.name == name]
        conds = (found[0].status.conditions or []) if found and found[0].status else []
        return next((c.message for c in conds if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)
    return str(wait_for(f"the scheduler's words on {name}", words))


def waiting(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Scheduled"), None)


@pytest.fixture
def cleanup(kube: Client, namespace: str) -> Iterator[list[str]]:
    nodes: list[str] = []
    yield nodes
    # no garbage collector in this cluster: the jobs, then their pods with grace 0, before their node
    for res, name in ((TorchJobRes, "wn"), (TrainJobRes, "wt")):
        kube.delete(res, name, namespace=namespace)
    kube.deletecollection(Pod, namespace=namespace, grace_period=0)
    for n in nodes:
        kube.delete(NodeG, n)


@pytest.mark.usefixtures("trainer_operator")
def test_jobs_no_node_fits_say_they_wait_for_a_node_until_one_is_there(
        kube: Client, kubeconfig: str, namespace: str, pool: str, cleanup: list[str]) -> None:
    data = job_data("wn", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["metadata"] = {"annotations": {"torchjob.dev/wait-for-master": "false"}}
        rspec["template"]["spec"].update(placed(pool))
    create(kube, data, namespace)
    patch = {"manager": "example.com/placement", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": placed(pool)}}}}]}}}}
    kube.create(codecs.from_dict({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "wt", "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "command": ["torchrun",
                 "train.py"]}, "runtimePatches": [patch]}}), namespace=namespace)

    # the TorchJob: its condition has the scheduler's own words, and which replicas wait
    words = said(kube, "wn-worker-0", namespace)
    assert words.startswith("0/") and "nodes are available" in words, words
    both = f"master-0, worker-0 wait for a node: {said(kube, 'wn-master-0', namespace)}"
    # (the scheduler tries one pod, then the other: the message follows)
    status = wait_job(kube, "wn", namespace, lambda s: (waiting(s) or {}).get("message") == both)
    cond = waiting(status)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "WaitingForNode")
    assert status["state"] == "Created"
    described = torchjob(kubeconfig, "describe", "wn", "-n", namespace)
    assert described.returncode == 0, described.stderr
    line = next(ln for ln in described.stdout.splitlines() if ln.startswith("  Scheduled "))
    assert line.split()[:3] == ["Scheduled", "False", "WaitingForNode"] and line.endswith(cond["message"]), line
    page = Source(Target(kube=True, kubeconfig=kubeconfig, namespace=namespace)).job(namespace, "wn")
    assert {"type": "Scheduled", "status": "False", "reason": "WaitingForNode", "message": cond["message"]}.items() \
        <= next(c for c in page["conditions"] if c["type"] == "Scheduled").items()
    warned = [e for e in kube.list(Event, namespace=namespace)
              if e.involvedObject.kind == "TorchJob" and e.reason == "WaitingForNode"]
    assert [e.type for e in warned] == ["Warning"] and warned[0].message.endswith(f"for a node: {words}")  # once

    # the TrainJob: the condition in Trainer's shape, the event in the SDK's view, which says Created
    # (its two nodes by torchjob's replica names, as its status.torchjob and describe name them)
    tj = wait_trainjob(kube, "wt", namespace, lambda s: (condition(s, "Scheduled") or {}).get(
        "message", "").startswith("master-0, worker-0 wait for a node: 0/"))["status"]
    scheduled = condition(tj, "Scheduled")
    assert scheduled is not None and (scheduled["status"], scheduled["reason"]) == ("False", "WaitingForNode")
    client = sdk(kubeconfig, namespace)
    assert client.get_job("wt").status == "Created"
    events = wait_for("the SDK's WaitingForNode event", lambda: [
        e for e in client.get_job_events("wt") if e.reason == "WaitingForNode"])
    assert [e.involved_object_kind for e in events] == ["TrainJob"] and "for a node: 0/" in events[0].message
    assert events_of(kube, "wt", namespace)

    # a node of the pool comes: the scheduler binds the pods there, KWOK runs them, the condition goes
    node = f"wn-{pool}"
    kube.create(NodeG.from_dict(fake_node(node, pool)))
    cleanup.append(node)
    status = wait_job(kube, "wn", namespace, lambda s: s.get("state") == "Running" and waiting(s) is None)
    assert all(p.spec.nodeName == node for p in kube.list(Pod, namespace=namespace))
    described = torchjob(kubeconfig, "describe", "wn", "-n", namespace)
    assert "WaitingForNode" not in described.stdout.split("Conditions:")[1].split("Events:")[0], described.stdout
    wait_trainjob(kube, "wt", namespace, lambda s: not s.get("conditions"))
    wait_for("the SDK's Running", lambda: client.get_job("wt").status == "Running")
    assert job_status(kube, "wn", namespace)["conditions"][-1]["type"] == "Running"
