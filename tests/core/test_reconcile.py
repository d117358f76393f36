"""Every decision of `reconcile`, one observed world at a time."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.sim import Driver, at, ended, running, up, world
from tests.jobs import job_data, make_job
from torchjob.api.load import job_from_data
from torchjob.api.model import JobStatus, ReplicaStatus
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import (
    SUCCESS_SETTLE_S,
    Action,
    Create,
    DeleteJob,
    Forget,
    Observed,
    Phase,
    Plan,
    Purge,
    Stop,
    World,
    reconcile,
    set_condition,
)
from torchjob.core.shape.topology import ReplicaId

M0 = ReplicaId("Master", 0)
W0, W1 = ReplicaId("Worker", 0), ReplicaId("Worker", 1)
SUCCEEDED, FAILED = Phase.SUCCEEDED, Phase.FAILED


def running_job(t: float = 0.0, **kwargs: Any) -> tuple[Driver, World]:
    """A job built by `make_job(**kwargs)` whose replicas have all been created and observed running (at `t`)."""
    return running(make_job(**kwargs), t)


def reason_of(status: JobStatus, ctype: str) -> str | None:
    c = status.condition(ctype)
    return c.reason if c is not None and c.status == "True" else None


def stops(plan: Plan) -> list[tuple[str, str]]:
    return sorted((a.replica.name, a.reason) for a in plan.actions if isinstance(a, Stop))


# --- start -------------------------------------------------------------------------------------


def test_first_reconcile_creates_every_replica_in_rank_order() -> None:
    plan = Driver(make_job(workers=2))(World(), 0)
    assert plan.actions == [Create(M0, 0), Create(W0, 0), Create(W1, 0)]
    assert plan.status.state == "Created"
    assert plan.status.startTime == at(0)
    assert [e.reason for e in plan.events] == ["Created"]
    assert plan.requeue_at is None and not plan.done
    assert plan.status.replicaStatuses == {"Master": ReplicaStatus(), "Worker": ReplicaStatus()}
    assert set(plan.status.replicas) == {"master-0", "worker-0", "worker-1"}


def test_running_once_every_replica_runs() -> None:
    d = Driver(make_job(workers=2))
    d(World(), 0)
    partial = d(world(up(M0)), 1)
    assert partial.actions == [Create(W0, 0), Create(W1, 0)]
    assert partial.status.state == "Created"
    plan = d(world(up(M0), up(W0), up(W1)), 2)
    assert plan.actions == []
    assert plan.status.state == "Running"
    assert [e.reason for e in plan.events] == ["Running"]
    assert plan.status.replicaStatuses["Master"].active == 1
    assert plan.status.replicaStatuses["Worker"].active == 2
    assert plan.status.startTime == at(0), "startTime is the first reconcile, not the first Running"
    again = d(world(up(M0), up(W0), up(W1)), 3)
    assert again.events == [] and again.actions == []


def test_pending_replicas_count_as_active_but_the_job_runs_once_they_run() -> None:
    d = Driver(make_job(workers=1))
    d(World(), 0)
    plan = d(world(Observed(M0, 0, Phase.PENDING), Observed(W0, 0, Phase.PENDING)), 1)
    assert plan.status.state == "Created"  # e.g. pods not scheduled yet
    assert plan.status.replicaStatuses["Worker"].active == 1
    plan = d(world(Observed(M0, 0, Phase.RUNNING), Observed(W0, 0, Phase.RUNNING)), 2)
    assert plan.status.state == "Running"


def test_same_inputs_same_plan() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure")
    failed = world(up(M0), ended(W0, 1, 1.0), up(W1))
    first = reconcile(d.job, failed, at(1))
    second = reconcile(d.job, failed, at(1))
    assert first.actions == second.actions == [Forget(W0, 0)]
    assert first.status == second.status
    assert first.status.restartCount == 1
    # the input job is not modified
    assert d.status.restartCount == 0


def test_replayed_failure_is_not_counted_twice() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure")
    failed = world(up(M0), ended(W0, 1, 1.0), up(W1))
    first = d(failed, 1)
    replay = d(failed, 1)  # the runtime has not applied Forget yet
    assert first.status.restartCount == replay.status.restartCount == 1
    assert replay.actions == [Forget(W0, 0)]
    assert [e.reason for e in replay.events] == []
    later = d(failed, 5)
    assert later.status.restartCount == 1


# --- restarts and conditions --------------------------------------------------------------------


def test_restart_then_running_again() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 3})
    plan = d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    assert plan.actions == [Forget(W0, 0)]
    assert plan.status.state == "Restarting"
    assert plan.status.condition(ConditionType.RUNNING) is None or not plan.status.is_true(ConditionType.RUNNING)
    assert plan.status.replicas["worker-0"].attempt == 1
    assert plan.status.replicas["worker-0"].restarts == 1
    assert plan.status.replicas["worker-0"].notBefore is None, "the first restart is immediate"
    assert plan.status.restartCount == 1
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", "Restarting")
    assert "worker-0 exited with exit code 1" in event.message and "(restart 1 of 3)" in event.message
    assert plan.status.replicaStatuses["Worker"].restarts == 1

    plan = d(world(up(M0), up(W1)), 1)
    assert plan.actions == [Create(W0, 1)]
    assert plan.status.state == "Restarting"

    plan = d(world(up(M0), up(W0, 1), up(W1)), 1.5)
    assert plan.actions == []
    assert plan.status.state == "Running"
    assert plan.status.condition(ConditionType.RESTARTING) is None
    assert plan.status.restartCount == 1


def test_second_restart_waits_for_backoff() -> None:
    d, _ = running_job(workers=1, restart_policy="OnFailure")
    d(world(up(M0), ended(W0, 1, 1.0)), 1)
    d(world(up(M0)), 1)
    d(world(up(M0), up(W0, 1)), 1)
    plan = d(world(up(M0), ended(W0, 1, 2.0, attempt=1)), 2)
    assert plan.actions == [Forget(W0, 1)]
    assert plan.status.replicas["worker-0"].notBefore == at(3)
    assert "in 1s" in plan.events[0].message
    plan = d(world(up(M0)), 2)
    assert plan.actions == []
    assert plan.requeue_at == at(3)
    assert plan.status.state == "Restarting"
    plan = d(world(up(M0)), 2.5)
    assert plan.actions == [] and plan.requeue_at == at(3)
    plan = d(world(up(M0)), 3)
    assert plan.actions == [Create(W0, 2)]
    assert plan.status.replicas["worker-0"].notBefore is None


def test_backoff_is_per_replica() -> None:
    """Each replica's first restart is immediate, whatever the others did."""
    d, _ = running_job(workers=2, restart_policy="OnFailure")
    d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    d(world(up(M0), up(W1)), 1)
    d(world(up(M0), up(W0, 1), up(W1)), 1)
    plan = d(world(up(M0), up(W0, 1), ended(W1, 1, 2.0)), 2)
    assert plan.status.replicas["worker-1"].notBefore is None
    assert plan.status.restartCount == 2
    assert d(world(up(M0), up(W0, 1)), 2).actions == [Create(W1, 1)]


