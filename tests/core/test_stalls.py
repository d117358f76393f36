"""Stall detection (runPolicy.progressDeadlineSeconds): timelines of the table's rows, the rules
one world at a time, and a property over random reporting replicas."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.invariants import check_all
from tests.core.sim import at, running, simulate
from tests.jobs import job_data, make_job
from tests.scenarios import BY_NAME, Scenario
from torchjob.api.errors import InvalidJob
from torchjob.api.load import job_from_data
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import Create, Stop, World, quiet_replicas

COMMAND = ["python", "-c", "pass"]


def run(name: str):  # type: ignore[no-untyped-def]
    s: Scenario = BY_NAME[name]
    return simulate(s.job(COMMAND), s.exits, check=check_all, reports=s.reports)


def stalled_events(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.message for step in result.steps for e in step.plan.events if e.reason == "Stalled"]


def test_a_stall_fails_the_job_naming_the_quiet_replicas() -> None:
    result = run("stalled-fails")
    assert result.end == 3.0  # quiet after 1.0, deadline 2 s
    failure = result.status.failure
    assert failure is not None and failure.reason == "ProgressDeadlineExceeded"
    assert failure.message.startswith("master-0 sent no progress report for 2s (runPolicy.progressDeadlineSeconds)")
    assert failure.exitCode is None and failure.attempt == 0
    assert len(stalled_events(result)) == 1
    assert sorted(n for _, n, _, _ in result.stopped) == ["master-0", "worker-0"]


def test_a_stalled_policy_restarts_the_job_and_counts_the_restart() -> None:
    result = run("stalled-restartjob-recovers")
    assert [(t, n, a) for t, n, a in result.created if a == 1] == [(6.0, "master-0", 1), (6.0, "worker-0", 1)]
    assert result.status.restartCount == 1 and result.end == 8.0
    assert len(stalled_events(result)) == 1
    restarting = [e.message for s in result.steps for e in s.plan.events if e.reason == "Restarting"]
    assert restarting and "stalled" in restarting[0] and "RestartJob" in restarting[0]


def test_stalls_exhaust_the_backoff_limit() -> None:
    result = run("stalled-backoff-limit")
    assert result.end == 12.0  # 6.0 the first stall, 12.0 the second
    assert result.status.failure is not None and result.status.failure.reason == "BackoffLimitExceeded"
    assert "backoffLimit" in result.status.failure.message


def test_a_replica_policy_restarts_only_the_quiet_replica() -> None:
    result = run("stalled-worker-restartpod")
    assert [(t, n, a) for t, n, a in result.created] == [(0.0, "master-0", 0), (0.0, "worker-0", 0),
                                                        (6.0, "worker-0", 1)]
    assert [(t, n) for t, n, _, _ in result.stopped] == [(6.0, "worker-0")]


def test_a_policy_timeout_holds_the_restart_back() -> None:
    s = BY_NAME["stalled-restartjob-recovers"]
    job = replace(s, policies=({"event": "Stalled", "action": "RestartJob", "timeout": "1s"},)).job(COMMAND)
    result = simulate(job, s.exits, check=check_all, reports=s.reports)
    assert [t for t, _, a in result.created if a == 1] == [7.0, 7.0]


def test_only_running_attempts_that_reported_are_judged() -> None:
    job = make_job("j", workers=2, run_policy={"progressDeadlineSeconds": 10})
    d, w = running(job)
    obs = dict(w.replicas)
    obs["master-0"] = replace(obs["master-0"], last_report=at(0))  # quiet since 0
    obs["worker-0"] = replace(obs["worker-0"], last_report=at(0), stopping=True)  # being stopped
    # worker-1 never reported
    quiet, due = quiet_replicas(job, obs, at(9.5))
    assert quiet == [] and due == at(10)
    quiet, _ = quiet_replicas(job, obs, at(10))
    assert [o.replica.name for o in quiet] == ["master-0"]
    plan = d(World(replicas=obs), 10)
    assert plan.status.failure is not None and plan.status.failure.replica == "master-0"
    assert {a.replica.name for a in plan.actions if isinstance(a, Stop)} == {"master-0", "worker-1"}


def test_a_fresh_report_moves_the_deadline() -> None:
    job = make_job("j", workers=0, run_policy={"progressDeadlineSeconds": 5})
    d, w = running(job)
    m = w.replicas["master-0"]
    plan = d(World(replicas={"master-0": replace(m, last_report=at(1))}), 3)
    assert plan.requeue_at == at(6)
    plan = d(World(replicas={"master-0": replace(m, last_report=at(4))}), 6)
    assert plan.status.state == "Running" and plan.requeue_at == at(9)


def test_no_deadline_no_stall() -> None:
    job = make_job("j", workers=0)
    d, w = running(job)
    m = w.replicas["master-0"]
    plan = d(World(replicas={"master-0": replace(m, last_report=at(0))}), 1000)
    assert plan.status.state == "Running" and plan.requeue_at is None


def test_a_suspended_job_is_not_judged() -> None:
    job = make_job("j", workers=0, run_policy={"progressDeadlineSeconds": 1})
    d, w = running(job)
    d.with_spec(suspend=True)
    m = w.replicas["master-0"]
    plan = d(World(replicas={"master-0": replace(m, last_report=at(0))}), 50)
    assert plan.status.state == "Suspended" and not plan.status.is_true(ConditionType.FAILED)


def test_a_stalled_policy_needs_the_deadline() -> None:
    data = job_data("j", workers=1)
    data["spec"]["policies"] = [{"event": "Stalled", "action": "RestartJob"}]
    with pytest.raises(InvalidJob) as e:
        job_from_data(data)
    assert [p.path for p in e.value.problems] == ["spec.policies[0]"]
    problem = e.value.problems[0]
    assert "progressDeadlineSeconds" in problem.message and "progressDeadlineSeconds" in (problem.fix or "")
    data["spec"]["runPolicy"] = {"progressDeadlineSeconds": 0}
    with pytest.raises(InvalidJob) as e:
        job_from_data(data)
    assert [p.path for p in e.value.problems] == ["spec.runPolicy.progressDeadlineSeconds"]
    data["spec"]["runPolicy"] = {"progressDeadlineSeconds": 30}
    assert job_from_data(data).run_policy.progressDeadlineSeconds == 30


# --- property ---------------------------------------------------------------------------------

QUIET = st.one_of(st.none(), st.sampled_from([x / 2 for x in range(1, 21)]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workers=st.integers(0, 3), deadline=st.integers(1, 6), quiet=st.lists(QUIET, min_size=4, max_size=4))
def test_the_job_fails_exactly_when_its_first_reporter_has_been_quiet_for_the_deadline(
        workers: int, deadline: int, quiet: list[float | None]) -> None:
    job = make_job("p", workers=workers, run_policy={"progressDeadlineSeconds": deadline})
    names = ["master-0", *(f"worker-{i}" for i in range(workers))]
    reports = {n: (q,) for n, q in zip(names, quiet, strict=False) if q is not None}
    result = simulate(job, {}, check=check_all, reports=reports, stop_when_idle="SIGINT")
    if not reports:
        assert result.status.failure is not None and result.status.failure.reason == "Terminated"
        return
    first = min(reports.items(), key=lambda kv: (kv[1][0], names.index(kv[0])))
    assert result.status.failure is not None and result.status.failure.reason == "ProgressDeadlineExceeded"
    assert result.status.failure.replica == first[0]
    assert result.status.completionTime == at(first[1][0] + deadline)
    assert all(f"{n}" in result.status.failure.message for n, (q,) in reports.items() if q == first[1][0])
    assert not any(isinstance(a, Create) and a.attempt > 0 for s in result.steps for a in s.plan.actions)
