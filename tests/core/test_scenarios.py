"""Every scenario of tests/scenarios.py, run through `reconcile` on a simulated clock."""

from __future__ import annotations

import pytest

from tests.core.invariants import check_all
from tests.core.sim import Facts, SimResult, at, simulate
from tests.scenarios import BY_NAME, SCENARIOS, Scenario
from torchjob.api.validate import DNS1035, validate
from torchjob.core.round.reconcile import SUCCESS_SETTLE_S, Abandon, Refusal
from torchjob.core.shape.topology import replicas

COMMAND = ["python", "-c", "pass"]


def run(s: Scenario) -> SimResult:
    facts = Facts(refused=(s.refused[0], Refusal(s.refused[1], s.refused[2])) if s.refused else None,
                  runner_lost=s.runner_lost)
    return simulate(s.job(COMMAND), s.exits, check=check_all, reports=s.reports, deletions=s.deleted, facts=facts)


# --- the table itself ----------------------------------------------------------------------


def test_names_are_unique() -> None:
    assert len(BY_NAME) == len(SCENARIOS)


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_scenario_is_well_formed(s: Scenario) -> None:
    assert DNS1035.match(s.name)
    job = s.job(COMMAND)
    assert job.name == s.name
    assert validate(job) == []
    assert {rid.name for rid in replicas(job)} >= set(s.exits), "exits for a replica the job lacks"
    for container in (spec.template.spec.containers[0] for spec in job.spec.pytorchReplicaSpecs.values()):
        assert container.command == COMMAND
    for spec in job.spec.pytorchReplicaSpecs.values():
        assert spec.restartPolicy == s.restart_policy
    assert job.run_policy.backoffLimit == s.backoff_limit
    assert job.run_policy.activeDeadlineSeconds == s.deadline
    assert job.run_policy.progressDeadlineSeconds == s.progress_deadline
    assert job.run_policy.restartScope == s.restart_scope
    assert not s.reports or s.progress_deadline is not None, "reports matter only with a progress deadline"
    assert {rid.name for rid in replicas(job)} >= set(s.reports), "reports for a replica the job lacks"
    for quiet_after in s.reports.values():
        assert all(q > 0 and (q * 2).is_integer() for q in quiet_after), "times must be multiples of 0.5 s"
    assert (job.spec.elasticPolicy is not None) == s.elastic
    for attempts in s.exits.values():
        for after, code in attempts:
            assert after > 0 and (after * 2).is_integer(), "times must be multiples of 0.5 s"
            assert 0 <= code <= 255
    assert {rid.name for rid in replicas(job)} >= set(s.deleted), "a deletion of a replica the job lacks"
    assert all(t > 0 and (t * 2).is_integer() for t in s.deleted.values()), "times must be multiples of 0.5 s"
    assert set(s.unplayable) <= {"local", "kube", "real"}
    assert s.expect_state in ("Succeeded", "Failed")
    assert (s.expect_state == "Failed") or s.expect_failed_replica is None


# --- run ---------------------------------------------------------------------------------


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_scenario(s: Scenario) -> None:
    result = run(s)
    status = result.status
    assert status.state == s.expect_state
    assert result.final_reason() == s.expect_reason
    assert status.restartCount == s.expect_restarts
    assert {name: status.replicas[name].attempt for name in s.expect_attempts} == s.expect_attempts
    assert not result.deleted
    if s.expect_state == "Failed":
        assert status.failure is not None
        assert status.failure.reason == s.expect_reason
        assert status.failure.replica == s.expect_failed_replica
        if s.expect_failed_replica in s.deleted:
            # an eviction: the replica did not exit, it was deleted
            assert status.failure.attempt == 0 and status.failure.exitCode is None
        elif s.expect_failed_replica is not None and status.failure.exitCode is None:
            # a stall: the replica did not exit, it went quiet
            assert status.failure.attempt is not None
            assert len(s.reports[s.expect_failed_replica]) > status.failure.attempt
        elif s.expect_failed_replica is not None:
            # the failure names the attempt and the code that attempt exited with
            assert status.failure.attempt is not None
            after_code = s.exits[s.expect_failed_replica][status.failure.attempt]
            assert status.failure.exitCode == after_code[1]
    else:
        assert status.failure is None
    # done with nothing left running, and the simulated times stay on the 0.5 s grid
    assert result.steps[-1].plan.done
    assert not any(o.phase.active and not o.deleted for o in result.steps[-1].world.replicas.values())
    for t, _, _ in result.created:
        assert (t * 2).is_integer()
    assert (result.end * 2).is_integer()


def test_success_timeline() -> None:
    result = run(BY_NAME["success"])
    assert result.end == 1.0
    assert [(t, n) for t, n, _ in result.created] == [(0.0, "master-0"), (0.0, "worker-0"), (0.0, "worker-1")]
    assert result.stopped == []  # the workers had already succeeded


