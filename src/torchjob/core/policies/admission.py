"""Admission, decided: what Kueue's Workload and the gang scheduler's PodGroup say is observed into
the `World` (`World.admission`); what follows is decided here, and a runtime's gates only carry it
out (`Plan.admission`).

Kueue admits a job by resuming it: a job under a Kueue queue is held suspended before any pod, its
Workload is made while it waits, its admission resumes it, a lost admission suspends it again, and
its end marks the Workload finished. Holding, resuming and suspending again change the job's spec:
each ends the round (nothing else is decided; the job's watch event brings it back).

A gang scheduler's PodGroup exists while the job runs (made before its pods) and goes when the job
ends or is suspended, so that the scheduler stops holding room for it. Until it exists, and, where
the scheduler admits a gang (Volcano), until it is admitted, no pod is made."""

from __future__ import annotations

from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType, JobStatus
from torchjob.core.round.plan import Admit, Create, Plan
from torchjob.core.round.world import Seen, World


def queue_first(job: TorchJob, world: World) -> Admit | None:
    """Kueue's say before any other decision: a step that changes the job's spec (and ends the
    round), or None. A Workload of the job's name that it does not control is never read."""
    workload = world.admission.workload
    status = job.status or JobStatus()
    if workload is None or status.finished:
        return None
    suspended = bool(job.run_policy.suspend)
    if not status.conditions and not suspended:
        return Admit.HOLD  # before anything is made or written, whatever Workload is there
    if workload is Seen.NOT_OURS:
        return None  # the job stays as it is (a suspended one suspended) until the name is free
    if workload is Seen.ADMITTED and suspended:
        return Admit.RESUME
    if workload is Seen.PENDING and not suspended:
        return Admit.REQUEUE
    return None


def after_decision(world: World, plan: Plan) -> None:
    """The Workload and the PodGroup as the decided status wants them, and the pods held back while
    the PodGroup is not there (or not admitted)."""
    status = plan.status
    workload = world.admission.workload
    if workload is Seen.NONE and not status.finished:
        plan.admission.append(Admit.MAKE_WORKLOAD)
    elif workload in (Seen.PENDING, Seen.ADMITTED) and status.finished and not world.admission.workload_finished:
        plan.admission.append(Admit.FINISH_WORKLOAD)
    group = world.admission.podgroup
    if group is None:
        return
    if status.finished or status.is_true(ConditionType.SUSPENDED):
        if group in (Seen.PENDING, Seen.ADMITTED):
            plan.admission.append(Admit.DELETE_PODGROUP)
        return
    if group is Seen.NONE:
        plan.admission.append(Admit.MAKE_PODGROUP)  # before the pods, which join its gang
    admitted = group is Seen.ADMITTED or (group is Seen.NONE and not world.admission.podgroup_awaited)
    if not admitted:  # no pod joins another's gang, or one its scheduler has not admitted
        plan.actions = [a for a in plan.actions if not isinstance(a, Create)]
