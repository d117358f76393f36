"""Issue 43, item 8, as the operator observes it (pure: pods as dicts): a worker pod that failed after
every rank's latest progress report said 100 % waits for the master, whose success ends the job
Succeeded without a restart (core/round/reconcile.py, _died_after_done); the operator's books say which
replica attempts reported done (observe's `reported_done`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import reconcile
from torchjob.core.shape.topology import replicas
from torchjob.kube.controller.round.observe import observe
from torchjob.kube.objects.workload import pods as pod_objects

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ended(pod: dict[str, Any], code: int, at: datetime) -> dict[str, Any]:
    pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
        {"name": "pytorch", "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                    "finishedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ")}}}]}
    return pod


def test_a_worker_pod_failing_after_every_rank_reported_done_waits_for_the_master() -> None:
    job = job_from_data(job_data("td", workers=1, restart_policy="OnFailure", restart_scope=None,
                                 run_policy={"backoffLimit": 3}))
    job = job.model_copy(update={"status": reconcile(job, observe(job, []), NOW).status})
    master, worker = (pod_objects.pod(job, rid, 0) for rid in replicas(job))
    master["status"] = {"phase": "Running"}
    ended(worker, 134, NOW + timedelta(seconds=5))
    for done, restarts in ((False, 1), (True, 0)):
        plan = reconcile(job, observe(job, [master, worker], reported_done=lambda r, a, d=done: d),
                         NOW + timedelta(seconds=6))
        assert plan.status.restartCount == restarts, done
    job = job.model_copy(update={"status": plan.status})
    ended(master, 0, NOW + timedelta(seconds=7))
    plan = reconcile(job, observe(job, [master, worker], reported_done=lambda r, a: True), NOW + timedelta(seconds=7))
    assert plan.status.is_true(ConditionType.SUCCEEDED) and plan.status.restartCount == 0
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["FailedAfterDone"]
