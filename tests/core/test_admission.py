"""Admission decided in core (core/policies/admission.py): what Kueue's Workload and the PodGroup say is a
fact of the World; hold, resume, suspend again, make and delete are decided here, and no pod is
planned while the PodGroup is not there or not admitted. Pure: no API, no clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.jobs import make_job
from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import Admission, Admit, Create, Plan, Seen, World, reconcile

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def queued(*, suspend: bool, decided: bool) -> TorchJob:
    """A job under a Kueue queue; `decided`: core has written its status before (it has conditions)."""
    job = make_job(run_policy={"suspend": suspend})
    if decided:
        job = job.model_copy(update={"status": reconcile(job, World(), NOW).status})
    return job


def decide(job: TorchJob, **admission: object) -> Plan:
    return reconcile(job, World(admission=Admission(**admission)), NOW)  # type: ignore[arg-type]


@pytest.mark.parametrize("workload", [Seen.NONE, Seen.NOT_OURS, Seen.PENDING, Seen.ADMITTED])
def test_a_new_queued_job_is_held_before_anything_is_decided_whatever_workload_is_there(workload: Seen) -> None:
    job = queued(suspend=False, decided=False)
    plan = decide(job, workload=workload)
    assert plan.admission == [Admit.HOLD] and Admit.HOLD.ends_round
    assert plan.actions == [] and plan.events == [] and plan.status == (job.status or plan.status)


def test_a_held_job_gets_its_workload_made_and_is_resumed_once_admitted_and_suspended_when_that_is_taken_back(
) -> None:
    held = queued(suspend=True, decided=False)
    waiting = decide(held, workload=Seen.NONE)
    assert waiting.admission == [Admit.MAKE_WORKLOAD] and waiting.status.is_true(ConditionType.SUSPENDED)
    assert not any(isinstance(a, Create) for a in waiting.actions)
    assert decide(held, workload=Seen.PENDING).admission == []  # waits for Kueue
    assert decide(held, workload=Seen.ADMITTED).admission == [Admit.RESUME]
    running = queued(suspend=False, decided=True)
    assert decide(running, workload=Seen.PENDING).admission == [Admit.REQUEUE]  # admission taken back
    assert decide(running, workload=Seen.ADMITTED).admission == []
    assert decide(running, workload=Seen.NOT_OURS).admission == []  # another's Workload is never read


def test_a_finished_jobs_own_workload_is_marked_finished_once() -> None:
    job = queued(suspend=False, decided=True)
    finished = job.model_copy(update={"status": reconcile(job, World(stop_requested="SIGTERM"), NOW).status})
    assert finished.status is not None and finished.status.finished
    assert decide(finished, workload=Seen.ADMITTED).admission == [Admit.FINISH_WORKLOAD]
    assert decide(finished, workload=Seen.ADMITTED, workload_finished=True).admission == []
    assert decide(finished, workload=Seen.NOT_OURS).admission == []


def test_pods_wait_for_the_podgroup_to_be_made_and_where_the_scheduler_admits_gangs_for_its_admission() -> None:
    job = make_job()
    volcano = decide(job, podgroup=Seen.NONE, podgroup_awaited=True)
    assert volcano.admission == [Admit.MAKE_PODGROUP] and not any(isinstance(a, Create) for a in volcano.actions)
    plugins = decide(job, podgroup=Seen.NONE, podgroup_awaited=False)
    assert plugins.admission == [Admit.MAKE_PODGROUP]  # made first, then the pods in the same round
    assert sum(isinstance(a, Create) for a in plugins.actions) == 3
    for held in (Seen.PENDING, Seen.NOT_OURS):
        plan = decide(job, podgroup=held, podgroup_awaited=True)
        assert plan.admission == [] and not any(isinstance(a, Create) for a in plan.actions)
    admitted = decide(job, podgroup=Seen.ADMITTED, podgroup_awaited=True)
    assert admitted.admission == [] and sum(isinstance(a, Create) for a in admitted.actions) == 3


def test_the_podgroup_of_a_suspended_or_finished_job_is_deleted_so_its_room_is_freed() -> None:
    suspended = make_job(run_policy={"suspend": True})
    assert decide(suspended, podgroup=Seen.ADMITTED).admission == [Admit.DELETE_PODGROUP]
    assert decide(suspended, podgroup=Seen.NONE).admission == []  # none of its own to delete
    stopped = reconcile(make_job(), World(stop_requested="SIGTERM"), NOW).status
    finished = make_job().model_copy(update={"status": stopped})
    assert decide(finished, podgroup=Seen.PENDING).admission == [Admit.DELETE_PODGROUP]
    assert decide(finished, podgroup=Seen.NOT_OURS).admission == []  # never another's


def test_a_job_with_no_admitter_is_decided_as_before() -> None:
    job = make_job()
    assert decide(job).admission == [] and reconcile(job, World(), NOW) == decide(job)