@pytest.mark.parametrize("phase_active", [True, False])
def test_stale_attempt_goes_before_the_new_one(phase_active: bool) -> None:
    d, _ = running_job(workers=1, restart_policy="OnFailure")
    d(world(up(M0), ended(W0, 137, 1.0)), 1)
    stale = up(W0, 0) if phase_active else ended(W0, 137, 1.0)
    plan = d(world(up(M0), stale), 2)
    expected: list[Action] = [Stop(W0, 0, "replaced by a newer attempt")] if phase_active else [Forget(W0, 0)]
    assert plan.actions == expected
    assert plan.status.restartCount == 1
    # a stale attempt that is already stopping is left alone, and nothing is created meanwhile
    plan = d(world(up(M0), up(W0, 0, stopping=True)), 2)
    assert plan.actions == []


def test_observed_replica_statuses_count_only_current_attempts() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure")
    plan = d(world(ended(M0, 0, 1.0) if False else up(M0), ended(W0, 1, 1.0), ended(W1, 0, 1.0)), 1)
    # worker-1 succeeded (waits for the master), worker-0 is being restarted: its attempt 0 is stale
    assert plan.status.replicaStatuses["Worker"] == ReplicaStatus(active=0, succeeded=1, failed=0, restarts=1)
    assert plan.status.replicaStatuses["Master"] == ReplicaStatus(active=1)


def test_restart_policy_defaults_to_on_failure() -> None:
    d, _ = running_job(workers=1, restart_policy=None)
    plan = d(world(up(M0), ended(W0, 1, 1.0)), 1)
    assert plan.status.restartCount == 1 and plan.status.state == "Restarting"


