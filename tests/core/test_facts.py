"""Facts a runtime learns, decided in core: a replica deleted by someone else (an eviction, a lost
rank of a gang, or simply missing), a refusal, a lost runner. One observed world at a time."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.core.sim import Driver, at, ended, pending, running, up, world
from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import (
    Abandon,
    Create,
    Forget,
    Observed,
    Phase,
    Refusal,
    Stop,
    World,
    evicted,
    lost_rank,
)
from torchjob.core.shape.topology import ReplicaId

M0, W0 = ReplicaId("Master", 0), ReplicaId("Worker", 0)
EVICTED_RESTARTS = [{"event": "PodEvicted", "action": "RestartJob"}]


def job(policies: list[dict[str, Any]] | None = None, *, scope: str | None = "Replica",
        restart_policy: str = "Never") -> TorchJob:
    """A master and a worker; `scope` None is the default restartScope (Job: a gang)."""
    data = job_data("facts", workers=1, restart_policy=restart_policy, restart_scope=scope)
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


def test_a_gangs_deleted_rank_restarts_every_replica_at_once_uncounted() -> None:
    # chaos run 6: the master deleted after the worker's collective; made again alone, it waited
    # in its rendezvous for a worker that had succeeded
    d, _ = running(job(scope=None, restart_policy="OnFailure"))
    assert lost_rank(d.job, gone(up(M0))) and not evicted(d.job, gone(up(M0)))
    plan = d(world(gone(up(M0)), ended(W0, 0, 0.8)), 2)
    assert plan.actions == [Forget(M0, 0), Forget(W0, 0), Create(M0, 1)]  # worker-0 once its pod is gone
    assert d.status.restartCount == 0
    assert [r.restarts for r in d.status.replicas.values()] == [0, 0]  # maxRestarts and backoff untouched
    assert [e.message for e in plan.events] == [
        "master-0 was deleted while it ran; restarting the job's 2 replicas "
        "(not counted: a deletion is not a failure of the job)"]
    assert d.status.is_true(ConditionType.RESTARTING) and not d.status.finished
    assert d(world(pending(M0, 1)), 3).actions == [Create(W0, 1)]


def test_a_gangs_rank_still_going_restarts_the_gang_and_its_name_waits() -> None:
    d, _ = running(job(scope=None))  # restartPolicy Never: a deletion is not a failure
    plan = d(world(up(M0), going(up(W0))), 1)
    assert plan.actions == [Stop(M0, 0, "worker-0 was deleted while it ran; restarting the job")]
    assert plan.actions[0].restarting  # type: ignore[union-attr]
    plan = d(world(going(up(W0))), 2)
    assert plan.actions == []  # the new round starts once all of the old one has gone
    plan = d(world(gone(up(W0))), 3)
    assert plan.actions == [Create(M0, 1), Create(W0, 1)] and d.status.restartCount == 0


def test_a_gangs_new_rank_waits_for_the_deleted_master_to_go() -> None:
    # chaos seed 5: the deleted master (PID 1, SIGTERM ignored) went away for its 30 s of grace; the
    # worker made again at once joined its still-open store, ran its collective with it, succeeded,
    # and the new master then waited for a worker that never came
    d, _ = running(job(scope=None, restart_policy="OnFailure"))
    plan = d(world(going(up(M0)), up(W0)), 1)
    assert plan.actions == [Stop(W0, 0, "master-0 was deleted while it ran; restarting the job")]
    for t in (2, 3):  # the worker's old attempt gone, the master's still going: nothing starts
        assert d(world(going(up(M0))), t).actions == []
    plan = d(world(gone(up(M0))), 4)
    assert plan.actions == [Create(M0, 1), Create(W0, 1)]


def test_a_peer_failing_after_the_deletion_is_of_an_attempt_already_replaced() -> None:
    d, _ = running(job(scope=None, restart_policy="OnFailure"))
    plan = d(world(gone(up(M0), t=1.0), ended(W0, 1, 1.5)), 2)
    assert d.status.restartCount == 0 and len([e for e in plan.events if e.reason == "Restarting"]) == 1


def test_a_failure_before_the_deletion_is_one_counted_restart() -> None:
    d, _ = running(job(scope=None, restart_policy="OnFailure"))
    plan = d(world(gone(up(M0), t=1.5), ended(W0, 1, 1.0)), 2)
    assert d.status.restartCount == 1 and len([e for e in plan.events if e.reason == "Restarting"]) == 1


def test_a_deletion_in_a_job_of_one_replica_or_per_replica_restarts_is_made_again_alone() -> None:
    d, _ = running(job(scope="Replica"))
    assert not lost_rank(d.job, gone(up(W0)))
    single = job_from_data(job_data("one", workers=0, restart_policy="Never", restart_scope=None))
    d1, _ = running(single)
    assert not lost_rank(d1.job, gone(up(M0)))
    assert d1(world(gone(up(M0))), 1).actions == [Create(M0, 0)]


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
