"""(job, observed replicas, now) -> actions + new status. Pure and level-triggered.

Both runtimes call `reconcile` after every change they observe and apply what it returns; it
must give the same answer when called twice on the same inputs (nothing is counted twice). The
bookkeeping that makes that so lives in `status.replicas`: the attempt each replica should be
running. An observed attempt older than that is stale (its restart is already decided).

Decisions, in order (each step below; the first that decides the round ends it):
0. Kueue's say (core/policies/admission.py): hold a queued job suspended, resume an admitted one, suspend
   one whose admission was taken back; each changes the job's spec and ends the round.
1. A finished job: stop what still runs (after a success, once the others had SUCCESS_SETTLE_S
   to end on their own), purge per cleanPodPolicy, delete after the TTL.
2. What the runtime learned (`World.runner_lost`, `World.refused`): the job fails with it.
3. A suspended job: stop and forget every replica; resume restarts the clock.
4. A user's stop request, or the active deadline: the job fails.
5. Success: a policy on a completed replica type, or the success rules (the master succeeded; no
   master: every worker; elastic: any worker; minSuccess).
6. Exits, first exit first (core/policies/lifecycle.py): a lifecycle policy, or restartPolicy within
   backoffLimit, or the job fails; a gang's lost rank restarts the gang, uncounted. A worker that
   fails after every rank reported its work complete waits for the master first (_died_after_done).
   Then stalls (core/policies/stalls.py).
7. Missing replicas are created (after their restart backoff).
Before all of it, each replica deleted by someone else is decided on (core/round/facts.py): an eviction,
a lost rank of a gang, or simply missing.
When the job fails, every replica still running is stopped at once, whatever cleanPodPolicy
says; cleanPodPolicy decides only what is kept of finished replicas (`All` purges them).
After all of it, the Workload and the PodGroup as the decided status wants them, and no pod while
the PodGroup is not there or not admitted (core/policies/admission.py).

The pieces live in world.py (what is observed), plan.py (what is decided), conditions.py,
lifecycle.py, stalls.py and facts.py; this module re-exports what runtimes and tests import.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from torchjob.api.model import MASTER, REPLICA_TYPES, RestartScope, TorchJob
from torchjob.api.status import (
    ConditionType,
    EventType,
    FailureInfo,
    JobStatus,
    Reason,
    ReplicaStatus,
)
from torchjob.core.policies import admission, policy
from torchjob.core.policies.lifecycle import act_on_completed_types, act_on_exit, match_policy, restart_for_lost_rank
from torchjob.core.policies.stalls import act_on_stalls, quiet_replicas
from torchjob.core.round import initializers
from torchjob.core.round.conditions import drop_condition, fail, finish, set_condition
from torchjob.core.round.facts import as_core_sees, evicted, fail_by_fact, lost_rank, refuse
from torchjob.core.round.plan import (
    Abandon,
    Action,
    Admit,
    Create,
    DeleteJob,
    Event,
    Forget,
    Plan,
    Purge,
    Round,
    Stop,
)
from torchjob.core.round.success import success
from torchjob.core.round.world import Admission, Observed, Phase, Refusal, Seen, World
from torchjob.core.shape.topology import ReplicaId, has_master, replica_total, replicas

__all__ = [
    "SUCCESS_SETTLE_S", "Abandon", "Action", "Admission", "Admit", "Create", "DeleteJob", "Event", "Forget",
    "Observed", "Phase", "Plan", "Purge", "Refusal", "Seen", "Stop", "World", "as_core_sees", "evicted", "lost_rank",
    "match_policy", "quiet_replicas", "reconcile", "refuse", "set_condition",
]

SUCCESS_SETTLE_S = 10.0
DONE_GRACE_S = SUCCESS_SETTLE_S  # how long a failure after the work was done waits for the master's end


def reconcile(job: TorchJob, world: World, now: datetime) -> Plan:
    first = admission.queue_first(job, world)
    if first is not None:  # the job's spec changes first; its watch event brings it back
        return Plan(status=(job.status or JobStatus()).model_copy(deep=True), admission=[first])
    world = as_core_sees(job, world, now)
    plan = _decide(job, world, now)
    initializers.halt(job, world, plan)
    admission.after_decision(world, plan, now)
    was_finished = job.status is not None and job.status.finished
    if plan.status.finished and not was_finished:
        plan.requeue(now)  # the end's own work (stop, clean up, TTL) comes in the next round
    # Done: finished, nothing running, nothing left to clean up.
    plan.done = (
        was_finished
        and not any(o.phase.active for o in world.replicas.values()) and not initializers.active(world)
        and not any(isinstance(a, Purge | DeleteJob) for a in plan.actions)
    )
    return plan


def _decide(job: TorchJob, world: World, now: datetime) -> Plan:
    # The round's own status, the observed one left as it was: deep, but each replica's state shared until the
    # round changes it (Round.replica_state: a copy of each of thousands was most of a big job's round).
    seen = job.status or JobStatus()
    status = seen.model_copy(update={"replicas": {}}).model_copy(deep=True, update={"replicas": dict(seen.replicas)})
    r = Round(job, world, now, Plan(status=status))
    for rid in replicas(job):
        if rid.name not in status.replicas:
            r.replica_state(rid.name)
    _note_created(r)
    if _clean_up_finished(r) or fail_by_fact(r) or _hold_suspended(r):
        return _counted(r)
    _note_resumed(r)
    if status.startTime is None:
        status.startTime = now
    r.current = _current_attempts(r)
    if _stopped_or_past_deadline(r) or _succeeded(r) or _exits_and_stalls(r) or not initializers.ready(r):
        return _counted(r)  # no replica before every initializer has succeeded
    _start_missing(r)
    return _counted(r)


def _counted(r: Round) -> Plan:
    """The plan, with status.replicaStatuses counted from what is observed."""
    status = r.status
    counts = {t: [0, 0, 0, 0] for t in REPLICA_TYPES if t in r.job.spec.pytorchReplicaSpecs}  # plain ints: fast
    for rid in replicas(r.job):
        obs, st = r.world.replicas.get(rid.name), status.replicas[rid.name]
        rs = counts[rid.rtype]
        rs[3] += st.restarts
        if obs is not None and obs.attempt >= st.attempt:
            rs[0 if obs.phase.active else 1 if obs.phase is Phase.SUCCEEDED else 2] += 1
    status.replicaStatuses = {t: ReplicaStatus(active=a, succeeded=s, failed=f, restarts=n)
                              for t, (a, s, f, n) in counts.items()}
    return r.plan


def _note_created(r: Round) -> None:
    if r.status.condition(ConditionType.CREATED) is None:
        set_condition(r.status, ConditionType.CREATED, True, Reason.CREATED, f"TorchJob {r.job.name} is created.",
                      r.now)
        r.plan.event(EventType.NORMAL, Reason.CREATED,
                     f"job {r.job.name} created with {len(replicas(r.job))} "
                     f"replica{'' if len(replicas(r.job)) == 1 else 's'}")


# --- 1. finished -----------------------------------------------------------------------------


def _clean_up_finished(r: Round) -> bool:
    """A finished job: after a success the other replicas get a moment to end on their own (DDP
    workers are usually tearing down their process group); after a failure they are stopped now.
    Then cleanPodPolicy and the TTL."""
    status, plan, world, now = r.status, r.plan, r.world, r.now
    if not status.finished:
        return False
    settle_until = (status.completionTime or now) + timedelta(seconds=SUCCESS_SETTLE_S)
    succeeded = status.condition(ConditionType.SUCCEEDED)
    settles = succeeded is not None and succeeded.status == "True" and succeeded.reason == Reason.SUCCEEDED
    if settles and now < settle_until:
        if any(o.phase.active for o in world.replicas.values()):
            plan.requeue(settle_until)
    else:
        plan.stop_active(world, "the job has finished")
    rp = r.job.run_policy
    if rp.cleanPodPolicy == "All":
        plan.actions.extend(Purge(o.replica, o.attempt) for o in world.replicas.values() if not o.phase.active)
    alive = any(o.phase.active for o in world.replicas.values())
    expires = policy.ttl_expires_at(status.completionTime, rp.ttlSecondsAfterFinished)
    if expires is not None and not alive:
        if now >= expires:
            plan.actions.append(DeleteJob("ttlSecondsAfterFinished has passed"))
        else:
            plan.requeue(expires)
    return True


# --- 3. suspended ----------------------------------------------------------------------------


def _hold_suspended(r: Round) -> bool:
    """A suspended job (a stop request still ends it): every replica stopped and forgotten, each
    to start anew on resume, the clock (startTime) with them."""
    status, job = r.status, r.job
    if not job.run_policy.suspend or r.world.stop_requested:
        return False
    current = {n: o for n, o in r.world.replicas.items()
               if n in status.replicas and o.attempt >= status.replicas[n].attempt}
    if not status.is_true(ConditionType.SUSPENDED) and success(job, current):
        return False  # its work was done before the suspend landed: it succeeds, with nothing to resume
    if set_condition(status, ConditionType.SUSPENDED, True, Reason.SUSPENDED, f"TorchJob {job.name} is suspended.",
                     r.now):
        r.plan.event(EventType.NORMAL, Reason.SUSPENDED, "job suspended: every replica is stopped")
        if status.is_true(ConditionType.RUNNING):
            set_condition(status, ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended", r.now)
        drop_condition(status, ConditionType.RESTARTING)
    for held in r.world.replicas.values():
        r.plan.retire(held, "the job is suspended")
        st = r.replica_state(held.replica.name)
        st.attempt = max(st.attempt, held.attempt + 1)
        st.notBefore = None
    status.startTime = None
    return True


def _note_resumed(r: Round) -> None:
    if r.status.is_true(ConditionType.SUSPENDED):
        set_condition(r.status, ConditionType.SUSPENDED, False, Reason.RESUMED, f"TorchJob {r.job.name} is resumed.",
                      r.now)
        r.plan.event(EventType.NORMAL, Reason.RESUMED, "job resumed: replicas start again")


def _current_attempts(r: Round) -> dict[str, Observed]:
    """The observed attempt of each replica that is its current one; older ones are retired."""
    current: dict[str, Observed] = {}
    for rid in replicas(r.job):
        seen = r.world.replicas.get(rid.name)
        if seen is None:
            continue
        if seen.attempt < r.status.replicas[rid.name].attempt:
            r.plan.retire(seen, "replaced by a newer attempt")
        else:
            current[rid.name] = seen
    return current


# --- 4. stopped, or past the deadline ----------------------------------------------------------


def _stopped_or_past_deadline(r: Round) -> bool:
    status, world, now = r.status, r.world, r.now
    rp = r.job.run_policy
    deadline = policy.deadline_at(status.startTime, rp.activeDeadlineSeconds)
    if world.stop_requested:
        fail(r.plan, now, Reason.TERMINATED, f"job stopped by {world.stop_requested}", FailureInfo(
            reason=Reason.TERMINATED, message=f"stopped by {world.stop_requested}", signal=world.stop_requested))
    elif deadline is not None and now >= deadline:
        fail(r.plan, now, Reason.DEADLINE_EXCEEDED,
             f"job ran longer than activeDeadlineSeconds ({rp.activeDeadlineSeconds}s)")
    if status.finished:
        r.plan.stop_active(world, status.failure.message if status.failure else "the job has finished")
        return True
    if deadline is not None:
        r.plan.requeue(deadline)
    return False


# --- 5. success ------------------------------------------------------------------------------


def _succeeded(r: Round) -> bool:
    expected = replicas(r.job)
    act_on_completed_types(r, expected)
    if not r.status.finished:
        _apply_success_rules(r)
    if not r.status.finished:
        return False
    if any(o.phase.active for o in r.world.replicas.values()):
        r.plan.requeue(r.now + timedelta(seconds=SUCCESS_SETTLE_S))
    return True


def _apply_success_rules(r: Round) -> None:
    won = success(r.job, r.current)
    if won is None:
        return
    finish(r.plan, r.now, True, *won)
    if r.job.spec.minSuccess is None and has_master(r.job):
        for o in r.current.values():
            if o.phase is Phase.FAILED and o.reported_done and o.exit_code is not None:
                r.plan.event(EventType.WARNING, Reason.FAILED_AFTER_DONE,
                             f"{o.replica.name} ended with {policy.describe_exit(o.exit_code)} after every rank "
                             "reported its work complete; the master succeeded, so the job succeeded without "
                             "a restart")


# --- 6. exits and stalls -----------------------------------------------------------------------


def _exits_and_stalls(r: Round) -> bool:
    # A gang's lost rank ended too, when it was deleted: in time order with the exits, so that the
    # peers' failures that follow from it are of attempts already replaced.
    ended = [o for o in r.current.values() if not o.phase.active or lost_rank(r.job, o)]
    ended.sort(key=lambda o: (o.finished_at or r.now, o.replica))
    for obs in ended:
        if r.status.finished:
            break
        if r.current.get(obs.replica.name) is not obs:  # replaced by a restart decided earlier in this loop
            continue
        if obs.phase.active:
            restart_for_lost_rank(r, obs)
        elif not _died_after_done(r, obs):
            act_on_exit(r, obs)
    if not r.status.finished:
        act_on_stalls(r)
    if not r.status.finished:
        return False
    r.plan.stop_active(r.world, r.status.failure.message if r.status.failure else "the job has finished")
    return True


def _died_after_done(r: Round, obs: Observed) -> bool:
    """Whether this failure waits (issue 43): a worker that failed after every rank's latest progress
    report said its work was complete died in its teardown (torch's gloo worker threads abort a
    process whose interpreter is finalizing: docs/explanation/faults.md). The master's end decides,
    as it decides a job's success: the failure waits for it, DONE_GRACE_S at most; the master's
    success ends the job Succeeded (step 5, with a FailedAfterDone event), its failure or no end
    within the grace acts on this failure as on any other. Never for the master itself (what it did
    after its last report, a save, is unknown), nor for a job whose success is minSuccess's."""
    job = r.job
    master = r.current.get(ReplicaId(MASTER, 0).name)
    if (obs.phase is not Phase.FAILED or not obs.reported_done or job.spec.minSuccess is not None
            or master is None or master is obs or master.phase is not Phase.RUNNING):
        return False
    if not all((o := r.current.get(rid.name)) is not None and o.reported_done for rid in replicas(job)):
        return False
    until = (obs.finished_at or r.now) + timedelta(seconds=DONE_GRACE_S)
    if r.now >= until:
        return False
    r.plan.requeue(until)
    return True