def test_restart_policy_is_per_replica_type() -> None:
    data = job_data(workers=1, restart_policy=None)
    data["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Never"
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    d = Driver(job_from_data(data))
    d(World(), 0)
    assert d(world(up(M0), ended(W0, 1, 1.0)), 1).status.state == "Restarting"
    d(world(up(M0)), 1)
    plan = d(world(ended(M0, 1, 2.0), up(W0, 1)), 2)
    assert plan.status.state == "Failed"
    assert plan.status.failure is not None and plan.status.failure.replica == "master-0"


# --- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart_policy", "backoff", "code", "outcome"),
    [
        ("Never", None, 1, "ReplicaFailed"),
        ("Never", None, 137, "ReplicaFailed"),
        ("Never", None, 138, "ReplicaFailed"),
        ("ExitCode", None, 1, "NonRetryableExitCode"),
        ("ExitCode", None, 2, "NonRetryableExitCode"),
        ("ExitCode", None, 127, "NonRetryableExitCode"),
        ("ExitCode", None, 128, "Restarting"),
        ("ExitCode", None, 130, "Restarting"),
        ("ExitCode", None, 137, "Restarting"),
        ("ExitCode", None, 138, "Restarting"),
        ("ExitCode", None, 143, "Restarting"),
        ("ExitCode", None, 255, "Restarting"),
        ("ExitCode", 0, 137, "BackoffLimitExceeded"),
        ("ExitCode", 0, 1, "NonRetryableExitCode"),
        ("OnFailure", None, 1, "Restarting"),
        ("OnFailure", None, 137, "Restarting"),
        ("OnFailure", 0, 1, "BackoffLimitExceeded"),
        ("OnFailure", 1, 1, "Restarting"),
        ("Always", None, 1, "Restarting"),
        ("Always", None, 0, "Restarting"),
        ("Always", 0, 0, "BackoffLimitExceeded"),
        ("Never", None, 0, "Running"),
        ("OnFailure", None, 0, "Running"),
        ("ExitCode", None, 0, "Running"),
    ],
)
def test_worker_exit_decision(restart_policy: str, backoff: int | None, code: int, outcome: str) -> None:
    rp = {"backoffLimit": backoff} if backoff is not None else None
    d, _ = running_job(workers=2, restart_policy=restart_policy, run_policy=rp)
    plan = d(world(up(M0), ended(W0, code, 1.0), up(W1)), 1)
    status = plan.status
    if outcome == "Restarting":
        assert status.state == "Restarting"
        assert plan.actions == [Forget(W0, 0)]
        assert status.restartCount == 1
    elif outcome == "Running":  # a worker that succeeded waits for the master
        assert status.state == "Running"
        assert plan.actions == []
        assert status.restartCount == 0
    else:
        assert status.state == "Failed"
        assert reason_of(status, "Failed") == outcome
        assert status.failure is not None
        assert (status.failure.reason, status.failure.replica) == (outcome, "worker-0")
        assert (status.failure.attempt, status.failure.exitCode) == (0, code)
        assert status.restartCount == 0
        assert status.completionTime == at(1)
        assert stops(plan) == [("master-0", status.failure.message), ("worker-1", status.failure.message)]
        assert [(e.type, e.reason) for e in plan.events] == [("Warning", outcome)]


def test_failure_names_the_signal_and_the_reason() -> None:
    d, _ = running_job(workers=1)
    plan = d(world(up(M0), ended(W0, 137, 1.0, reason="OOMKilled")), 1)
    failure = plan.status.failure
    assert failure is not None
    assert (failure.exitCode, failure.signal) == (137, "SIGKILL")
    assert failure.message == "worker-0 failed with exit code 137 (SIGKILL), OOMKilled (restartPolicy Never)"
    assert plan.status.condition(ConditionType.FAILED).message == failure.message  # type: ignore[union-attr]


def test_failure_of_exitcode_policy_explains_what_is_retried() -> None:
    d, _ = running_job(workers=1, restart_policy="ExitCode")
    plan = d(world(up(M0), ended(W0, 3, 1.0)), 1)
    assert plan.status.failure is not None
    assert "exit code 3" in plan.status.failure.message and ">= 128" in plan.status.failure.message
    assert plan.status.failure.signal is None


def test_unknown_exit_code() -> None:
    d, _ = running_job(workers=1)
    plan = d(world(up(M0), Observed(W0, 0, FAILED, finished_at=at(1))), 1)
    assert plan.status.failure is not None
    assert plan.status.failure.exitCode is None and plan.status.failure.signal is None
    assert "an unknown exit code" in plan.status.failure.message
    # SUCCEEDED without a code counts as 0
    d, _ = running_job(workers=1)
    assert d(world(Observed(M0, 0, SUCCEEDED), up(W0)), 1).status.state == "Succeeded"