def test_master_success_stops_the_running_workers_after_settling() -> None:
    result = run(BY_NAME["master-success-stops-workers"])
    assert result.status.completionTime == at(1.0)
    settled = 1.0 + SUCCESS_SETTLE_S
    assert sorted((t, n) for t, n, _, _ in result.stopped) == [(settled, "worker-0"), (settled, "worker-1")]
    assert result.end == settled


def test_elastic_success_needs_one_worker() -> None:
    result = run(BY_NAME["elastic-one-worker-succeeds"])
    assert result.status.completionTime == at(1.0)
    assert result.stopped == [], "worker-0 ended on its own while the success settled"
    assert result.end == 2.0


def test_failure_stops_everything_still_running() -> None:
    result = run(BY_NAME["never-worker-fails"])
    assert result.end == 0.5
    assert sorted(n for _, n, _, _ in result.stopped) == ["master-0", "worker-1"]


def test_root_cause_is_the_earlier_failure() -> None:
    result = run(BY_NAME["earlier-failure-is-root-cause"])
    assert result.status.failure is not None
    assert result.status.failure.exitCode == 2
    assert result.end == 0.5


def test_restart_backoff_timeline() -> None:
    """First restart immediate, then 1 s, then 2 s after the exit."""
    result = run(BY_NAME["onfailure-restart-backoff"])
    worker = [(t, a) for t, n, a in result.created if n == "worker-0"]
    assert worker == [(0.0, 0), (0.5, 1), (2.0, 2), (4.5, 3)]
    assert result.end == 6.0


def test_backoff_limit_timeline() -> None:
    result = run(BY_NAME["onfailure-backoff-limit"])
    worker = [(t, a) for t, n, a in result.created if n == "worker-0"]
    assert worker == [(0.0, 0), (0.5, 1), (2.0, 2)]
    assert result.end == 2.5
    assert result.status.failure is not None and result.status.failure.attempt == 2


def test_deadline_counts_from_the_start() -> None:
    result = run(BY_NAME["deadline-exceeded"])
    assert result.end == 2.0
    assert sorted(n for _, n, _, _ in result.stopped) == ["master-0", "worker-0", "worker-1"]
    assert result.status.failure is not None and result.status.failure.replica is None


def test_always_restarts_a_worker_that_succeeded() -> None:
    result = run(BY_NAME["always-restarts-finished-worker"])
    assert [(t, a) for t, n, a in result.created if n == "worker-0"] == [(0.0, 0), (0.5, 1)]
    assert result.status.replicaStatuses["Worker"].restarts == 1


def test_restarting_then_running_conditions() -> None:
    result = run(BY_NAME["onfailure-recovers"])
    states = [step.plan.status.state for step in result.steps]
    # Created -> Running -> Restarting -> Running -> Succeeded, in that order, each once
    collapsed = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
    assert collapsed == ["Created", "Running", "Restarting", "Running", "Succeeded"]


# --- facts a runtime learns ------------------------------------------------------------------


def test_an_eviction_with_a_policy_restarts_every_replica() -> None:
    result = run(BY_NAME["evicted-restartjob"])
    assert sorted((t, n, a) for t, n, a in result.created if a == 1) == [(1.0, "master-0", 1), (1.0, "worker-0", 1)]
    assert [(t, n) for t, n, _, _ in result.stopped] == [(1.0, "master-0")]  # worker-0 is already gone
    events = [e for step in result.steps for e in step.plan.events if e.reason == "Restarting"]
    assert len(events) == 1 and "Evicted" in events[0].message


def test_a_deleted_replica_without_a_policy_is_made_again_uncounted() -> None:
    result = run(BY_NAME["deleted-made-again"])
    assert [(t, a) for t, n, a in result.created if n == "worker-0"] == [(0.0, 0), (0.5, 0)]
    assert result.status.restartCount == 0 and result.status.replicas["worker-0"].restarts == 0


def test_a_refusal_fails_the_job_once_and_stops_what_runs() -> None:
    result = run(BY_NAME["refused-while-running"])
    assert result.status.completionTime == at(1.0)
    assert sorted((t, n) for t, n, _, _ in result.stopped) == [(1.0, "master-0"), (1.0, "worker-0")]
    warnings = [e for step in result.steps for e in step.plan.events if e.type == "Warning"]
    assert [(e.reason, e.message) for e in warnings] == [("PodGroupUnavailable", BY_NAME["refused-while-running"]
                                                          .refused[2])]  # type: ignore[index]
    assert result.status.failure is not None and result.status.failure.replica is None


def test_a_lost_runner_ends_every_open_attempt_and_stops_nothing() -> None:
    result = run(BY_NAME["runner-lost"])
    assert result.stopped == []
    abandoned = [a for step in result.steps for a in step.plan.actions if isinstance(a, Abandon)]
    assert sorted((a.replica.name, a.attempt, a.reason) for a in abandoned) == [
        ("master-0", 0, "SupervisorLost"), ("worker-0", 0, "SupervisorLost")]
    assert result.status.failure is not None
    assert result.status.failure.message == "the supervisor is gone; its watchdog stopped every replica"