# --- 7. start what is missing ------------------------------------------------------------------


def _start_missing(r: Round) -> None:
    """Create each missing replica whose time has come; the job is Running once every replica runs
    (a pod still Pending, e.g. unscheduled, is not running yet)."""
    expected = replicas(r.job)
    waiting = _old_round_lingers(r)
    for rid in expected if not waiting else ():
        if rid.name not in r.current:
            waiting = not _create_if_due(r, rid) or waiting
    current = r.current
    all_up = not waiting and all(
        rid.name in current and current[rid.name].phase in (Phase.RUNNING, Phase.SUCCEEDED) for rid in expected
    ) and any(o.phase is Phase.RUNNING for o in current.values())
    if all_up and set_condition(r.status, ConditionType.RUNNING, True, Reason.RUNNING,
                                f"TorchJob {r.job.name} is running.", r.now):
        r.plan.event(EventType.NORMAL, Reason.RUNNING, "every replica is running")


def _old_round_lingers(r: Round) -> bool:
    """A gang (restartScope Job) whose earlier round still has a rank alive (running, or going away):
    its new round starts once all of the old one has ended. A new rank started beside an old one can
    join the old round's rendezvous (the old master's store still answers while it goes away) and end
    with it, leaving the new round a rank short for good (chaos seed 5: a deleted master ignoring
    SIGTERM for its grace period; the new worker ran its collective with it and succeeded)."""
    if r.job.restart_scope is not RestartScope.JOB or replica_total(r.job) < 2:
        return False
    for name, obs in r.world.replicas.items():
        st = r.status.replicas.get(name)
        if st is not None and obs.attempt < st.attempt and obs.phase.active and not (obs.deleted and not obs.stopping):
            return True
    return False