def test_backoff_limit_counts_restarts_of_the_whole_job() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 1})
    d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    d(world(up(M0), up(W1)), 1)
    d(world(up(M0), up(W0, 1), up(W1)), 1)
    plan = d(world(up(M0), up(W0, 1), ended(W1, 1, 2.0)), 2)
    assert plan.status.state == "Failed"
    assert reason_of(plan.status, "Failed") == "BackoffLimitExceeded"
    assert plan.status.failure is not None and plan.status.failure.replica == "worker-1"
    assert "all 1 restarts of backoffLimit" in plan.status.failure.message
    assert plan.status.restartCount == 1


@pytest.mark.parametrize("order", [("worker-0", "worker-1"), ("worker-1", "worker-0")])
def test_earliest_exit_is_the_root_cause(order: tuple[str, str]) -> None:
    d, _ = running_job(workers=2)
    obs = {"worker-0": ended(W0, 1, 2.0), "worker-1": ended(W1, 2, 1.0), "master-0": up(M0)}
    w = World(replicas={name: obs[name] for name in (*order, "master-0")})
    plan = d(w, 2)
    assert plan.status.failure is not None
    assert (plan.status.failure.replica, plan.status.failure.exitCode) == ("worker-1", 2)
    assert stops(plan) == [("master-0", plan.status.failure.message)]


def test_simultaneous_exits_fail_in_rank_order() -> None:
    d, _ = running_job(workers=2)
    plan = d(world(ended(W1, 1, 1.0), ended(M0, 2, 1.0), ended(W0, 3, 1.0)), 1)
    assert plan.status.failure is not None and plan.status.failure.replica == "master-0"


def test_two_exits_in_one_reconcile_both_restarted() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure")
    plan = d(world(up(M0), ended(W0, 1, 1.0), ended(W1, 137, 1.5)), 2)
    assert plan.actions == [Forget(W0, 0), Forget(W1, 0)]
    assert plan.status.restartCount == 2
    assert [e.reason for e in plan.events] == ["Restarting", "Restarting"]


def test_failed_is_terminal() -> None:
    d, _ = running_job(workers=2)
    failed = d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    before = failed.status.model_copy(deep=True)
    # the stops land; then the master "succeeds" and a worker fails differently: nothing changes
    plan = d(world(ended(M0, 0, 1.5), ended(W0, 1, 1.0), ended(W1, 143, 1.5)), 2)
    assert plan.status.state == "Failed"
    assert plan.status.failure == before.failure
    assert plan.status.conditions == before.conditions
    assert plan.status.completionTime == at(1)
    assert plan.actions == [] and plan.done
    # a stop request after the end changes nothing either
    assert d(world(ended(M0, 0, 1.5), stop="SIGINT"), 3).status.conditions == before.conditions


def test_failed_job_stops_what_still_runs_once() -> None:
    d, _ = running_job(workers=2)
    d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    plan = d(world(up(M0, stopping=True), ended(W0, 1, 1.0), up(W1)), 1.5)
    assert stops(plan) == [("worker-1", "the job has finished")]
    assert not plan.done


def test_set_condition_after_failed_is_ignored() -> None:
    status = JobStatus()
    assert set_condition(status, "Failed", True, "ReplicaFailed", "x", at(0))
    for ctype in ("Running", "Restarting", "Succeeded", "Suspended", "Failed"):
        assert not set_condition(status, ctype, True, "Other", "y", at(1))
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [("Failed", "True", "ReplicaFailed")]


def test_set_condition_running_and_restarting_exclude_each_other() -> None:
    status = JobStatus()
    set_condition(status, "Running", True, "Running", "", at(0))
    set_condition(status, "Restarting", True, "Restarting", "", at(1))
    assert [c.type for c in status.conditions] == ["Restarting"]
    set_condition(status, "Running", True, "Running", "", at(2))
    assert [c.type for c in status.conditions] == ["Running"]
    assert status.condition(ConditionType.RUNNING).lastTransitionTime == at(2)  # type: ignore[union-attr]


def test_set_condition_finish_clears_running() -> None:
    status = JobStatus()
    set_condition(status, "Running", True, "Running", "", at(0))
    assert set_condition(status, "Succeeded", True, "Succeeded", "done", at(5))
    running = status.condition(ConditionType.RUNNING)
    assert running is not None and (running.status, running.reason, running.lastTransitionTime) == (
        "False", "Succeeded", at(5))
    assert status.state == "Succeeded" and status.finished


