"""Admission, decided: what Kueue's Workload and the gang scheduler's PodGroup say is observed into
the `World` (`World.admission`); what follows is decided here, and a runtime's gates only carry it
out (`Plan.admission`).

Kueue admits a job by resuming it: a job under a Kueue queue is held suspended before any pod, its
Workload is made while it waits, its admission resumes it, a lost admission suspends it again, and
its end marks the Workload finished. Holding, resuming and suspending again change the job's spec:
each ends the round (nothing else is decided; the job's watch event brings it back).

A gang scheduler's PodGroup exists while the job runs (made before its pods) and goes when the job
ends or is suspended, so that the scheduler stops holding room for it. Until it exists, and, where
the scheduler admits a gang (Volcano), until it is admitted, no pod is made.

Once made, a pod waits for the scheduler to find it a node: while one of the job's current pods is
unschedulable (no node fits: a lost or cordoned node, too little room), the job's Scheduled
condition is False with reason WaitingForNode, which replicas wait and the scheduler's words, and a
Warning event says so once; it goes once every pod has a node (`placement`)."""

from __future__ import annotations

import heapq
from datetime import datetime

from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType, EventType, JobStatus, Reason
from torchjob.core.round.conditions import drop_condition, set_condition
from torchjob.core.round.plan import Admit, Create, Plan
from torchjob.core.round.world import Phase, Seen, World

NAMED_AT_MOST = 3  # replicas named in the message; past them, how many more (a job of thousands waits whole)
SAID_AT_MOST = 1024  # characters of the scheduler's words kept (a condition's message is bounded)


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


def after_decision(world: World, plan: Plan, now: datetime) -> None:
    """The Workload and the PodGroup as the decided status wants them, the pods held back while
    the PodGroup is not there (or not admitted), and whether the job waits for a node."""
    status = plan.status
    placement(world, plan, now)
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


def placement(world: World, plan: Plan, now: datetime) -> None:
    """Scheduled False (WaitingForNode) while a current pod of a replica or an initializer step is
    unschedulable, with the scheduler's words and which wait, a Warning event when it starts; none
    once every pod has a node, or the job is finished or suspended."""
    status = plan.status
    waiting: list[tuple[str, int, str]] = []  # (type, index, name): master-0 before worker-2 before worker-10
    said = ""
    if not (status.finished or status.is_true(ConditionType.SUSPENDED)):
        # one cheap pass (a round of thousands of replicas pays little): only the unschedulable looked at
        for steps, found in ((False, world.replicas), (True, world.steps)):
            for name, obs in found.items():
                if obs.unschedulable is None or obs.phase is not Phase.PENDING or obs.stopping or obs.deleted:
                    continue  # on a node (or not tried yet), or going away
                kept = None if steps else status.replicas.get(name)
                if kept is not None and obs.attempt < kept.attempt:
                    continue  # an old attempt, about to go
                waiting.append((obs.replica.rtype, obs.replica.index, name))
                said = said or obs.unschedulable
    if not waiting:
        if status.condition(ConditionType.SCHEDULED) is not None:
            drop_condition(status, ConditionType.SCHEDULED)
        return
    verb = "waits" if len(waiting) == 1 else "wait"
    first = [n for _, _, n in heapq.nsmallest(NAMED_AT_MOST, waiting)]
    more = f" and {len(waiting) - NAMED_AT_MOST:,} more" if len(waiting) > NAMED_AT_MOST else ""
    message = f"{', '.join(first)}{more} {verb} for a node: {said[:SAID_AT_MOST]}"
    if set_condition(status, ConditionType.SCHEDULED, False, Reason.WAITING_FOR_NODE, message, now):
        plan.event(EventType.WARNING, Reason.WAITING_FOR_NODE, message)
        return
    current = status.condition(ConditionType.SCHEDULED)
    if current is not None and current.message != message:  # other replicas, or the scheduler's new words
        current.message, current.lastUpdateTime = message, now

