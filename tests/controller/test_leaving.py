"""Pods on their way out (kube/controller/leaving.py): what the job is told, what is force-deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from torchjob.api.status import Reason
from torchjob.kube.controller.leaving import leaving

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