def test_set_condition_unchanged_returns_false() -> None:
    status = JobStatus()
    assert set_condition(status, "Running", True, "Running", "m", at(0))
    assert not set_condition(status, "Running", True, "Running", "other message", at(1))
    assert status.condition(ConditionType.RUNNING).lastUpdateTime == at(0)  # type: ignore[union-attr]
    assert set_condition(status, "Running", True, "Again", "m", at(2))
    c = status.condition(ConditionType.RUNNING)
    assert c is not None and (c.lastTransitionTime, c.lastUpdateTime) == (at(0), at(2))


# --- success -----------------------------------------------------------------------------------


def test_master_success_lets_the_workers_settle_then_stops_them() -> None:
    d, _ = running_job(workers=2)
    plan = d(world(ended(M0, 0, 1.0), up(W0), up(W1)), 1)
    assert plan.status.state == "Succeeded"
    assert reason_of(plan.status, "Succeeded") == "Succeeded"
    assert plan.status.completionTime == at(1)
    assert plan.actions == [], "after a success the others get SUCCESS_SETTLE_S to end on their own"
    assert plan.requeue_at == at(1), "the reconcile that ends a job asks for one more round at once"
    running = plan.status.condition(ConditionType.RUNNING)
    assert running is not None and (running.status, running.reason) == ("False", "Succeeded")
    assert plan.status.failure is None
    assert not plan.done
    # still settling: nothing to do; a worker failing now does not fail the job
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 1, 3.0), up(W1)), 3)
    assert plan.actions == [] and plan.requeue_at == at(1 + SUCCESS_SETTLE_S) and not plan.done
    assert plan.status.state == "Succeeded" and plan.status.restartCount == 0
    # settled: what still runs is stopped
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 1, 3.0), up(W1)), 1 + SUCCESS_SETTLE_S)
    assert stops(plan) == [("worker-1", "the job has finished")]
    after = d(world(ended(M0, 0, 1.0), ended(W0, 1, 3.0), ended(W1, 143, 11.0)), 11)
    assert after.done and after.actions == []
    assert after.status.state == "Succeeded", "workers stopped after the end do not fail the job"
    assert after.status.failure is None


def test_success_is_done_once_the_others_end_on_their_own() -> None:
    d, _ = running_job(workers=1)
    d(world(ended(M0, 0, 1.0), up(W0)), 1)
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 0, 1.5)), 1.5)
    assert plan.actions == [] and plan.done and plan.requeue_at is None


def test_workers_succeeding_do_not_end_a_job_with_a_master() -> None:
    d, _ = running_job(workers=2)
    plan = d(world(up(M0), ended(W0, 0, 1.0), ended(W1, 0, 1.0)), 1)
    assert plan.status.state == "Running" and plan.actions == []


def test_worker_only_job_needs_every_worker() -> None:
    d, _ = running_job(workers=2, master=False)
    plan = d(world(ended(W0, 0, 1.0), up(W1)), 1)
    assert plan.status.state == "Running" and plan.actions == []
    plan = d(world(ended(W0, 0, 1.0), ended(W1, 0, 2.0)), 2)
    assert plan.status.state == "Succeeded"
    assert plan.status.condition(ConditionType.SUCCEEDED).message == "every worker succeeded"  # type: ignore[union-attr]


def test_elastic_job_needs_one_worker() -> None:
    d, _ = running_job(workers=3, master=False, elastic={"minReplicas": 1, "maxReplicas": 3})
    plan = d(world(up(W0), ended(W1, 0, 1.0), up(ReplicaId("Worker", 2))), 1)
    assert plan.status.state == "Succeeded"
    assert plan.status.condition(ConditionType.SUCCEEDED).message == (  # type: ignore[union-attr]
        "a worker of the elastic job succeeded"
    )
    assert plan.actions == [] and plan.requeue_at == at(1)
    plan = d(world(up(W0), ended(W1, 0, 1.0), up(ReplicaId("Worker", 2))), 1)
    assert plan.actions == [] and plan.requeue_at == at(1 + SUCCESS_SETTLE_S)


def test_always_master_success_ends_the_job() -> None:
    d, _ = running_job(workers=1, restart_policy="Always")
    plan = d(world(ended(M0, 0, 1.0), up(W0)), 1)
    assert plan.status.state == "Succeeded" and plan.status.restartCount == 0


