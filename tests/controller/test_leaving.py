"""Pods on their way out (kube/controller/pods/leaving.py): what the job is told, what is force-deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from torchjob.api.status import Reason
from torchjob.kube.controller.pods.leaving import leaving

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


def pod(name: str, deleting: datetime | None, disrupted: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if deleting is not None:
        meta["deletionTimestamp"] = deleting.strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"phase": "Running"}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                                 "message": "Taint manager: deleting due to NoExecute taint"}]
    return {"metadata": meta, "spec": {"nodeName": "node-a"}, "status": status}


def test_a_pod_kubernetes_deletes_is_said_and_force_deleted_once_its_time_is_past() -> None:
    pods = [pod("j-master-0", NOW - timedelta(seconds=61), disrupted=True),  # stuck past 60 s
            pod("j-worker-0", NOW - timedelta(seconds=10), disrupted=True),  # due in 50 s
            pod("j-worker-1", None)]  # not leaving
    out = leaving(pods, NOW, 60)
    assert [p["metadata"]["name"] for p in out.force] == ["j-master-0"]
    assert out.recheck_at == NOW + timedelta(seconds=50)
    assert [(once, reason) for once, reason, _ in out.said] == [
        ("disrupted uid-j-master-0", Reason.POD_DISRUPTED), ("forced uid-j-master-0", Reason.FORCE_DELETED),
        ("disrupted uid-j-worker-0", Reason.POD_DISRUPTED)]
    assert out.said[0][2] == ("pod j-master-0 on node node-a is being deleted by Kubernetes: DeletionByTaintManager: "
                              "Taint manager: deleting due to NoExecute taint")
    assert out.said[1][2].startswith("pod j-master-0 on node node-a was still terminating 60 s past its grace period")


def test_a_pod_torchjob_deletes_is_not_said_until_it_is_stuck() -> None:
    out = leaving([pod("j-worker-0", NOW - timedelta(seconds=5))], NOW, 60)
    assert out.said == [] and out.force == [] and out.recheck_at == NOW + timedelta(seconds=55)


def test_many_pods_force_deleted_in_one_round_are_one_event_naming_the_count_and_the_first_few() -> None:
    """4,096 pods force-deleted were 4,096 ForceDeleted events (issue 46): describe printed 624 of them.
    Up to three a round stay an event each, as one pod's always was; more are one event, said once."""
    stuck = [pod(f"j-worker-{i}", NOW - timedelta(seconds=61)) for i in range(5)]
    out = leaving(stuck, NOW, 60)
    assert len(out.force) == 5
    [(keys, reason, message)] = out.events(set())
    assert reason == Reason.FORCE_DELETED and keys == [f"forced uid-j-worker-{i}" for i in range(5)]
    assert message == ("5 pods (j-worker-0 on node node-a, j-worker-1 on node node-a, j-worker-2 on node node-a and "
                       "2 more) were still terminating 60 s past their grace period (no kubelet confirmed their end: "
                       "are their nodes lost?): force-deleted")
    assert out.events(set(keys)) == []  # told: not again
    few = leaving(stuck[:3], NOW, 60).events({"forced uid-j-worker-0"})  # two left: an event each, as before
    assert [(k, m.split(" was ")[0]) for k, _, m in few] == [
        (["forced uid-j-worker-1"], "pod j-worker-1 on node node-a"),
        (["forced uid-j-worker-2"], "pod j-worker-2 on node node-a")]
    disrupted = leaving([pod(f"j-worker-{i}", NOW, disrupted=True) for i in range(4)], NOW, 60).events(set())
    assert [(len(k), r) for k, r, _ in disrupted] == [(4, Reason.POD_DISRUPTED)]
    assert disrupted[0][2].startswith("4 pods (j-worker-0 on node node-a, ") and disrupted[0][2].endswith(
        "and 1 more) are being deleted by Kubernetes: DeletionByTaintManager: Taint manager: deleting due to "
        "NoExecute taint")