def _create_if_due(r: Round, rid: ReplicaId) -> bool:
    """Create `rid`'s current attempt; False while it must wait (for its stale attempt to go, its
    restart backoff, or the replicas it depends on)."""
    st = r.status.replicas[rid.name]
    stale = r.world.replicas.get(rid.name)
    if stale is not None and stale.attempt < st.attempt and not (stale.deleted and not stale.stopping) and not (
            stale.in_place and not stale.phase.active):
        return False  # the stale attempt goes first (same pod name on a cluster), unless gone or ended in place
    if st.notBefore is not None and r.now < st.notBefore:
        r.plan.requeue(st.notBefore)
        return False
    if not _dependencies_ready(r.job, rid.rtype, r.current):
        return False  # started when the replicas it depends on run
    if st.notBefore is not None:
        r.replica_state(rid.name).notBefore = None
    r.plan.actions.append(Create(rid, st.attempt))
    return True


def _dependencies_ready(job: TorchJob, rtype: str, current: Mapping[str, Observed]) -> bool:
    """dependsOn: every replica of the named types (iteration all, the default) or of one of them
    (any) is running or has succeeded."""
    dep = job.spec.pytorchReplicaSpecs[rtype].dependsOn
    if dep is None:
        return True

    def ready(t: str) -> bool:
        obs = [current.get(rid.name) for rid in replicas(job) if rid.rtype == t]
        return all(o is not None and o.phase in (Phase.RUNNING, Phase.SUCCEEDED) for o in obs)

    check = any if dep.iteration == "any" else all
    return check(ready(t) for t in dep.name)