@pytest.mark.parametrize(
    ("kwargs", "observed"),
    [
        ({"workers": 1}, (ended(M0, 0, 1.0), ended(W0, 0, 0.5))),
        ({"workers": 2, "master": False}, (ended(W0, 0, 0.5), ended(W1, 1, 1.0))),
    ],
    ids=["success", "failure"],
)
def test_finishing_plan_asks_for_one_more_round_then_is_done(
    kwargs: dict[str, Any], observed: tuple[Observed, ...]
) -> None:
    """The reconcile that finishes a job asks to be called again at once (requeue_at == now): the
    end's own work (cleanPodPolicy, TTL) is decided in that round, which then says done."""
    d, _ = running_job(**kwargs)
    plan = d(world(*observed), 1)
    assert plan.status.finished and plan.actions == [] and plan.requeue_at == at(1)
    assert not plan.done
    plan = d(world(*observed), 1)
    assert plan.actions == [] and plan.requeue_at is None and plan.done


# --- stop requests and the deadline --------------------------------------------------------------


def test_stop_request_fails_the_job() -> None:
    d, _ = running_job(workers=1)
    plan = d(world(up(M0), up(W0), stop="SIGINT"), 1)
    assert plan.status.state == "Failed"
    assert reason_of(plan.status, "Failed") == "Terminated"
    failure = plan.status.failure
    assert failure is not None
    assert (failure.reason, failure.message, failure.replica) == ("Terminated", "stopped by SIGINT", None)
    assert failure.signal == "SIGINT"
    assert stops(plan) == [("master-0", "stopped by SIGINT"), ("worker-0", "stopped by SIGINT")]


def test_stop_request_creates_nothing() -> None:
    d = Driver(make_job(workers=1))
    d(World(), 0)
    plan = d(world(up(M0), stop="SIGTERM"), 1)
    assert not any(isinstance(a, Create) for a in plan.actions)
    assert stops(plan) == [("master-0", "stopped by SIGTERM")]


def test_deadline() -> None:
    d = Driver(make_job(workers=1, run_policy={"activeDeadlineSeconds": 10}))
    assert d(World(), 0).requeue_at == at(10)
    assert d(world(up(M0), up(W0)), 4).requeue_at == at(10), "counted from startTime"
    plan = d(world(up(M0), up(W0)), 10)
    assert plan.status.state == "Failed"
    assert reason_of(plan.status, "Failed") == "DeadlineExceeded"
    assert plan.status.failure is not None
    assert plan.status.failure.message == "job ran longer than activeDeadlineSeconds (10s)"
    assert plan.status.failure.replica is None
    assert [a.replica.name for a in plan.actions if isinstance(a, Stop)] == ["master-0", "worker-0"]


def test_deadline_beats_restart_backoff_in_requeue() -> None:
    d, _ = running_job(workers=1, restart_policy="OnFailure", run_policy={"activeDeadlineSeconds": 100})
    d(world(up(M0), ended(W0, 1, 1.0)), 1)
    d(world(up(M0)), 1)
    d(world(up(M0), up(W0, 1)), 1)
    d(world(up(M0), ended(W0, 1, 2.0, attempt=1)), 2)
    assert d(world(up(M0)), 2).requeue_at == at(3)
    d2, _ = running_job(workers=1, restart_policy="OnFailure", run_policy={"activeDeadlineSeconds": 3})
    d2(world(up(M0), ended(W0, 1, 1.0)), 1)
    d2(world(up(M0)), 1)
    d2(world(up(M0), up(W0, 1)), 1)
    d2(world(up(M0), ended(W0, 1, 2.5, attempt=1)), 2.5)
    assert d2(world(up(M0)), 2.5).requeue_at == at(3)


def test_no_deadline_no_requeue() -> None:
    _, w = running_job(workers=1)
    assert reconcile(running_job(workers=1)[0].job, w, at(100)).requeue_at is None


# --- suspend / resume --------------------------------------------------------------------------


