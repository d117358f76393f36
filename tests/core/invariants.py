"""Checks that hold after every reconcile, whatever the job and whatever happened."""

from __future__ import annotations

import copy
from datetime import datetime

from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import Create, Plan, World, reconcile


def check_idempotent(job: TorchJob, world: World, now: datetime, plan: Plan) -> None:
    """The same inputs give the same plan; feeding the new status back with the same world
    changes nothing that was decided (no restart is counted twice). A round leaves the status it observed as it
    was: the operator hands a big job's rounds one parsed status, shallow-copied (JobMemory.status)."""
    observed = copy.deepcopy(job.status)
    again = reconcile(job, world, now)
    assert job.status == observed, "the round changed the status it observed"
    assert again.actions == plan.actions
    assert again.status == plan.status
    assert again.events == plan.events
    assert (again.requeue_at, again.done) == (plan.requeue_at, plan.done)

    fed = job.model_copy(update={"status": plan.status})
    replay = reconcile(fed, world, now)
    assert replay.status == plan.status
    assert not any(e.reason == "Restarting" for e in replay.events)
    creates = {a for a in plan.actions if isinstance(a, Create)}
    assert {a for a in replay.actions if isinstance(a, Create)} <= creates


def check_status(job: TorchJob, world: World, now: datetime, plan: Plan) -> None:
    """Invariants of one new status, given the job's previous status."""
    before = job.status
    status = plan.status
    limit = job.run_policy.backoffLimit
    if limit is not None:
        assert status.restartCount <= limit
    assert status.restartCount >= (before.restartCount if before else 0)
    # one RestartJob/RestartTask is one restart of the job but restarts several replicas
    assert status.restartCount <= sum(r.restarts for r in status.replicas.values())
    assert not (status.is_true(ConditionType.RUNNING) and status.is_true(ConditionType.RESTARTING))
    assert not (status.is_true(ConditionType.SUCCEEDED) and status.is_true(ConditionType.FAILED))
    if status.finished:
        assert status.completionTime is not None
        assert not status.is_true(ConditionType.RUNNING) and not status.is_true(ConditionType.RESTARTING)
    if status.is_true(ConditionType.FAILED):
        assert status.failure is not None
        assert status.failure.reason == status.condition(ConditionType.FAILED).reason  # type: ignore[union-attr]
    if before is not None and before.finished:
        # a finished job stays what it was
        assert status.state == before.state
        assert status.failure == before.failure
        assert status.completionTime == before.completionTime
        assert status.restartCount == before.restartCount
        assert status.conditions == before.conditions


def check_all(job: TorchJob, world: World, now: datetime, plan: Plan) -> None:
    check_status(job, world, now, plan)
    check_idempotent(job, world, now, plan)
