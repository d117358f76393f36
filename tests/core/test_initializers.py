"""A job's initializers (core/round/initializers.py): every step to completion before any replica,
all at once; a failed one retried up to its backoffLimit (after a Job's backoff), then the job's root
cause with nothing else made; a finished job's steps stopped; done for good once they succeeded."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.core.sim import Driver, at, ended, up, world
from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob
from torchjob.api.status import StepState
from torchjob.core.round.initializers import retry_delay, step
from torchjob.core.round.reconcile import Create, Forget, Plan, Stop, World
from torchjob.core.shape.topology import ReplicaId

DATA, MODEL = step("dataset-initializer"), step("model-initializer")
MASTER, WORKER = ReplicaId("Master", 0), ReplicaId("Worker", 0)


def job(backoff: int | None = None) -> TorchJob:
    data: dict[str, Any] = job_data(workers=1)
    data["spec"]["initializers"] = [
        {"name": n, "template": {"spec": {"containers": [{"name": n, "image": f"hub/{n}"}]}},
         **({"backoffLimit": backoff} if backoff is not None else {})}
        for n in ("dataset-initializer", "model-initializer")]
    return job_from_data(data)


def steps_world(*observed: Any, replicas: tuple[Any, ...] = ()) -> World:
    return replace(world(*replicas), steps={o.replica.rtype: o for o in observed})


def creates(plan: Plan) -> list[str]:
    return [a.replica.name for a in plan.actions if isinstance(a, Create)]


def test_both_initializers_start_at_once_and_no_replica_before_both_succeeded() -> None:
    d = Driver(job())
    assert creates(d(steps_world(), 0)) == ["dataset-initializer-0", "model-initializer-0"]
    assert creates(d(steps_world(up(DATA), up(MODEL)), 1)) == []
    plan = d(steps_world(ended(DATA, 0, 2), up(MODEL)), 2)
    assert creates(plan) == [] and d.status.initializers["dataset-initializer"].state is StepState.SUCCEEDED
    assert d.status.initializers["model-initializer"].state is StepState.RUNNING
    plan = d(steps_world(ended(DATA, 0, 2), ended(MODEL, 0, 3)), 3)
    assert creates(plan) == ["master-0", "worker-0"]
    assert [e.reason for e in plan.events if e.reason == "Initialized"] == ["Initialized"]
    # done for good: their pods gone (cleaned up) or not, a restart of the replicas runs none again
    assert creates(d(steps_world(replicas=(up(MASTER), up(WORKER))), 4)) == []
    assert not d.status.finished


def test_a_failed_initializer_fails_the_job_with_its_words_stops_the_other_and_makes_no_replica() -> None:
    d = Driver(job(backoff=0))
    d(steps_world(), 0)
    failed = replace(ended(DATA, 1, 2), message="RepositoryNotFoundError: dataset org/missing is not on the hub")
    plan = d(steps_world(failed, up(MODEL)), 2)
    assert creates(plan) == []
    assert [(a.replica.name, a.attempt) for a in plan.actions if isinstance(a, Stop)] == [("model-initializer-0", 0)]
    f = d.status.failure
    assert f is not None and f.reason == "InitializerFailed" and f.replica == "dataset-initializer-0"
    assert f.exitCode == 1 and f.message.endswith("RepositoryNotFoundError: dataset org/missing is not on the hub")
    assert d.status.initializers["dataset-initializer"].state is StepState.FAILED
    # the next rounds make nothing either; the job is done once the other step has ended
    plan = d(steps_world(failed, ended(MODEL, 143, 3)), 3)
    assert creates(plan) == [] and plan.done


def test_a_failed_initializer_is_retried_up_to_its_backoff_limit_after_a_jobs_backoff() -> None:
    """Each retry waits as a Kubernetes Job's replacement pod does: 10 s after the first failure's end,
    20 s after the second's; the failed attempt is forgotten at once (its pod name is the next one's)."""
    d = Driver(job(backoff=2))
    d(steps_world(), 0)
    plan = d(steps_world(ended(DATA, 1, 1), up(MODEL)), 1)
    assert [a.replica.name for a in plan.actions if isinstance(a, Forget)] == ["dataset-initializer-0"]
    st = d.status.initializers["dataset-initializer"]
    assert not d.status.finished and st.attempt == 1 and st.notBefore == at(11)
    assert [e.message for e in plan.events if e.reason == "Restarting"] == [
        "initializer dataset-initializer failed (exit code 1); retried 10s after its end (attempt 1 of 2)"]
    plan = d(steps_world(up(MODEL)), 2)  # the failed one is gone: the next waits
    assert creates(plan) == [] and plan.requeue_at == at(11)
    assert creates(d(steps_world(up(MODEL)), 10.9)) == []
    assert [(a.replica.name, a.attempt) for a in d(steps_world(up(MODEL)), 11).actions if isinstance(a, Create)] == [
        ("dataset-initializer-0", 1)]
    assert d.status.initializers["dataset-initializer"].notBefore is None
    d(steps_world(ended(DATA, 1, 15, attempt=1), up(MODEL)), 15)
    assert d.status.initializers["dataset-initializer"].notBefore == at(35)  # 20 s after the second failure
    assert creates(d(steps_world(up(MODEL)), 34)) == []
    assert creates(d(steps_world(up(MODEL)), 35)) == ["dataset-initializer-0"]
    d(steps_world(ended(DATA, 1, 40, attempt=2), up(MODEL)), 40)
    assert d.status.finished and d.status.failure is not None and d.status.failure.attempt == 2


def test_a_retry_waits_from_the_failures_end_not_from_when_it_was_seen() -> None:
    d = Driver(job(backoff=1))
    d(steps_world(), 0)
    d(steps_world(ended(DATA, 1, 1), up(MODEL)), 8)  # ended at 1, first seen at 8
    assert d.status.initializers["dataset-initializer"].notBefore == at(11)
    assert creates(d(steps_world(up(MODEL)), 9)) == []
    assert creates(d(steps_world(up(MODEL)), 30)) == ["dataset-initializer-0"]  # long past: at once


def test_a_jobs_retry_delay_doubles_from_10_s_to_at_most_10_min() -> None:
    """kubernetes pkg/controller/job: DefaultJobPodFailureBackOff 10 s, MaxJobPodFailureBackOff 10 min."""
    assert [retry_delay(n) for n in range(9)] == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    assert retry_delay(100) == 600


def test_a_job_past_its_deadline_stops_its_initializers() -> None:
    data: dict[str, Any] = job().model_dump(mode="json", exclude_none=True)
    data["spec"]["runPolicy"] = {"activeDeadlineSeconds": 5}
    d = Driver(job_from_data(data))
    d(steps_world(), 0)
    plan = d(steps_world(up(DATA), up(MODEL)), 6)
    assert d.status.finished and sorted(a.replica.name for a in plan.actions if isinstance(a, Stop)) == [
        "dataset-initializer-0", "model-initializer-0"]


def test_a_suspended_job_retires_its_unfinished_initializers_and_runs_them_anew_on_resume() -> None:
    data: dict[str, Any] = job().model_dump(mode="json", exclude_none=True)
    d = Driver(job_from_data(data))
    d(steps_world(), 0)
    d(steps_world(ended(DATA, 0, 1), up(MODEL)), 1)
    d.job = d.job.model_copy(update={"spec": d.job.spec.model_copy(update={"runPolicy": d.job.run_policy.model_copy(
        update={"suspend": True})})})
    plan = d(steps_world(ended(DATA, 0, 1), up(MODEL)), 2)
    assert [(a.replica.name, a.attempt) for a in plan.actions if isinstance(a, Stop)] == [("model-initializer-0", 0)]
    assert d.status.initializers["model-initializer"].attempt == 1
    assert d.status.initializers["dataset-initializer"].state is StepState.SUCCEEDED  # done: not run again
    d.job = d.job.model_copy(update={"spec": d.job.spec.model_copy(update={"runPolicy": d.job.run_policy.model_copy(
        update={"suspend": False})})})
    plan = d(steps_world(ended(DATA, 0, 1)), 3)
    assert [(a.replica.name, a.attempt) for a in plan.actions if isinstance(a, Create)] == [("model-initializer-0", 1)]