def test_suspend_stops_and_forgets_and_resume_restarts_the_clock() -> None:
    d, _ = running_job(workers=2, restart_policy="OnFailure", run_policy={"activeDeadlineSeconds": 10})
    d.with_spec(suspend=True)
    plan = d(world(up(M0), ended(W0, 0, 2.0), up(W1)), 5)
    assert plan.status.state == "Suspended"
    assert sorted(map(repr, plan.actions)) == sorted(
        map(repr, [Stop(M0, 0, "the job is suspended"), Forget(W0, 0), Stop(W1, 0, "the job is suspended")])
    )
    assert plan.status.startTime is None
    running = plan.status.condition(ConditionType.RUNNING)
    assert running is not None and (running.status, running.reason) == ("False", "Suspended")
    assert {n: r.attempt for n, r in plan.status.replicas.items()} == {"master-0": 1, "worker-0": 1, "worker-1": 1}
    assert plan.status.restartCount == 0
    assert plan.requeue_at is None, "no deadline while suspended"
    assert [e.reason for e in plan.events] == ["Suspended"]

    # the stops land; still suspended: forget them, create nothing, long past the old deadline
    plan = d(world(ended(M0, 143, 5.0), ended(W1, 143, 5.0)), 20)
    assert sorted(map(repr, plan.actions)) == sorted(map(repr, [Forget(M0, 0), Forget(W1, 0)]))
    plan = d(World(), 30)
    assert plan.actions == [] and plan.status.state == "Suspended" and not plan.done

    d.with_spec(suspend=False)
    plan = d(World(), 100)
    assert plan.actions == [Create(M0, 1), Create(W0, 1), Create(W1, 1)]
    suspended = plan.status.condition(ConditionType.SUSPENDED)
    assert suspended is not None and (suspended.status, suspended.reason) == ("False", "Resumed")
    assert plan.status.startTime == at(100)
    assert plan.requeue_at == at(110), "the deadline counts from the resume"
    assert plan.status.restartCount == 0
    plan = d(world(up(M0, 1), up(W0, 1), up(W1, 1)), 101)
    assert plan.status.state == "Running"


def test_a_suspend_that_lands_after_the_work_is_done_lets_the_job_succeed() -> None:
    """Every rank had ended 0 when the suspend landed: the job succeeded, with nothing to resume
    (it was left Suspended, and `resume` ran it again)."""
    d, _ = running_job(workers=1)
    d.with_spec(suspend=True)
    plan = d(world(ended(M0, 0, 2.0), ended(W0, 0, 2.0)), 3)
    assert plan.status.state == "Succeeded" and reason_of(plan.status, ConditionType.SUSPENDED) is None
    # still running when it landed: suspended as ever
    d, _ = running_job(workers=1)
    d.with_spec(suspend=True)
    assert d(world(up(M0), ended(W0, 0, 2.0)), 3).status.state == "Suspended"


def test_suspend_clears_restarting() -> None:
    d, _ = running_job(workers=1, restart_policy="OnFailure")
    d(world(up(M0), ended(W0, 1, 1.0)), 1)
    d.with_spec(suspend=True)
    plan = d(world(up(M0), ended(W0, 1, 1.0)), 1.5)
    assert plan.status.condition(ConditionType.RESTARTING) is None
    assert plan.status.state == "Suspended"
    assert plan.status.restartCount == 1


def test_created_suspended_starts_nothing() -> None:
    d = Driver(make_job(workers=1, run_policy={"suspend": True}))
    plan = d(World(), 0)
    assert plan.actions == []
    assert plan.status.state == "Suspended"
    assert plan.status.startTime is None


def test_stop_request_ends_a_suspended_job() -> None:
    d = Driver(make_job(workers=1, run_policy={"suspend": True}))
    d(World(), 0)
    plan = d(World(stop_requested="SIGINT"), 1)
    assert plan.status.state == "Failed"
    assert reason_of(plan.status, "Failed") == "Terminated"


# --- after the end: cleanPodPolicy and TTL ---------------------------------------------------------


def finished(**kwargs: Any) -> Driver:
    d, _ = running_job(workers=1, **kwargs)
    d(world(ended(M0, 0, 1.0), up(W0)), 1)
    return d


def test_clean_pod_policy_all_purges_finished_replicas() -> None:
    d = finished(run_policy={"cleanPodPolicy": "All"})
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 1)
    assert plan.actions == [Purge(M0, 0), Purge(W0, 0)]
    assert not plan.done
    plan = d(World(), 1)
    assert plan.actions == [] and plan.done


def test_clean_pod_policy_all_purges_what_ended_while_the_rest_runs() -> None:
    d, _ = running_job(workers=1, run_policy={"cleanPodPolicy": "All"})
    d(world(ended(M0, 0, 1.0), up(W0)), 1)
    plan = d(world(ended(M0, 0, 1.0), up(W0, stopping=True)), 1.5)
    assert plan.actions == [Purge(M0, 0)]
    assert not plan.done


@pytest.mark.parametrize("clean", [None, "None", "Running", "Unfinished"])
def test_other_clean_pod_policies_keep_finished_replicas(clean: str | None) -> None:
    d = finished(run_policy={"cleanPodPolicy": clean} if clean else None)
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 1)
    assert plan.actions == [] and plan.done


