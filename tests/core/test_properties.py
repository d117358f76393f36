"""Properties of `reconcile` over random jobs and random exit sequences.

Every reconcile of every simulated run is checked by tests/core/invariants.py: the same inputs give
the same plan, a replayed status counts nothing twice, restartCount never exceeds backoffLimit,
Running and Restarting exclude each other, a failed job names its failure, a finished job never
changes again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.invariants import check_all
from tests.core.sim import SimResult, simulate
from tests.jobs import make_job
from torchjob.api.model import TorchJob
from torchjob.core.policies import policy
from torchjob.core.round.reconcile import Create
from torchjob.core.shape.topology import replicas

CODES = (0, 1, 2, 127, 128, 130, 137, 138, 143, 255)
POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
TIMES = tuple(x / 2 for x in range(1, 11))  # 0.5 .. 5.0

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    job: TorchJob
    exits: dict[str, tuple[tuple[float, int], ...]]


@st.composite
def cases(draw: st.DrawFn, *, run_policy: bool = True) -> Case:
    master = draw(st.booleans())
    workers = draw(st.integers(0 if master else 1, 3))
    elastic = None
    if not master and draw(st.booleans()):
        elastic = {"minReplicas": 1, "maxReplicas": workers}
    rp: dict[str, Any] = {}
    if run_policy:
        rp = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "backoffLimit": st.integers(0, 4),
                    "activeDeadlineSeconds": st.integers(1, 20),
                    "cleanPodPolicy": st.sampled_from(["None", "Running", "All", "Unfinished"]),
                    "ttlSecondsAfterFinished": st.integers(0, 30),
                },
            )
        )
    job = make_job(
        "prop",
        workers=workers,
        master=master,
        restart_policy=draw(st.sampled_from(POLICIES)),
        run_policy=rp,
        elastic=elastic,
    )
    attempt = st.tuples(st.sampled_from(TIMES), st.sampled_from(CODES))
    exits = {rid.name: tuple(draw(st.lists(attempt, max_size=4))) for rid in replicas(job)}
    return Case(job, exits)


def run(case: Case, **kwargs: Any) -> SimResult:
    return simulate(case.job, case.exits, check=check_all, stop_when_idle="SIGINT", **kwargs)


@SETTINGS
@given(cases())
def test_every_run_ends_and_keeps_the_invariants(case: Case) -> None:
    result = run(case)
    status = result.status
    assert status.finished
    assert status.state in ("Succeeded", "Failed")
    limit = case.job.run_policy.backoffLimit
    if limit is not None:
        assert status.restartCount <= limit
    if status.state == "Failed":
        assert status.failure is not None
        if status.failure.replica is not None:
            # the failure names an attempt that really exited with that code
            attempts = case.exits[status.failure.replica]
            assert status.failure.attempt is not None and status.failure.exitCode is not None
            assert attempts[status.failure.attempt][1] == status.failure.exitCode
            if status.failure.exitCode == 0:  # only Always restarts a success, and only it can run out
                rtype = "Master" if status.failure.replica.startswith("master") else "Worker"
                assert case.job.restart_policy(rtype) == "Always"
                assert status.failure.reason == "BackoffLimitExceeded"
    else:
        assert status.failure is None
    if not result.deleted:
        assert not any(o.phase.active for o in result.steps[-1].world.replicas.values())
    # attempts of each replica are created in order 0, 1, 2 ..., one more per restart at most
    for rid in replicas(case.job):
        created = [a for _, name, a in result.created if name == rid.name]
        assert created == list(range(len(created)))
        assert len(created) <= 1 + status.replicas[rid.name].restarts


@SETTINGS
@given(cases(run_policy=False))
def test_failure_is_a_code_the_policy_does_not_retry(case: Case) -> None:
    """Without a backoffLimit or deadline, a job fails only on a code its policy does not retry."""
    result = run(case)
    status = result.status
    failure = status.failure
    if failure is None or failure.reason == "Terminated":
        return
    assert failure.replica is not None and failure.exitCode is not None
    rtype = "Master" if failure.replica.startswith("master") else "Worker"
    assert not policy.should_restart(case.job.restart_policy(rtype), failure.exitCode)
    expected = "NonRetryableExitCode" if case.job.restart_policy(rtype) == "ExitCode" else "ReplicaFailed"
    assert failure.reason == expected


@SETTINGS
@given(cases(run_policy=False))
def test_restart_backoff_is_respected(case: Case) -> None:
    """A replica's restart n+1 is created no sooner than restart_delay(n) after the exit."""
    result = run(case)
    for rid in replicas(case.job):
        times = [t for t, name, _ in result.created if name == rid.name]
        exits = case.exits[rid.name]
        for n in range(1, len(times)):
            exited = times[n - 1] + exits[n - 1][0]
            assert times[n] >= exited + policy.restart_delay(n - 1)


@SETTINGS
@given(
    cases(),
    st.lists(st.sampled_from((*TIMES, 6.0, 7.5, 10.0)), min_size=1, max_size=4, unique=True).map(sorted),
)
def test_suspend_and_resume(case: Case, toggles: list[float]) -> None:
    """Suspending stops everything without counting restarts; resuming restarts the clock."""
    changes = [(t, {"suspend": i % 2 == 0}) for i, t in enumerate(toggles)]
    if len(changes) % 2:
        changes.append((toggles[-1] + 1.0, {"suspend": False}))
    result = run(case, run_policy_changes=changes)
    for step in result.steps:
        status = step.plan.status
        if status.state == "Suspended":
            assert status.startTime is None
            assert not any(isinstance(a, Create) for a in step.plan.actions)
    limit = case.job.run_policy.backoffLimit
    if limit is not None:
        assert result.status.restartCount <= limit
    assert result.status.finished
