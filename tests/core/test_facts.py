"""Facts a runtime learns, decided in core: a replica deleted by someone else (an eviction or simply
missing), a refusal, a lost runner. One observed world at a time."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.core.sim import Driver, at, running, up, world
from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.reconcile import Abandon, Create, Forget, Observed, Phase, Refusal, Stop, World, evicted
from torchjob.core.topology import ReplicaId

M0, W0 = ReplicaId("Master", 0), ReplicaId("Worker", 0)
EVICTED_RESTARTS = [{"event": "PodEvicted", "action": "RestartJob"}]


def job(policies: list[dict[str, Any]] | None = None) -> TorchJob:
    data = job_data("facts", workers=1, restart_policy="Never")
    if policies:
        data["spec"]["policies"] = policies
    return job_from_data(data)


def gone(obs: Observed, t: float = 1.0) -> Observed:
    """`obs` deleted by someone else and gone: its last state, as the runtime kept it."""
    return dataclasses.replace(obs, deleted=True, finished_at=at(t))


def going(obs: Observed) -> Observed:
    """`obs` deleted by someone else, still going away."""
    return dataclasses.replace(obs, deleted=True, stopping=True)


def test_a_deleted_replica_with_a_policy_is_an_eviction_the_policy_acts_on() -> None:
    d, _ = running(job(EVICTED_RESTARTS))
    assert evicted(d.job, gone(up(W0)))
    plan = d(world(up(M0), gone(up(W0))), 2)
    assert d.status.restartCount == 1 and d.status.replicas["worker-0"].attempt == 1
    assert Stop(M0, 0, "restarted by RestartJob") in plan.actions
    assert Forget(W0, 0) in plan.actions and Create(W0, 1) in plan.actions  # gone: its name is free
    assert "worker-0 failed with an unknown exit code, Evicted" in plan.events[0].message


def test_an_eviction_counts_while_the_replica_is_still_going() -> None:
    d, _ = running(job([{"event": "*", "action": "AbortJob"}]))
    d(world(up(M0), going(up(W0))), 2)
    assert d.status.state == "Failed" and d.status.failure is not None
    assert (d.status.failure.reason, d.status.failure.replica) == ("Aborted", "worker-0")


def test_without_a_policy_a_deleted_replica_is_waited_for_then_made_again() -> None:
    d, _ = running(job())
    assert not evicted(d.job, gone(up(W0)))
    plan = d(world(up(M0), going(up(W0))), 1)
    assert plan.actions == []  # still going: its name is taken
    plan = d(world(up(M0), gone(up(W0))), 2)
    assert plan.actions == [Create(W0, 0)]
    assert d.status.restartCount == 0 and not d.status.finished


def test_a_deletion_is_no_eviction_when_the_job_is_suspended_or_the_attempt_stale() -> None:
    d, w = running(job(EVICTED_RESTARTS))
    d.with_spec(suspend=True)
    d(w, 1)
    assert d.status.state == "Suspended"
    assert not evicted(d.job, going(up(W0)))
    d2, _ = running(job(EVICTED_RESTARTS))
    d2.job.status.replicas["worker-0"].attempt = 1  # type: ignore[union-attr]
    assert not evicted(d2.job, gone(up(W0)))


def test_a_refusal_fails_the_job_once_and_a_finished_job_ignores_it() -> None:
    d, w = running(job())
    why = "a pod of this job is invalid: spec.x"
    refused = dataclasses.replace(w, refused=Refusal("InvalidSpec", why))
    plan = d(refused, 1)
    assert d.status.state == "Failed" and d.status.failure is not None
    assert (d.status.failure.reason, d.status.failure.message) == ("InvalidSpec", why)
    assert sorted(a.replica.name for a in plan.actions if isinstance(a, Stop)) == ["master-0", "worker-0"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidSpec")]
    later = dataclasses.replace(refused, refused=Refusal("PodGroupUnavailable", "gone"))
    again = d(later, 2)
    assert d.status.failure.reason == "InvalidSpec" and again.events == []


def test_a_refusal_ends_even_a_suspended_job() -> None:
    d, w = running(job())
    d.with_spec(suspend=True)
    d(w, 1)
    d(World(refused=Refusal("KueueUnavailable", "no Workload kind")), 2)
    assert d.status.state == "Failed"


def test_a_lost_runner_abandons_every_open_attempt() -> None:
    d, w = running(job())
    ended_master = dataclasses.replace(w.replicas["master-0"], phase=Phase.SUCCEEDED, exit_code=0, finished_at=at(1))
    lost = World(replicas={"master-0": ended_master, "worker-0": up(W0)}, runner_lost="the supervisor (pid 7) is gone")
    plan = d(lost, 2)
    assert plan.actions == [Abandon(W0, 0, "SupervisorLost")]
    assert d.status.failure is not None and d.status.failure.reason == "SupervisorLost"
    assert d.status.condition(ConditionType.FAILED).message == "the supervisor (pid 7) is gone"  # type: ignore[union-attr]
    assert isinstance(d, Driver)