def test_ttl_requeues_then_deletes() -> None:
    d = finished(run_policy={"ttlSecondsAfterFinished": 60})
    plan = d(world(ended(M0, 0, 1.0), up(W0, stopping=True)), 1)
    assert plan.requeue_at == at(1 + SUCCESS_SETTLE_S), "the TTL starts counting only once nothing runs"
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 2)
    assert plan.requeue_at == at(61)
    assert not any(isinstance(a, DeleteJob) for a in plan.actions)
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 60.5)
    assert plan.requeue_at == at(61)
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 61)
    assert plan.actions == [DeleteJob("ttlSecondsAfterFinished has passed")]
    assert not plan.done


def test_ttl_zero_deletes_at_once() -> None:
    d = finished(run_policy={"ttlSecondsAfterFinished": 0})
    plan = d(world(ended(M0, 0, 1.0), ended(W0, 143, 1.0)), 1)
    assert plan.actions == [DeleteJob("ttlSecondsAfterFinished has passed")]


def test_ttl_applies_to_failed_jobs() -> None:
    d, _ = running_job(workers=1, run_policy={"ttlSecondsAfterFinished": 5})
    d(world(up(M0), ended(W0, 1, 1.0)), 1)
    plan = d(world(ended(M0, 143, 1.0), ended(W0, 1, 1.0)), 1)
    assert plan.requeue_at == at(6)
    assert d(world(), 6).actions == [DeleteJob("ttlSecondsAfterFinished has passed")]


# --- plan hygiene ------------------------------------------------------------------------------


def test_one_action_per_attempt() -> None:
    d, _ = running_job(workers=1, restart_policy="OnFailure")
    d(world(up(M0), ended(W0, 137, 1.0)), 1)  # worker-0 attempt 0 is now stale
    plan = d(world(up(M0), up(W0, 0), stop="SIGINT"), 2)
    targets = [(a.replica, a.attempt) for a in plan.actions if isinstance(a, Stop | Forget | Purge | Create)]
    assert len(targets) == len(set(targets)), plan.actions


# --- a worker that dies after every rank reported its work complete (issue 43, item 8) -----------


def _done(o: Observed) -> Observed:
    import dataclasses

    return dataclasses.replace(o, reported_done=True)


def test_a_worker_dying_after_every_rank_reported_done_waits_for_the_master_whose_success_ends_the_job() -> None:
    """A worker that aborts in torch's teardown (exit 134) after every rank's last report said 100 %:
    no restart while the master may still succeed; its success ends the job Succeeded, with a
    FailedAfterDone warning naming the worker and its exit."""
    from torchjob.core.round.reconcile import DONE_GRACE_S

    d, _ = running_job(workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 3},
                       restart_scope="Job")
    held = d(world(_done(up(M0)), _done(ended(W0, 134, 1.0)), _done(up(W1))), 1)
    assert held.actions == [] and held.status.restartCount == 0 and not held.status.finished
    assert held.requeue_at == at(1.0 + DONE_GRACE_S)
    plan = d(world(_done(ended(M0, 0, 1.5)), _done(ended(W0, 134, 1.0)), _done(up(W1))), 1.5)
    assert reason_of(plan.status, ConditionType.SUCCEEDED) == "Succeeded" and plan.status.restartCount == 0
    (warning,) = [e for e in plan.events if e.reason == "FailedAfterDone"]
    assert warning.type == "Warning" and "worker-0 ended with exit code 134 (SIGABRT)" in warning.message


@pytest.mark.parametrize("case", ["master fails", "master silent past the grace", "not every rank done",
                                  "the master itself"])
def test_a_failure_after_done_is_acted_on_as_any_other_when_the_master_does_not_succeed(case: str) -> None:
    from torchjob.core.round.reconcile import DONE_GRACE_S

    d, _ = running_job(workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 3},
                       restart_scope="Job")
    master, w1, t = _done(up(M0)), _done(up(W1)), 1.0
    failed = _done(ended(W0, 134, 1.0))
    if case == "master fails":
        master, t = _done(ended(M0, 1, 1.2)), 1.2
    elif case == "master silent past the grace":
        t = 1.0 + DONE_GRACE_S
    elif case == "not every rank done":
        w1 = up(W1)
    else:
        master, failed = _done(ended(M0, 134, 1.0)), _done(up(W0))
    plan = d(world(master, failed, w1), t)
    assert plan.status.restartCount == 1 and not any(e.reason == "FailedAfterDone" for e in plan.events)
