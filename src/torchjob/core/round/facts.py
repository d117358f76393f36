"""Facts a runtime learned, decided on here: a replica deleted by someone else (an eviction, a lost
rank of a gang, or simply missing), a refusal to run the job as written, a lost runner."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from torchjob.api.model import LifecycleEvent, RestartScope, TorchJob
from torchjob.api.status import ConditionType, ExitReason, JobStatus, Reason
from torchjob.core.policies.lifecycle import match_policy
from torchjob.core.round.conditions import fail
from torchjob.core.round.plan import Abandon, Plan, Round
from torchjob.core.round.world import Observed, Phase, Refusal, World
from torchjob.core.shape.topology import replica_total


def _deleted_while_running(job: TorchJob, obs: Observed) -> bool:
    """Deleted by someone else (`Observed.deleted`) while the job runs (not finished, not suspended),
    the attempt current and still running. Torchjob itself never deletes a current replica of a
    running job: it moves the attempt on, or ends or suspends the job, first."""
    status = job.status
    if not obs.deleted or status is None or status.finished or status.is_true(ConditionType.SUSPENDED):
        return False
    if not obs.phase.active:
        return False
    current = status.replicas.get(obs.replica.name)
    return current is not None and current.attempt == obs.attempt


def evicted(job: TorchJob, obs: Observed) -> bool:
    """A replica deleted while the job runs is Volcano's PodEvicted when a lifecycle policy acts on
    that event."""
    return (_deleted_while_running(job, obs)
            and match_policy(job, obs.replica.rtype, LifecycleEvent.POD_EVICTED, None) is not None)


def lost_rank(job: TorchJob, obs: Observed) -> bool:
    """A replica deleted while the job runs, with no policy on PodEvicted, in a gang (restartScope
    Job, more than one replica): a rank the others cannot go on without. Made again alone, it would
    wait in its rendezvous for peers that have moved on or ended; core restarts the whole gang."""
    return (_deleted_while_running(job, obs) and job.restart_scope is RestartScope.JOB
            and replica_total(job) > 1
            and match_policy(job, obs.replica.rtype, LifecycleEvent.POD_EVICTED, None) is None)


def as_core_sees(job: TorchJob, world: World, now: datetime) -> World:
    """The world with each deleted replica decided on: an eviction is a failure with reason Evicted;
    a lost rank is kept as it was seen last (the gang restarts for it: core/policies/lifecycle.py). In a
    finished job a deleted replica has ended (as the eviction that ended it had). Otherwise it is
    still there while it goes away (its name is taken), and missing once it is gone: made again."""
    if not any(o.deleted for o in world.replicas.values()):
        return world
    finished = job.status is not None and job.status.finished
    seen: dict[str, Observed] = {}
    for name, obs in world.replicas.items():
        if evicted(job, obs):
            seen[name] = replace(obs, phase=Phase.FAILED, reason=ExitReason.EVICTED,
                                 message=obs.message or "the replica was deleted while it ran",
                                 finished_at=obs.finished_at or now)
        elif not obs.deleted or lost_rank(job, obs):
            seen[name] = obs
        elif finished:
            seen[name] = replace(obs, phase=Phase.FAILED) if obs.phase.active else obs
        elif obs.stopping and obs.phase.active:
            seen[name] = obs
    return replace(world, replicas=seen)


def fail_by_fact(r: Round) -> bool:
    """The runner is lost (every open attempt is abandoned), or the job is refused (every running
    replica is stopped): the job fails with that reason. Returns whether it did."""
    if r.world.runner_lost is not None:
        fail(r.plan, r.now, Reason.SUPERVISOR_LOST, r.world.runner_lost)
        for obs in r.world.replicas.values():
            if obs.phase.active:
                r.plan.actions.append(Abandon(obs.replica, obs.attempt, Reason.SUPERVISOR_LOST))
        return True
    if r.world.refused is not None:
        fail(r.plan, r.now, r.world.refused.reason, r.world.refused.message)
        r.plan.stop_active(r.world, r.world.refused.message)
        return True
    return False


def refuse(status: JobStatus, refusal: Refusal, now: datetime) -> Plan:
    """A job the runtime cannot even read as a TorchJob (its stored spec fails the model) fails with
    the refusal, as `World.refused` fails one it can read; nothing of it runs, so nothing is stopped."""
    plan = Plan(status=status.model_copy(deep=True))
    if not plan.status.finished:
        fail(plan, now, refusal.reason, refusal.message)
    return plan
