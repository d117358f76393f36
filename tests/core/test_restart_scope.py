"""runPolicy.restartScope: a failed rank of a job that cannot go on without it restarts the gang,
at once, counted once; the peers' exits that follow count for nothing (issue 22)."""

from __future__ import annotations

from collections.abc import Iterable

from tests.core.sim import at, ended, running, up, world
from tests.jobs import make_job
from torchjob.api.model import RestartScope
from torchjob.core.round.reconcile import Create, Forget, Stop
from torchjob.core.shape.topology import ReplicaId

M0, W0, W1 = "master-0", "worker-0", "worker-1"
RID = {M0: ReplicaId("Master", 0), W0: ReplicaId("Worker", 0), W1: ReplicaId("Worker", 1)}


def by_name(actions: Iterable[object]) -> list[tuple[str, str, int]]:
    return sorted((type(a).__name__, a.replica.name, a.attempt) for a in actions)  # type: ignore[attr-defined]


def test_the_default_is_job_scope_and_replica_for_an_elastic_job() -> None:
    assert make_job(restart_scope=None).restart_scope is RestartScope.JOB
    assert make_job(restart_scope=None, master=False, elastic={"minReplicas": 1}).restart_scope is RestartScope.REPLICA
    assert make_job(restart_scope="Replica").restart_scope is RestartScope.REPLICA


def test_a_killed_worker_restarts_the_gang_once_and_says_so() -> None:
    job = make_job(workers=2, restart_policy="OnFailure", restart_scope=None, run_policy={"backoffLimit": 3})
    d, _ = running(job, 0.0)
    plan = d(world(up(RID[M0]), up(RID[W0]), ended(RID[W1], 137, 5.0)), 5.0)
    assert by_name(plan.actions) == [("Forget", W1, 0), ("Stop", M0, 0), ("Stop", W0, 0)]
    assert all(a.reason == "worker-1 exited with exit code 137 (SIGKILL); restarting the job"
               for a in plan.actions if isinstance(a, Stop))
    assert plan.status.restartCount == 1
    assert {n: s.attempt for n, s in plan.status.replicas.items()} == {M0: 1, W0: 1, W1: 1}
    assert [e.message for e in plan.events] == [
        "worker-1 exited with exit code 137 (SIGKILL); restarting the job's 3 replicas (restart 1 of 3)"]
    # The peers then fail in their collective ("Connection closed by peer") or end by the stop: their
    # attempts are already replaced, so nothing more is counted, and the gang starts as attempt 1.
    again = d(world(ended(RID[M0], 1, 5.2), ended(RID[W0], 143, 5.3), ended(RID[W1], 137, 5.0)), 5.4)
    assert again.status.restartCount == 1
    assert not any(isinstance(a, Stop | Create) for a in again.actions)  # the old pods go first
    fresh = d(world(), 5.5)
    assert by_name(fresh.actions) == [("Create", M0, 1), ("Create", W0, 1), ("Create", W1, 1)]


def test_simultaneous_failures_are_one_restart() -> None:
    job = make_job(workers=2, restart_policy="OnFailure", restart_scope=None, run_policy={"backoffLimit": 1})
    d, _ = running(job, 0.0)
    plan = d(world(ended(RID[M0], 1, 5.1), ended(RID[W0], 1, 5.1), ended(RID[W1], 137, 5.0)), 5.2)
    assert plan.status.restartCount == 1 and not plan.status.finished
    assert sorted(a.replica.name for a in plan.actions if isinstance(a, Forget)) == [M0, W0, W1]


def test_replica_scope_keeps_kubeflows_per_replica_restarts() -> None:
    job = make_job(workers=2, restart_policy="OnFailure", restart_scope="Replica")
    d, _ = running(job, 0.0)
    plan = d(world(up(RID[M0]), up(RID[W0]), ended(RID[W1], 137, 5.0)), 5.0)
    assert by_name(plan.actions) == [("Forget", W1, 0)]
    assert "restarting it" in plan.events[0].message


def test_a_success_under_always_restarts_that_replica_alone() -> None:
    job = make_job(workers=2, restart_policy="Always", restart_scope=None)
    d, _ = running(job, 0.0)
    plan = d(world(up(RID[M0]), up(RID[W0]), ended(RID[W1], 0, 5.0)), 5.0)
    assert by_name(plan.actions) == [("Forget", W1, 0)]


def test_a_non_retryable_exit_still_fails_the_job() -> None:
    job = make_job(workers=2, restart_policy="ExitCode", restart_scope=None)
    d, _ = running(job, 0.0)
    plan = d(world(up(RID[M0]), up(RID[W0]), ended(RID[W1], 1, 5.0)), 5.0)
    assert plan.status.finished and plan.status.restartCount == 0


def test_backoff_limit_counts_gang_restarts() -> None:
    job = make_job(workers=2, restart_policy="OnFailure", restart_scope=None, run_policy={"backoffLimit": 1})
    d, _ = running(job, 0.0)
    d(world(up(RID[M0]), up(RID[W0]), ended(RID[W1], 137, 5.0)), 5.0)
    d(world(up(RID[M0], 1), up(RID[W0], 1), up(RID[W1], 1)), 6.0)
    plan = d(world(up(RID[M0], 1), up(RID[W0], 1), ended(RID[W1], 137, 9.0, 1)), 9.0)
    assert plan.status.finished and plan.status.failure is not None
    assert plan.status.failure.reason == "BackoffLimitExceeded"
    assert sorted(a.replica.name for a in plan.actions if isinstance(a, Stop)) == [M0, W0]
    assert at(9.0) == plan.status.completionTime
