"""Lifecycle policies (event or exit code -> action), maxRestarts, minSuccess and dependsOn in `reconcile`.

Table-driven: one observed world at a time through `reconcile`, and whole runs on the simulated clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.core import sim
from tests.core.invariants import check_all
from tests.core.sim import Driver, SimResult, at, final_reason, pending, running, simulate, up, world
from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import MASTER, WORKER, TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import (
    SUCCESS_SETTLE_S,
    Create,
    Forget,
    Observed,
    Phase,
    Plan,
    Stop,
    World,
    match_policy,
)
from torchjob.core.shape.topology import ReplicaId

M0 = ReplicaId(MASTER, 0)
W0, W1 = ReplicaId(WORKER, 0), ReplicaId(WORKER, 1)
Policy = Mapping[str, Any]


def make(
    *,
    workers: int = 2,
    restart_policy: str = "Never",
    policies: Sequence[Policy] = (),
    master_policies: Sequence[Policy] = (),
    worker_policies: Sequence[Policy] = (),
    backoff_limit: int | None = None,
    max_restarts: Mapping[str, int] | None = None,
    min_success: int | None = None,
    depends_on: Mapping[str, Any] | None = None,
    depends: str = WORKER,
) -> TorchJob:
    data = job_data("lj", workers=workers, restart_policy=restart_policy,
                    run_policy={"backoffLimit": backoff_limit} if backoff_limit is not None else None)
    spec = data["spec"]
    specs = spec["pytorchReplicaSpecs"]
    if policies:
        spec["policies"] = [dict(p) for p in policies]
    if master_policies:
        specs[MASTER]["policies"] = [dict(p) for p in master_policies]
    if worker_policies:
        specs[WORKER]["policies"] = [dict(p) for p in worker_policies]
    for rtype, n in (max_restarts or {}).items():
        specs[rtype]["maxRestarts"] = n
    if min_success is not None:
        spec["minSuccess"] = min_success
    if depends_on is not None:
        specs[depends]["dependsOn"] = dict(depends_on)
    return job_from_data(data)


def ended(rid: ReplicaId, code: int, t: float, attempt: int = 0, reason: str | None = None) -> Observed:
    """An exit as the simulated runtime reports it: with its own reason (Completed or Error) unless one is given."""
    return sim.ended(rid, code, t, attempt, reason or sim.exit_reason(code))


def stops(plan: Plan) -> list[tuple[str, int, str]]:
    return sorted((a.replica.name, a.attempt, a.reason) for a in plan.actions if isinstance(a, Stop))


def run(job: TorchJob, exits: Mapping[str, Sequence[tuple[float, int]]]) -> SimResult:
    return simulate(job, exits, check=check_all)


# --- which policy matches ------------------------------------------------------------------------------------

RESTART_POD = {"event": "PodFailed", "action": "RestartPod"}
ABORT = {"event": "PodFailed", "action": "AbortJob"}


@dataclass(frozen=True)
class Match:
    name: str
    rtype: str
    event: str
    code: int | None
    expect: str | None  # the action, None: no policy
    policies: Sequence[Policy] = ()
    master: Sequence[Policy] = ()
    worker: Sequence[Policy] = field(default_factory=tuple)


MATCHES = [
    Match("no-policies", WORKER, "PodFailed", 1, None),
    Match("replica-level-wins", WORKER, "PodFailed", 1, "RestartPod", policies=[ABORT], worker=[RESTART_POD]),
    Match("job-level-for-the-others", MASTER, "PodFailed", 1, "AbortJob", policies=[ABORT], worker=[RESTART_POD]),
    Match("replica-star-beats-job-event", WORKER, "PodFailed", 1, "RestartTask", policies=[ABORT],
          worker=[{"event": "*", "action": "RestartTask"}]),
    Match("replica-no-match-falls-to-job", WORKER, "PodEvicted", 1, "RestartJob",
          policies=[{"event": "PodEvicted", "action": "RestartJob"}], worker=[RESTART_POD]),
    Match("exit-code-matches", WORKER, "PodFailed", 3, "AbortJob", policies=[{"exitCode": 3, "action": "AbortJob"}]),
    Match("exit-code-other-code", WORKER, "PodFailed", 4, None, policies=[{"exitCode": 3, "action": "AbortJob"}]),
    Match("exit-code-evicted", WORKER, "PodEvicted", 3, "AbortJob", policies=[{"exitCode": 3, "action": "AbortJob"}]),
    Match("exit-code-not-task-completed", MASTER, "TaskCompleted", None, None,
          policies=[{"exitCode": 3, "action": "AbortJob"}]),
    Match("exit-code-not-task-failed", WORKER, "TaskFailed", None, None,
          policies=[{"exitCode": 3, "action": "AbortJob"}]),
    Match("first-match-exit-code-first", WORKER, "PodFailed", 3, "AbortJob",
          policies=[{"exitCode": 3, "action": "AbortJob"}, {"event": "PodFailed", "action": "RestartJob"}]),
    Match("first-match-event-first", WORKER, "PodFailed", 3, "RestartJob",
          policies=[{"event": "PodFailed", "action": "RestartJob"}, {"exitCode": 3, "action": "AbortJob"}]),
    Match("events-list", WORKER, "PodEvicted", 137, "RestartJob",
          policies=[{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}]),
    Match("star-pod-failed", WORKER, "PodFailed", 1, "TerminateJob",
          policies=[{"event": "*", "action": "TerminateJob"}]),
    Match("star-pod-evicted", MASTER, "PodEvicted", 1, "TerminateJob",
          policies=[{"event": "*", "action": "TerminateJob"}]),
    Match("star-task-failed", WORKER, "TaskFailed", None, "TerminateJob",
          policies=[{"event": "*", "action": "TerminateJob"}]),
    # as Volcano's AnyEvent: '*' matches TaskCompleted too
    Match("star-task-completed", MASTER, "TaskCompleted", None, "TerminateJob",
          policies=[{"event": "*", "action": "TerminateJob"}]),
    Match("other-event", WORKER, "PodFailed", 1, None, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
    Match("master-policy-not-for-workers", WORKER, "TaskCompleted", None, None,
          master=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
]


@pytest.mark.parametrize("m", MATCHES, ids=lambda m: m.name)
def test_match_policy(m: Match) -> None:
    job = make(policies=m.policies, master_policies=m.master, worker_policies=m.worker)
    pol = match_policy(job, m.rtype, m.event, m.code)
    assert (pol.action if pol is not None else None) == m.expect


# --- the action for one failure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    name: str
    policies: Sequence[Policy]
    code: int
    state: str  # after the reconcile of the failure
    reason: str | None  # of Succeeded/Failed
    actions: Sequence[Any]  # exactly, in order
    attempts: Mapping[str, int]  # status.replicas[...].attempt after
    restarts: int = 0
    evicted: bool = False


F_STOP = "the job has failed"
FAILURES = [
    Failure("abort-job", [ABORT], 1, "Failed", "Aborted",
            [Stop(M0, 0, "worker-0 failed with exit code 1: AbortJob"),
             Stop(W1, 0, "worker-0 failed with exit code 1: AbortJob")],
            {"master-0": 0, "worker-0": 0, "worker-1": 0}),
    Failure("terminate-job", [{"exitCode": 7, "action": "TerminateJob"}], 7, "Failed", "Terminated",
            [Stop(M0, 0, "worker-0 failed with exit code 7: TerminateJob"),
             Stop(W1, 0, "worker-0 failed with exit code 7: TerminateJob")],
            {"master-0": 0, "worker-0": 0, "worker-1": 0}),
    Failure("restart-pod-despite-never", [RESTART_POD], 1, "Restarting", None,
            [Forget(W0, 0)], {"master-0": 0, "worker-0": 1, "worker-1": 0}, restarts=1),
    Failure("restart-task", [{"event": "PodFailed", "action": "RestartTask"}], 1, "Restarting", None,
            [Forget(W0, 0), Stop(W1, 0, "restarted by RestartTask")],
            {"master-0": 0, "worker-0": 1, "worker-1": 1}, restarts=1),
    Failure("restart-job", [{"event": "PodFailed", "action": "RestartJob"}], 1, "Restarting", None,
            [Stop(M0, 0, "restarted by RestartJob"), Forget(W0, 0), Stop(W1, 0, "restarted by RestartJob")],
            {"master-0": 1, "worker-0": 1, "worker-1": 1}, restarts=1),
    Failure("evicted-restart-job", [{"event": "PodEvicted", "action": "RestartJob"}], 137, "Restarting", None,
            [Stop(M0, 0, "restarted by RestartJob"), Forget(W0, 0), Stop(W1, 0, "restarted by RestartJob")],
            {"master-0": 1, "worker-0": 1, "worker-1": 1}, restarts=1, evicted=True),
    Failure("evicted-is-not-pod-failed", [{"event": "PodFailed", "action": "RestartJob"}], 137, "Failed",
            "ReplicaFailed", [Stop(M0, 0, "worker-0 failed with exit code 137 (SIGKILL), Evicted (restartPolicy "
                                          "Never)"),
                              Stop(W1, 0, "worker-0 failed with exit code 137 (SIGKILL), Evicted (restartPolicy "
                                          "Never)")],
            {"master-0": 0, "worker-0": 0, "worker-1": 0}, evicted=True),
]


@pytest.mark.parametrize("f", FAILURES, ids=lambda f: f.name)
def test_failure_action(f: Failure) -> None:
    d, _ = running(make(policies=f.policies, backoff_limit=3))
    plan = d(world(up(M0), ended(W0, f.code, 1.0, reason="Evicted" if f.evicted else None), up(W1)), 1)
    assert plan.status.state == f.state
    assert final_reason(plan.status) == f.reason
    assert plan.actions == list(f.actions)
    assert {n: s.attempt for n, s in plan.status.replicas.items()} == f.attempts
    assert plan.status.restartCount == f.restarts
    if f.state == "Failed":
        failure = plan.status.failure
        assert failure is not None
        assert (failure.reason, failure.replica, failure.attempt, failure.exitCode) == (f.reason, "worker-0", 0, f.code)
    if f.state == "Restarting":
        # policy restarts are immediate (no crash-loop backoff)
        assert all(s.notBefore is None for s in plan.status.replicas.values())
        (event,) = [e for e in plan.events if e.reason == "Restarting"]
        assert event.type == "Warning" and "(restart 1 of 3)" in event.message


def test_abort_and_terminate_name_the_action_in_the_failure() -> None:
    d, _ = running(make(policies=[ABORT]))
    plan = d(world(up(M0), ended(W0, 2, 1.0), up(W1)), 1)
    assert plan.status.failure is not None
    assert plan.status.failure.message == "worker-0 failed with exit code 2: AbortJob"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Aborted")]
    assert plan.status.completionTime == at(1)


# --- RestartJob ---------------------------------------------------------------------------------------------


def test_restart_job_stops_stale_attempts_then_forgets_them_then_creates_all() -> None:
    d, _ = running(make(policies=[{"event": "PodFailed", "action": "RestartJob"}], backoff_limit=2))
    plan = d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    assert plan.actions == [Stop(M0, 0, "restarted by RestartJob"), Forget(W0, 0),
                            Stop(W1, 0, "restarted by RestartJob")]
    # the stops are in progress: nothing more is asked, nothing is created under the stale names
    plan = d(world(Observed(M0, 0, Phase.RUNNING, stopping=True), Observed(W1, 0, Phase.RUNNING, stopping=True)), 1.5)
    assert plan.actions == [Create(W0, 1)]
    # the stale attempts end (SIGTERM): forgotten, not counted as failures
    plan = d(world(ended(M0, 143, 2.0), up(W0, 1), ended(W1, 143, 2.0)), 2)
    assert plan.actions == [Forget(M0, 0), Forget(W1, 0)]
    assert plan.status.restartCount == 1 and final_reason(plan.status) is None
    plan = d(world(up(W0, 1)), 2)
    assert plan.actions == [Create(M0, 1), Create(W1, 1)]
    plan = d(world(up(M0, 1), up(W0, 1), up(W1, 1)), 2.5)
    assert plan.actions == [] and plan.status.state == "Running"
    assert plan.status.restartCount == 1
    assert {n: (s.attempt, s.restarts) for n, s in plan.status.replicas.items()} == {
        "master-0": (1, 1), "worker-0": (1, 1), "worker-1": (1, 1)}
    assert plan.status.replicaStatuses[MASTER].restarts == 1
    assert plan.status.replicaStatuses[WORKER].restarts == 2


def test_restart_job_counts_one_restart_for_simultaneous_failures() -> None:
    d, _ = running(make(policies=[{"event": "PodFailed", "action": "RestartJob"}]))
    plan = d(world(up(M0), ended(W0, 1, 1.0), ended(W1, 1, 1.0)), 1)
    assert plan.status.restartCount == 1
    assert plan.actions == [Stop(M0, 0, "restarted by RestartJob"), Forget(W0, 0), Forget(W1, 0)]
    assert len([e for e in plan.events if e.reason == "Restarting"]) == 1


def test_restart_job_respects_backoff_limit() -> None:
    d, _ = running(make(policies=[{"event": "PodFailed", "action": "RestartJob"}], backoff_limit=1))
    d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    d(world(ended(M0, 143, 1.0), ended(W1, 143, 1.0)), 1)
    d(world(), 1)
    d(world(up(M0, 1), up(W0, 1), up(W1, 1)), 1)
    plan = d(world(up(M0, 1), up(W0, 1), ended(W1, 1, 5.0, attempt=1)), 5)
    assert final_reason(plan.status) == "BackoffLimitExceeded"
    assert plan.status.restartCount == 1
    assert plan.status.failure is not None
    assert (plan.status.failure.replica, plan.status.failure.attempt) == ("worker-1", 1)
    assert "has used all 1 restarts of backoffLimit" in plan.status.failure.message
    assert stops(plan) == [("master-0", 1, plan.status.failure.message), ("worker-0", 1, plan.status.failure.message)]


def test_restart_job_with_backoff_limit_zero_fails_at_once() -> None:
    d, _ = running(make(policies=[{"event": "PodFailed", "action": "RestartJob"}], backoff_limit=0))
    plan = d(world(up(M0), ended(W0, 1, 1.0), up(W1)), 1)
    assert final_reason(plan.status) == "BackoffLimitExceeded"


def test_restart_job_whole_run() -> None:
    job = make(workers=2, policies=[{"event": "PodFailed", "action": "RestartJob"}], backoff_limit=2)
    result = run(job, {"master-0": [(100.0, 0), (3.0, 0)], "worker-0": [(1.0, 1), (2.0, 0)],
                       "worker-1": [(100.0, 0), (2.0, 0)]})
    assert result.final_reason() == "Succeeded"
    assert result.status.restartCount == 1
    assert result.created == [(0.0, "master-0", 0), (0.0, "worker-0", 0), (0.0, "worker-1", 0),
                              (1.0, "worker-0", 1), (1.0, "master-0", 1), (1.0, "worker-1", 1)]
    assert result.stopped == [(1.0, "master-0", 0, "restarted by RestartJob"),
                              (1.0, "worker-1", 0, "restarted by RestartJob")]
    assert result.end == 4.0


# --- RestartTask / RestartPod --------------------------------------------------------------------------------


def test_restart_task_restarts_only_that_type() -> None:
    job = make(workers=2, worker_policies=[{"exitCode": 3, "action": "RestartTask"}])
    result = run(job, {"master-0": [(5.0, 0)], "worker-0": [(1.0, 3), (1.0, 0)], "worker-1": [(50.0, 0), (1.0, 0)]})
    assert result.final_reason() == "Succeeded"
    assert result.status.restartCount == 1
    assert [c for c in result.created if c[2] == 1] == [(1.0, "worker-0", 1), (1.0, "worker-1", 1)]
    assert result.stopped == [(1.0, "worker-1", 0, "restarted by RestartTask")]
    assert result.status.replicas["master-0"].attempt == 0


def test_exit_code_not_matched_falls_to_restart_policy() -> None:
    job = make(workers=2, worker_policies=[{"exitCode": 3, "action": "RestartTask"}])
    result = run(job, {"worker-0": [(1.0, 4)]})
    assert result.final_reason() == "ReplicaFailed"
    assert result.status.restartCount == 0


def test_restart_pod_ignores_never_and_repeats_until_backoff_limit() -> None:
    job = make(workers=1, policies=[RESTART_POD], backoff_limit=2)
    result = run(job, {"worker-0": [(1.0, 1), (1.0, 1), (1.0, 1)]})
    assert result.final_reason() == "BackoffLimitExceeded"
    assert result.status.restartCount == 2
    # no crash-loop backoff for a policy's restarts
    assert [c for c in result.created if c[1] == "worker-0"] == [(0.0, "worker-0", 0), (1.0, "worker-0", 1),
                                                                 (2.0, "worker-0", 2)]


def test_complete_job_on_a_failure_succeeds() -> None:
    d, _ = running(make(worker_policies=[{"exitCode": 5, "action": "CompleteJob"}]))
    plan = d(world(up(M0), ended(W0, 5, 1.0), up(W1)), 1)
    assert final_reason(plan.status) == "Completed"
    assert plan.status.failure is None
    assert {a.replica.name for a in plan.actions if isinstance(a, Stop)} == {"master-0", "worker-1"}


def test_complete_job_on_a_failure_does_not_say_failed() -> None:
    d, _ = running(make(worker_policies=[{"exitCode": 5, "action": "CompleteJob"}]))
    plan = d(world(up(M0), ended(W0, 5, 1.0), up(W1)), 1)
    assert not any("failed" in r for _, _, r in stops(plan))


# --- TaskCompleted -> CompleteJob ------------------------------------------------------------------------------


def test_task_completed_complete_job_stops_the_others_at_once() -> None:
    job = make(workers=2, master_policies=[{"event": "TaskCompleted", "action": "CompleteJob"}])
    result = run(job, {"master-0": [(5.0, 0)]})
    assert result.final_reason() == "Completed"
    assert result.status.state == "Succeeded"
    assert result.status.completionTime == at(5)
    assert result.stopped == [(5.0, "worker-0", 0, "the job has finished"),
                              (5.0, "worker-1", 0, "the job has finished")]
    assert result.end == 5.0


def test_without_the_policy_the_workers_get_the_settle_delay() -> None:
    result = run(make(workers=2), {"master-0": [(5.0, 0)]})
    assert result.final_reason() == "Succeeded"
    assert [t for t, *_ in result.stopped] == [5.0 + SUCCESS_SETTLE_S] * 2


def test_task_completed_complete_job_plan() -> None:
    d, _ = running(make(workers=1, master_policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]))
    plan = d(world(ended(M0, 0, 5.0), up(W0)), 5)
    assert final_reason(plan.status) == "Completed"
    c = plan.status.condition(ConditionType.SUCCEEDED)
    assert c is not None and c.message == "the master replicas completed: CompleteJob"
    assert plan.requeue_at == at(5)  # again at once, to stop the worker
    plan = d(world(ended(M0, 0, 5.0), up(W0)), 5)
    assert plan.actions == [Stop(W0, 0, "the job has finished")]


def test_task_completed_on_workers_completes_while_the_master_runs() -> None:
    job = make(workers=2, worker_policies=[{"event": "TaskCompleted", "action": "CompleteJob"}])
    result = run(job, {"worker-0": [(1.0, 0)], "worker-1": [(2.0, 0)]})
    assert result.final_reason() == "Completed"
    assert result.status.completionTime == at(2)  # when the last worker completed
    assert result.stopped == [(2.0, "master-0", 0, "the job has finished")]


def test_star_policy_fires_on_task_completed() -> None:
    """'*' matches every event, TaskCompleted included (Volcano's AnyEvent does the same)."""
    d, _ = running(make(workers=1, policies=[{"event": "*", "action": "TerminateJob"}]))
    plan = d(world(ended(M0, 0, 3.0), up(W0)), 3)
    assert final_reason(plan.status) == "Terminated"
    assert plan.status.failure is not None and plan.status.failure.replica is None


# --- timeout ---------------------------------------------------------------------------------------------------


def test_timeout_delays_the_action_and_requeues_at_the_due_time() -> None:
    d, _ = running(make(policies=[{"event": "PodFailed", "action": "AbortJob", "timeout": "30s"}]))
    failed = world(up(M0), ended(W0, 1, 5.0), up(W1))
    for t in (5, 20, 34.5):
        plan = d(failed, t)
        assert plan.actions == [] and final_reason(plan.status) is None
        assert plan.requeue_at == at(35)
    plan = d(failed, 35)
    assert final_reason(plan.status) == "Aborted"
    assert stops(plan) == [("master-0", 0, "worker-0 failed with exit code 1: AbortJob"),
                           ("worker-1", 0, "worker-0 failed with exit code 1: AbortJob")]


def test_timeout_on_task_completed() -> None:
    job = make(workers=2, worker_policies=[{"event": "TaskCompleted", "action": "CompleteJob", "timeout": "1m"}])
    result = run(job, {"worker-0": [(1.0, 0)], "worker-1": [(4.0, 0)]})
    assert result.final_reason() == "Completed"
    assert result.status.completionTime == at(64)


def test_timeout_restart_in_a_whole_run() -> None:
    job = make(workers=1, policies=[{"event": "PodFailed", "action": "RestartJob", "timeout": "1h30m"}])
    result = run(job, {"master-0": [(10**5, 0), (1.0, 0)], "worker-0": [(2.0, 1), (10**5, 0)]})
    assert result.final_reason() == "Succeeded"
    assert sorted(c for c in result.created if c[2] == 1) == [(5402.0, "master-0", 1), (5402.0, "worker-0", 1)]
    assert result.status.restartCount == 1


# --- maxRestarts -> TaskFailed -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cap:
    name: str
    max_restarts: int
    exits: Mapping[str, Sequence[tuple[float, int]]]
    reason: str
    restarts: int
    policies: Sequence[Policy] = ()
    worker: Sequence[Policy] = ()


CAPS = [
    Cap("zero-fails-first-failure", 0, {"worker-0": [(1.0, 1)]}, "TaskFailed", 0),
    Cap("one-restart-then-task-failed", 1, {"worker-0": [(1.0, 1), (1.0, 1)]}, "TaskFailed", 1),
    Cap("counted-per-type", 1, {"worker-0": [(1.0, 1), (10.0, 0)], "worker-1": [(3.0, 1)]}, "TaskFailed", 1),
    Cap("within-the-cap-succeeds", 2, {"master-0": [(10.0, 0)], "worker-0": [(1.0, 1), (1.0, 1), (20.0, 0)]},
        "Succeeded", 2),
    Cap("task-failed-policy-terminates", 1, {"worker-0": [(1.0, 1), (1.0, 1)]}, "Terminated", 1,
        worker=[{"event": "TaskFailed", "action": "TerminateJob"}]),
    Cap("task-failed-policy-completes", 0, {"worker-0": [(1.0, 1)]}, "Completed", 0,
        policies=[{"event": "TaskFailed", "action": "CompleteJob"}]),
    Cap("task-failed-policy-restarts-job", 0,
        {"master-0": [(50.0, 0), (5.0, 0)], "worker-0": [(1.0, 1), (50.0, 0)], "worker-1": [(50.0, 0), (50.0, 0)]},
        "Succeeded", 1, policies=[{"event": "TaskFailed", "action": "RestartJob"}]),
    # a failure a PodFailed policy handles is the policy's alone: maxRestarts is not consulted
    Cap("pod-failed-policy-first", 0, {"master-0": [(10.0, 0)], "worker-0": [(1.0, 1), (20.0, 0)]}, "Succeeded", 1,
        worker=[RESTART_POD]),
]


@pytest.mark.parametrize("c", CAPS, ids=lambda c: c.name)
def test_max_restarts(c: Cap) -> None:
    job = make(workers=2, restart_policy="OnFailure", max_restarts={WORKER: c.max_restarts}, policies=c.policies,
               worker_policies=c.worker)
    result = run(job, c.exits)
    assert result.final_reason() == c.reason
    assert result.status.restartCount == c.restarts


def test_task_failed_failure_names_the_cap() -> None:
    job = make(workers=1, restart_policy="OnFailure", max_restarts={WORKER: 1})
    result = run(job, {"worker-0": [(1.0, 1), (1.0, 3)]})
    failure = result.status.failure
    assert failure is not None
    assert (failure.reason, failure.replica, failure.attempt, failure.exitCode) == ("TaskFailed", "worker-0", 1, 3)
    assert failure.message == ("worker-0 failed with exit code 3 and the worker replicas have used all 1 restarts "
                               "of their maxRestarts")


def test_max_restarts_of_the_master_does_not_cap_the_workers() -> None:
    job = make(workers=1, restart_policy="OnFailure", max_restarts={MASTER: 0})
    result = run(job, {"master-0": [(10.0, 0)], "worker-0": [(1.0, 1), (1.0, 1), (20.0, 0)]})
    assert result.final_reason() == "Succeeded"
    assert result.status.restartCount == 2


# --- minSuccess ------------------------------------------------------------------------------------------------


def test_min_success_completes_while_the_master_runs_and_stops_it_at_once() -> None:
    job = make(workers=2, min_success=2)
    result = run(job, {"worker-0": [(1.0, 0)], "worker-1": [(3.0, 0)]})
    assert result.final_reason() == "MinSuccess"
    assert result.status.completionTime == at(3)
    assert result.stopped == [(3.0, "master-0", 0, "the job has finished")]
    c = result.status.condition(ConditionType.SUCCEEDED)
    assert c is not None and c.message == "2 replicas succeeded (minSuccess 2)"


def test_min_success_not_reached_waits() -> None:
    d, _ = running(make(workers=2, min_success=3))
    plan = d(world(up(M0), ended(W0, 0, 1.0), ended(W1, 0, 2.0)), 2)
    assert final_reason(plan.status) is None and plan.actions == []


def test_min_success_counts_any_replica_type() -> None:
    d, _ = running(make(workers=2, min_success=1))
    plan = d(world(up(M0), ended(W0, 0, 1.0), up(W1)), 1)
    assert final_reason(plan.status) == "MinSuccess"


# --- dependsOn -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("iteration", [None, "any", "all"])
def test_worker_depending_on_master_starts_once_the_master_runs(iteration: str | None) -> None:
    dep: dict[str, Any] = {"name": [MASTER]}
    if iteration is not None:
        dep["iteration"] = iteration
    d = Driver(make(workers=2, depends_on=dep))
    plan = d(World(), 0)
    assert plan.actions == [Create(M0, 0)]
    assert plan.requeue_at is None
    plan = d(world(pending(M0)), 1)  # pending is not running
    assert plan.actions == [] and plan.status.state == "Created"
    plan = d(world(up(M0)), 2)
    assert plan.actions == [Create(W0, 0), Create(W1, 0)]
    assert plan.status.state == "Created"
    plan = d(world(up(M0), up(W0), up(W1)), 3)
    assert plan.actions == [] and plan.status.state == "Running"


@pytest.mark.parametrize("iteration", [None, "any", "all"])
def test_master_depending_on_workers_waits_for_every_worker(iteration: str | None) -> None:
    dep: dict[str, Any] = {"name": [WORKER]}
    if iteration is not None:
        dep["iteration"] = iteration
    d = Driver(make(workers=2, depends_on=dep, depends=MASTER))
    assert d(World(), 0).actions == [Create(W0, 0), Create(W1, 0)]
    assert d(world(up(W0), pending(W1)), 1).actions == []
    assert d(world(up(W0), up(W1)), 2).actions == [Create(M0, 0)]


def test_dependents_wait_again_after_a_restart_job() -> None:
    job = make(workers=1, depends_on={"name": [MASTER]}, policies=[{"event": "PodFailed", "action": "RestartJob"}])
    result = run(job, {"master-0": [(5.0, 1), (3.0, 0)], "worker-0": [(100.0, 0), (100.0, 0)]})
    assert result.final_reason() == "Succeeded"
    # in the simulation a created replica runs at once: the worker follows its master in the next round
    assert result.created == [(0.0, "master-0", 0), (0.0, "worker-0", 0), (5.0, "master-0", 1),
                              (5.0, "worker-0", 1)]
    # the round that created master-0's new attempt did not create worker-0's
    (step,) = [s for s in result.steps if Create(M0, 1) in s.plan.actions]
    assert Create(W0, 1) not in step.plan.actions


def test_a_succeeded_dependency_counts_as_ready() -> None:
    d = Driver(make(workers=1, depends_on={"name": [WORKER]}, depends=MASTER, restart_policy="Never"))
    d(World(), 0)
    plan = d(world(ended(W0, 0, 1.0)), 1)
    assert plan.actions == [Create(M0, 0)]
