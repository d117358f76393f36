"""What a round of a job of thousands of replicas costs (issue 46): core.reconcile copies a replica's state only
to change it (the status is copied deep but for them: a deep copy of each was half of a 4,096-replica round's
CPU, a shallow copy of each still most of it) and does not make the list of replicas again each time it is asked
(five times a round); the observed status is still left as it was, whatever the round decides."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.status import ReplicaAttemptState
from torchjob.core.round.reconcile import Observed, Phase, World, reconcile
from torchjob.core.shape.topology import replicas

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def running(workers: int) -> tuple[Any, World]:
    job = job_from_data(job_data("big", workers=workers, restart_policy="OnFailure", restart_scope=None))
    world = World(replicas={r.name: Observed(r, 0, Phase.RUNNING) for r in replicas(job)})
    job = job.model_copy(update={"status": reconcile(job, world, NOW).status})
    return job, world


def test_a_round_copies_no_replica_state_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    job, world = running(1023)
    deep = [0]

    def counted(self: ReplicaAttemptState, memo: dict[int, Any] | None = None) -> ReplicaAttemptState:
        deep[0] += 1
        return self.model_copy()

    monkeypatch.setattr(ReplicaAttemptState, "__deepcopy__", counted, raising=False)
    reconcile(job, world, NOW)
    assert deep[0] == 0  # 1,024 before


def test_a_round_that_changes_no_replica_copies_none_and_a_restart_copies_each_it_restarts_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    job, world = running(1023)
    copied: list[int] = []
    copy_state = ReplicaAttemptState.model_copy

    def counted(self: ReplicaAttemptState, **kwargs: Any) -> ReplicaAttemptState:
        copied.append(self.attempt)
        return copy_state(self, **kwargs)

    monkeypatch.setattr(ReplicaAttemptState, "model_copy", counted)
    assert reconcile(job, world, NOW).status.replicas == job.status.replicas and copied == []
    failed = world.replicas["worker-3"]
    world.replicas["worker-3"] = Observed(failed.replica, 0, Phase.FAILED, exit_code=1, finished_at=NOW)
    plan = reconcile(job, world, NOW)
    assert plan.status.restartCount == 1 and len(copied) == 1024  # the gang restarted: each state copied once
    assert all(s is not job.status.replicas[n] and s.attempt == 1 for n, s in plan.status.replicas.items())


def test_the_replicas_of_a_shape_are_made_once() -> None:
    job, _ = running(1023)
    first, again = replicas(job), replicas(job)
    assert first == again and all(a is b for a, b in zip(first, again, strict=True))
    assert first is not again  # each caller's own list
    assert [r.name for r in first[:3]] == ["master-0", "worker-0", "worker-1"] and len(first) == 1024


def test_the_observed_status_is_left_as_it_was_by_a_round_that_restarts_the_gang() -> None:
    job, world = running(7)
    before = copy.deepcopy(job.status)
    failed = world.replicas["worker-3"]
    world.replicas["worker-3"] = Observed(failed.replica, 0, Phase.FAILED, exit_code=1, finished_at=NOW)
    plan = reconcile(job, world, NOW)
    assert job.status == before  # the round's changes are its plan's
    assert plan.status.restartCount == 1 and plan.status.replicas["worker-3"].attempt == 1
    assert plan.status.replicas["worker-3"] is not job.status.replicas["worker-3"]
