"""(job, observed replicas, now) -> actions + new status. Pure and level-triggered.

Both runtimes call `reconcile` after every change they observe and apply what it returns; it
must give the same answer when called twice on the same inputs (nothing is counted twice). The
bookkeeping that makes that so lives in `status.replicas`: the attempt each replica should be
running. An observed attempt older than that is stale (its restart is already decided).

Decisions, in order:
1. A finished job: stop what still runs (after a success, once the others had SUCCESS_SETTLE_S
   to end on their own), purge per cleanPodPolicy, delete after the TTL.
2. What the runtime learned (`World.runner_lost`, `World.refused`): the job fails with it.
3. A suspended job: stop and forget every replica; resume restarts the clock.
4. A user's stop request, or the active deadline: the job fails.
5. Success: the master succeeded (no master: every worker; elastic: any worker).
6. Failures, first exit first: restart per the replica's policy and backoffLimit, or fail the job.
   Then stalls (runPolicy.progressDeadlineSeconds): a replica that reported progress and then went
   quiet is the event Stalled; a lifecycle policy acts on it, or the job fails with
   ProgressDeadlineExceeded naming the quiet replicas.
7. Missing replicas are created (after their restart backoff).
Before all of it, each replica deleted by someone else is decided on (`as_core_sees`): an eviction
or simply missing.
When the job fails, every replica still running is stopped at once, whatever cleanPodPolicy
says; cleanPodPolicy decides only what is kept of finished replicas (`All` purges them).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from torchjob.api.model import (
    MASTER,
    REPLICA_TYPES,
    WORKER,
    Condition,
    FailureInfo,
    JobStatus,
    LifecyclePolicy,
    ReplicaAttemptState,
    ReplicaStatus,
    TorchJob,
)
from torchjob.api.status import ConditionType, EventType, Reason
from torchjob.core import policy
from torchjob.core.topology import ReplicaId, has_master, replicas

SUCCESS_SETTLE_S = 10.0


class Phase(str, enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def active(self) -> bool:
        return self in (Phase.PENDING, Phase.RUNNING)


@dataclass(frozen=True)
class Observed:
    """The current attempt of one replica, as the runtime sees it."""

    replica: ReplicaId
    attempt: int
    phase: Phase
    exit_code: int | None = None
    reason: str | None = None  # e.g. "Error", "Evicted", "OOMKilled"
    message: str | None = None
    finished_at: datetime | None = None
    stopping: bool = False  # a stop was asked for and is in progress
    last_report: datetime | None = None  # when this attempt last reported progress (None: never)
    # Deleted, by someone other than torchjob as far as the runtime knows (a drain, `kubectl delete
    # pod`): `stopping` while it is still going away, not once it is gone (its last state is kept
    # until core has decided on it). Core decides what it means (`evicted`): with a lifecycle policy
    # on PodEvicted, while the job runs and the attempt is current, a failure with reason Evicted
    # (finished at `finished_at`, the deletion's time); otherwise the replica is simply missing and
    # is made again (Kubeflow's behaviour), once it is gone.
    deleted: bool = False


@dataclass(frozen=True)
class Refusal:
    """The runtime cannot run this job as written: a fact it learned. Core fails the job with it."""

    reason: str  # InvalidSpec | PodGroupUnavailable | KueueUnavailable | LocalSetupFailed
    message: str


@dataclass(frozen=True)
class World:
    replicas: Mapping[str, Observed] = field(default_factory=dict)  # by replica name
    stop_requested: str | None = None  # why the user stopped the job (e.g. "SIGINT")
    # The job fails with this reason and message (Failed condition, status.failure, a Warning event,
    # every running replica stopped), once; a finished job ignores it.
    refused: Refusal | None = None
    # Local: the supervisor died; the message says how that was found. The job fails with reason
    # SupervisorLost and every open attempt is ended (Abandon: nothing is left to stop them).
    runner_lost: str | None = None


# --- actions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    replica: ReplicaId
    attempt: int


@dataclass(frozen=True)
class Stop:
    """Terminate a running attempt (grace period, then kill); its record is kept."""

    replica: ReplicaId
    attempt: int
    reason: str


@dataclass(frozen=True)
class Forget:
    """A finished attempt is no longer current (it was replaced, or the job was suspended)."""

    replica: ReplicaId
    attempt: int


@dataclass(frozen=True)
class Purge:
    """Remove a finished attempt and what it left (cleanPodPolicy: All)."""

    replica: ReplicaId
    attempt: int


@dataclass(frozen=True)
class Abandon:
    """An attempt whose runner is gone (nothing is left to stop it): record it as ended, with `reason`."""

    replica: ReplicaId
    attempt: int
    reason: str


@dataclass(frozen=True)
class DeleteJob:
    reason: str


Action = Create | Stop | Forget | Purge | Abandon | DeleteJob


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_at: datetime | None = None  # reconcile again at this time at the latest
    done: bool = False  # finished and nothing left running: the runtime may stop watching

    def requeue(self, at: datetime) -> None:
        if self.requeue_at is None or at < self.requeue_at:
            self.requeue_at = at

    def event(self, type_: EventType | str, reason: Reason | str, message: str) -> None:
        self.events.append(Event(str(type_), str(reason), message))


# --- conditions ------------------------------------------------------------------------


def set_condition(
    status: JobStatus, ctype: ConditionType | str, value: bool, reason: Reason | str, message: str, now: datetime
) -> bool:
    """Set a condition; returns whether anything changed. Failed is terminal; Running and
    Restarting exclude each other; a finished job is not Running."""
    if status.is_true(ConditionType.FAILED):
        return False
    state: Literal["True", "False"] = "True" if value else "False"
    current = status.condition(ctype)
    if current is not None and current.status == state and current.reason == reason:
        return False
    if value and ctype in ("Running", "Restarting"):
        other = "Restarting" if ctype == "Running" else "Running"
        status.conditions = [c for c in status.conditions if c.type != other]
    if value and ctype in ("Succeeded", "Failed"):
        status.conditions = [c for c in status.conditions if c.type != "Restarting"]
        running = status.condition(ConditionType.RUNNING)
        if running is not None and running.status == "True":
            running.status, running.reason, running.lastTransitionTime = "False", str(ctype), now
            running.lastUpdateTime = now
    if current is None:
        status.conditions.append(
            Condition.model_validate(dict(type=ctype, status=state, reason=reason, message=message,
                                          lastTransitionTime=now, lastUpdateTime=now))
        )
    else:
        if current.status != state:
            current.lastTransitionTime = now
        current.status, current.reason, current.message, current.lastUpdateTime = state, str(reason), message, now
    return True


# --- the reconcile ---------------------------------------------------------------------


def _finish(plan: Plan, job: TorchJob, world: World, now: datetime, succeeded: bool,
            reason: str, message: str) -> None:
    status = plan.status
    if set_condition(status, "Succeeded" if succeeded else "Failed", True, reason, message, now):
        status.completionTime = now
        plan.event("Normal" if succeeded else "Warning", reason, message)


def _failure_of(obs: Observed, reason: str, message: str) -> FailureInfo:
    """The root cause, with the replica's own word where it left one (torch's error file, a pod's
    termination message), so that it survives its logs and pods."""
    code = obs.exit_code
    return FailureInfo(
        reason=reason,
        message=f"{message}: {obs.message}" if obs.message else message,
        replica=obs.replica.name,
        attempt=obs.attempt,
        exitCode=code,
        signal=policy.signal_name(code) if code is not None else None,
    )


def _exit_text(obs: Observed) -> str:
    text = policy.describe_exit(obs.exit_code) if obs.exit_code is not None else "an unknown exit code"
    if obs.reason and obs.reason not in ("Error", "Completed"):
        text += f", {obs.reason}"
    return text


def _count(job: TorchJob, world: World, status: JobStatus) -> None:
    counts = {t: ReplicaStatus() for t in REPLICA_TYPES if t in job.spec.pytorchReplicaSpecs}
    for rid in replicas(job):
        obs = world.replicas.get(rid.name)
        rs = counts[rid.rtype]
        rs.restarts += status.replicas[rid.name].restarts
        if obs is None or obs.attempt < status.replicas[rid.name].attempt:
            continue
        if obs.phase.active:
            rs.active += 1
        elif obs.phase is Phase.SUCCEEDED:
            rs.succeeded += 1
        else:
            rs.failed += 1
    status.replicaStatuses = counts


def _stop_active(plan: Plan, world: World, reason: str) -> None:
    stopping = {(a.replica, a.attempt) for a in plan.actions if isinstance(a, Stop)}
    for obs in world.replicas.values():
        if obs.phase.active and not obs.stopping and (obs.replica, obs.attempt) not in stopping:
            plan.actions.append(Stop(obs.replica, obs.attempt, reason))


def reconcile(job: TorchJob, world: World, now: datetime) -> Plan:
    world = as_core_sees(job, world, now)
    plan = _decide(job, world, now)
    was_finished = job.status is not None and job.status.finished
    if plan.status.finished and not was_finished:
        plan.requeue(now)  # the end's own work (stop, clean up, TTL) comes in the next round
    # Done: finished, nothing running, nothing left to clean up.
    plan.done = (
        was_finished
        and not any(o.phase.active for o in world.replicas.values())
        and not any(isinstance(a, Purge | DeleteJob) for a in plan.actions)
    )
    return plan


def _decide(job: TorchJob, world: World, now: datetime) -> Plan:
    status = (job.status or JobStatus()).model_copy(deep=True)
    plan = Plan(status=status)
    expected = replicas(job)
    for rid in expected:
        status.replicas.setdefault(rid.name, ReplicaAttemptState())
    rp = job.run_policy

    if status.condition(ConditionType.CREATED) is None:
        set_condition(status, ConditionType.CREATED, True, Reason.CREATED, f"TorchJob {job.name} is created.", now)
        plan.event(EventType.NORMAL, Reason.CREATED, f"job {job.name} created with {len(expected)} replicas")

    # 1. Finished. After a success the other replicas get a moment to end on their own (DDP
    # workers are usually tearing down their process group); after a failure they are stopped now.
    if status.finished:
        settle_until = (status.completionTime or now) + timedelta(seconds=SUCCESS_SETTLE_S)
        succeeded = status.condition(ConditionType.SUCCEEDED)
        settles = succeeded is not None and succeeded.status == "True" and succeeded.reason == "Succeeded"
        if settles and now < settle_until:
            if any(o.phase.active for o in world.replicas.values()):
                plan.requeue(settle_until)
        else:
            _stop_active(plan, world, "the job has finished")
        if rp.cleanPodPolicy == "All":
            for obs in world.replicas.values():
                if not obs.phase.active:
                    plan.actions.append(Purge(obs.replica, obs.attempt))
        alive = any(o.phase.active for o in world.replicas.values())
        expires = policy.ttl_expires_at(status.completionTime, rp.ttlSecondsAfterFinished)
        if expires is not None and not alive:
            if now >= expires:
                plan.actions.append(DeleteJob("ttlSecondsAfterFinished has passed"))
            else:
                plan.requeue(expires)
        _count(job, world, status)
        return plan

    # 2. What the runtime learned: its runner is gone, or it cannot run the job as written.
    if world.runner_lost is not None or world.refused is not None:
        _fail_by_fact(plan, job, world, now)
        _count(job, world, status)
        return plan

    # 3. Suspended (a stop request still ends a suspended job).
    if rp.suspend and not world.stop_requested:
        if set_condition(status, ConditionType.SUSPENDED, True, Reason.SUSPENDED,
                         f"TorchJob {job.name} is suspended.", now):
            plan.event(EventType.NORMAL, Reason.SUSPENDED, "job suspended: every replica is stopped")
            if status.is_true(ConditionType.RUNNING):
                set_condition(status, ConditionType.RUNNING, False, Reason.SUSPENDED, "the job is suspended", now)
            status.conditions = [c for c in status.conditions if c.type != "Restarting"]
        for held in world.replicas.values():
            if held.phase.active:
                if not held.stopping:
                    plan.actions.append(Stop(held.replica, held.attempt, "the job is suspended"))
            else:
                plan.actions.append(Forget(held.replica, held.attempt))
            st = status.replicas.setdefault(held.replica.name, ReplicaAttemptState())
            st.attempt = max(st.attempt, held.attempt + 1)
            st.notBefore = None
        status.startTime = None
        _count(job, world, status)
        return plan
    if status.is_true(ConditionType.SUSPENDED):
        set_condition(status, ConditionType.SUSPENDED, False, Reason.RESUMED, f"TorchJob {job.name} is resumed.", now)
        plan.event(EventType.NORMAL, Reason.RESUMED, "job resumed: replicas start again")

    if status.startTime is None:
        status.startTime = now

    current: dict[str, Observed] = {}
    for rid in expected:
        seen = world.replicas.get(rid.name)
        if seen is None:
            continue
        if seen.attempt < status.replicas[rid.name].attempt:
            if seen.phase.active:
                if not seen.stopping:
                    plan.actions.append(Stop(rid, seen.attempt, "replaced by a newer attempt"))
            else:
                plan.actions.append(Forget(rid, seen.attempt))
        else:
            current[rid.name] = seen

    # 4. Stopped by the user, or past the deadline.
    deadline = policy.deadline_at(status.startTime, rp.activeDeadlineSeconds)
    if world.stop_requested:
        status.failure = FailureInfo(reason=Reason.TERMINATED, message=f"stopped by {world.stop_requested}",
                                     signal=world.stop_requested)
        _finish(plan, job, world, now, False, Reason.TERMINATED, f"job stopped by {world.stop_requested}")
    elif deadline is not None and now >= deadline:
        msg = f"job ran longer than activeDeadlineSeconds ({rp.activeDeadlineSeconds}s)"
        status.failure = FailureInfo(reason=Reason.DEADLINE_EXCEEDED, message=msg)
        _finish(plan, job, world, now, False, Reason.DEADLINE_EXCEEDED, msg)
    if status.finished:
        _stop_active(plan, world, status.failure.message if status.failure else "the job has finished")
        _count(job, world, status)
        return plan
    if deadline is not None:
        plan.requeue(deadline)

    # 5. Lifecycle policies on completed replica types (e.g. TaskCompleted -> CompleteJob), then
    # the success rules.
    for rtype in job.spec.pytorchReplicaSpecs:
        done_ = [current.get(r.name) for r in expected if r.rtype == rtype]
        if not done_ or not all(o is not None and o.phase is Phase.SUCCEEDED for o in done_):
            continue
        pol = match_policy(job, rtype, "TaskCompleted", None)
        if pol is None:
            continue
        since = max(o.finished_at or now for o in done_ if o is not None)
        if _held(plan, pol, since, now):
            continue
        _act(plan, job, world, current, now, pol.action, None, f"the {rtype.lower()} replicas completed",
             rtype=rtype)
        if status.finished:
            break
    if not status.finished:
        _success_rules(plan, job, world, current, expected, now)
    if status.finished:
        if any(o.phase.active for o in world.replicas.values()):
            plan.requeue(now + timedelta(seconds=SUCCESS_SETTLE_S))
        _count(job, world, status)
        return plan

    # 6. Exits, the earliest first: a lifecycle policy that matches, else restartPolicy.
    ended = [o for o in current.values() if o.phase is Phase.FAILED or o.phase is Phase.SUCCEEDED]
    ended.sort(key=lambda o: (o.finished_at or now, o.replica))
    for obs in ended:
        if status.finished:
            break
        if current.get(obs.replica.name) is not obs:
            continue  # replaced by a restart decided earlier in this loop
        rtype = obs.replica.rtype
        code = obs.exit_code if obs.exit_code is not None else (0 if obs.phase is Phase.SUCCEEDED else 1)
        if obs.phase is Phase.FAILED:
            event = "PodEvicted" if obs.reason == "Evicted" else "PodFailed"
            pol = match_policy(job, rtype, event, code)
            cap = job.spec.pytorchReplicaSpecs[rtype].maxRestarts
            if pol is None and cap is not None and _type_restarts(job, status, rtype) >= cap:
                pol = match_policy(job, rtype, "TaskFailed", None)
                if pol is None:
                    msg = (f"{obs.replica.name} failed with {_exit_text(obs)} and the {rtype.lower()} replicas "
                           f"have used all {cap} restarts of their maxRestarts")
                    status.failure = _failure_of(obs, Reason.TASK_FAILED, msg)
                    _finish(plan, job, world, now, False, Reason.TASK_FAILED, msg)
                    break
            if pol is not None:
                if _held(plan, pol, obs.finished_at or now, now):
                    continue
                _act(plan, job, world, current, now, pol.action, obs,
                     f"{obs.replica.name} failed with {_exit_text(obs)}", rtype=rtype)
                continue
        rpolicy = job.restart_policy(rtype)
        if not policy.should_restart(rpolicy, code):
            if obs.phase is Phase.SUCCEEDED:
                continue  # a worker that finished first waits for the master
            if rpolicy == "ExitCode":
                reason = "NonRetryableExitCode"
                msg = (f"{obs.replica.name} failed with {_exit_text(obs)}, which restartPolicy ExitCode "
                       "does not retry (only codes >= 128: signals, and 138)")
            else:
                reason = "ReplicaFailed"
                msg = f"{obs.replica.name} failed with {_exit_text(obs)} (restartPolicy {rpolicy})"
            status.failure = _failure_of(obs, reason, msg)
            _finish(plan, job, world, now, False, reason, msg)
            break
        _act(plan, job, world, current, now, "RestartPod", obs, f"{obs.replica.name} exited with {_exit_text(obs)}",
             rtype=rtype, backoff=True)
    if not status.finished:
        _stalls(plan, job, world, current, now)
    if status.finished:
        why = status.failure.message if status.failure else "the job has finished"
        _stop_active(plan, world, why)
        _count(job, world, status)
        return plan

    # 7. Start what is missing.
    waiting = False
    for rid in expected:
        if rid.name in current:
            continue
        st = status.replicas[rid.name]
        stale = world.replicas.get(rid.name)
        if stale is not None and stale.attempt < st.attempt and not (stale.deleted and not stale.stopping):
            waiting = True  # the stale attempt must go first (same pod name on a cluster), unless gone
            continue
        if st.notBefore is not None and now < st.notBefore:
            plan.requeue(st.notBefore)
            waiting = True
            continue
        if not _dependencies_ready(job, rid.rtype, current):
            waiting = True  # started when the replicas it depends on run
            continue
        st.notBefore = None
        plan.actions.append(Create(rid, st.attempt))

    # Running once every replica runs (a pod still Pending, e.g. unscheduled, is not running yet).
    all_up = not waiting and all(
        rid.name in current and current[rid.name].phase in (Phase.RUNNING, Phase.SUCCEEDED) for rid in expected
    ) and any(o.phase is Phase.RUNNING for o in current.values())
    if all_up and set_condition(status, ConditionType.RUNNING, True, Reason.RUNNING,
                                f"TorchJob {job.name} is running.", now):
        plan.event(EventType.NORMAL, Reason.RUNNING, "every replica is running")
    _count(job, world, status)
    return plan


# --- facts the runtime learned --------------------------------------------------------------


def evicted(job: TorchJob, obs: Observed) -> bool:
    """A replica deleted by someone else (`Observed.deleted`) is Volcano's PodEvicted when the job
    runs (not finished, not suspended), the attempt is current and still ran, and a lifecycle
    policy acts on that event. Torchjob itself never deletes a current replica of a running job:
    it moves the attempt on, or ends or suspends the job, first."""
    status = job.status
    if not obs.deleted or status is None or status.finished or status.is_true(ConditionType.SUSPENDED):
        return False
    if not obs.phase.active:
        return False
    current = status.replicas.get(obs.replica.name)
    return (current is not None and current.attempt == obs.attempt
            and match_policy(job, obs.replica.rtype, "PodEvicted", None) is not None)


def as_core_sees(job: TorchJob, world: World, now: datetime) -> World:
    """The world with each deleted replica decided on: an eviction is a failure with reason Evicted;
    any other deleted replica is still there while it goes away, and once it is gone, missing (made
    again) while the job runs, ended when the job has finished (as the eviction that ended it was)."""
    if not any(o.deleted for o in world.replicas.values()):
        return world
    finished = job.status is not None and job.status.finished
    seen: dict[str, Observed] = {}
    for name, obs in world.replicas.items():
        if evicted(job, obs):
            seen[name] = replace(obs, phase=Phase.FAILED, reason="Evicted",
                                 message=obs.message or "the replica was deleted while it ran",
                                 finished_at=obs.finished_at or now)
        elif not obs.deleted or (obs.stopping and obs.phase.active):
            seen[name] = obs
        elif finished:
            seen[name] = replace(obs, phase=Phase.FAILED) if obs.phase.active else obs
    return replace(world, replicas=seen)


def _fail_by_fact(plan: Plan, job: TorchJob, world: World, now: datetime) -> None:
    """The runner is lost (every open attempt is abandoned), or the job is refused (every running
    replica is stopped): the job fails with that reason."""
    status = plan.status
    if world.runner_lost is not None:
        reason, message = "SupervisorLost", world.runner_lost
    else:
        assert world.refused is not None
        reason, message = world.refused.reason, world.refused.message
    status.failure = FailureInfo(reason=reason, message=message)
    _finish(plan, job, world, now, False, reason, message)
    if world.runner_lost is not None:
        for obs in world.replicas.values():
            if obs.phase.active:
                plan.actions.append(Abandon(obs.replica, obs.attempt, reason))
    else:
        _stop_active(plan, world, message)


# --- lifecycle policies and actions ----------------------------------------------------------


def match_policy(job: TorchJob, rtype: str, event: str, exit_code: int | None) -> LifecyclePolicy | None:
    """The policy for an event of one replica type: the replica type's own first, then the job's;
    the first that matches wins (as in Volcano). Exit-code policies match failures only."""
    own = job.spec.pytorchReplicaSpecs[rtype].policies or []
    for pol in [*own, *(job.spec.policies or [])]:
        if pol.exitCode is not None:
            if event in ("PodFailed", "PodEvicted") and exit_code == pol.exitCode:
                return pol
        elif event in pol.event_names() or "*" in pol.event_names():
            return pol
    return None


def _held(plan: Plan, pol: LifecyclePolicy, since: datetime, now: datetime) -> bool:
    """A policy with a timeout acts only once its event has held that long."""
    if pol.timeout is None:
        return False
    due = since + timedelta(seconds=policy.parse_duration(pol.timeout))
    if now < due:
        plan.requeue(due)
        return True
    return False


def quiet_replicas(job: TorchJob, current: Mapping[str, Observed], now: datetime
                   ) -> tuple[list[Observed], datetime | None]:
    """Running replicas whose current attempt reported progress and then nothing for
    progressDeadlineSeconds, the quietest first; and when the next one would be, if none is yet.
    A replica that never reported in its current attempt (one that does not report at all, or was
    just restarted) is not judged."""
    limit = job.run_policy.progressDeadlineSeconds
    if limit is None:
        return [], None
    quiet: list[Observed] = []
    due: datetime | None = None
    for obs in current.values():
        if obs.phase is not Phase.RUNNING or obs.stopping or obs.last_report is None:
            continue
        at = obs.last_report + timedelta(seconds=limit)
        if now >= at:
            quiet.append(obs)
        elif due is None or at < due:
            due = at
    quiet.sort(key=lambda o: (o.last_report or now, o.replica))
    return quiet, due


def _stalls(plan: Plan, job: TorchJob, world: World, current: dict[str, Observed], now: datetime) -> None:
    """The event Stalled: a lifecycle policy on it acts (its restart counts toward backoffLimit);
    with none the job fails with ProgressDeadlineExceeded, naming the replicas that went quiet."""
    quiet, due = quiet_replicas(job, current, now)
    if due is not None:
        plan.requeue(due)
    if not quiet:
        return
    limit = job.run_policy.progressDeadlineSeconds
    names = ", ".join(o.replica.name for o in quiet)
    why = f"{names} sent no progress report for {limit}s (runPolicy.progressDeadlineSeconds)"
    status = plan.status
    told = False
    for obs in quiet:
        if status.finished:
            return
        if current.get(obs.replica.name) is not obs:
            continue  # restarted by a policy acted on earlier in this loop
        pol = match_policy(job, obs.replica.rtype, "Stalled", None)
        assert obs.last_report is not None and limit is not None
        if pol is not None and _held(plan, pol, obs.last_report + timedelta(seconds=limit), now):
            continue
        if not told:
            plan.event(EventType.WARNING, Reason.STALLED, why)
            told = True
        if pol is None:
            msg = f"{why}: the job is stalled"
            status.failure = FailureInfo(reason=Reason.PROGRESS_DEADLINE_EXCEEDED, message=msg,
                                         replica=obs.replica.name, attempt=obs.attempt)
            _finish(plan, job, world, now, False, Reason.PROGRESS_DEADLINE_EXCEEDED, msg)
            return
        _act(plan, job, world, current, now, pol.action, obs, f"{obs.replica.name} stalled", rtype=obs.replica.rtype)


def _dependencies_ready(job: TorchJob, rtype: str, current: Mapping[str, Observed]) -> bool:
    """dependsOn: every replica of the named types (iteration all, the default) or of one of them
    (any) is running or has succeeded."""
    dep = job.spec.pytorchReplicaSpecs[rtype].dependsOn
    if dep is None:
        return True

    def ready(t: str) -> bool:
        obs = [current.get(r.name) for r in replicas(job) if r.rtype == t]
        return all(o is not None and o.phase in (Phase.RUNNING, Phase.SUCCEEDED) for o in obs)

    check = any if dep.iteration == "any" else all
    return check(ready(t) for t in dep.name)


def _type_restarts(job: TorchJob, status: JobStatus, rtype: str) -> int:
    return sum(status.replicas[r.name].restarts for r in replicas(job) if r.rtype == rtype)


def _act(plan: Plan, job: TorchJob, world: World, current: dict[str, Observed], now: datetime, action: str,
         obs: Observed | None, why: str, *, rtype: str, backoff: bool = False) -> None:
    """Carry out a lifecycle action (restartPolicy restarts are RestartPod with backoff)."""
    status = plan.status
    if action == "CompleteJob":
        _finish(plan, job, world, now, True, Reason.COMPLETED, f"{why}: CompleteJob")
        return
    if action in ("AbortJob", "TerminateJob"):
        reason = "Aborted" if action == "AbortJob" else "Terminated"
        msg = f"{why}: {action}"
        status.failure = _failure_of(obs, reason, msg) if obs else FailureInfo(reason=reason, message=msg)
        _finish(plan, job, world, now, False, reason, msg)
        return
    limit = job.run_policy.backoffLimit
    if policy.backoff_exhausted(limit, status.restartCount):
        msg = f"{why} and the job has used all {limit} restarts of backoffLimit"
        status.failure = _failure_of(obs, Reason.BACKOFF_LIMIT_EXCEEDED, msg) if obs else FailureInfo(
            reason="BackoffLimitExceeded", message=msg)
        _finish(plan, job, world, now, False, Reason.BACKOFF_LIMIT_EXCEEDED, msg)
        return
    if action == "RestartPod":
        assert obs is not None
        targets = [obs.replica]
    elif action == "RestartTask":
        targets = [r for r in replicas(job) if r.rtype == rtype]
    else:  # RestartJob
        targets = replicas(job)
    status.restartCount += 1
    delay = 0.0
    for rid in targets:
        st = status.replicas[rid.name]
        seen = current.pop(rid.name, None)
        if seen is not None:
            if seen.phase.active:
                if not seen.stopping:
                    plan.actions.append(Stop(rid, seen.attempt, f"restarted by {action}"))
            else:
                plan.actions.append(Forget(rid, seen.attempt))
            st.attempt = max(st.attempt, seen.attempt + 1)
        delay = policy.restart_delay(st.restarts) if backoff else 0.0
        st.notBefore = now + timedelta(seconds=delay) if delay else None
        st.restarts += 1
    of = f" of {limit}" if limit is not None else ""
    what = "restarting it" if action == "RestartPod" else (
        f"restarting the {rtype.lower()} replicas" if action == "RestartTask" else "restarting every replica")
    by = "" if backoff else f" ({action})"
    plan.event(EventType.WARNING, Reason.RESTARTING,
               f"{why}; {what}{by} (restart {status.restartCount}{of}" + (f", in {delay:g}s)" if delay else ")"))
    set_condition(status, ConditionType.RESTARTING, True, Reason.RESTARTING, f"{why}; {what}", now)


def _success_rules(plan: Plan, job: TorchJob, world: World, current: dict[str, Observed],
                   expected: list[ReplicaId], now: datetime) -> None:
    done = [o for o in current.values() if o.phase is Phase.SUCCEEDED]
    workers = [current.get(r.name) for r in expected if r.rtype == WORKER]
    if job.spec.minSuccess is not None:  # it replaces the default rules (as in Volcano)
        if len(done) >= job.spec.minSuccess:
            _finish(plan, job, world, now, True, Reason.MIN_SUCCESS, f"{len(done)} replicas succeeded (minSuccess "
                    f"{job.spec.minSuccess})")
    elif has_master(job):
        master = current.get(ReplicaId(MASTER, 0).name)
        if master is not None and master.phase is Phase.SUCCEEDED:
            _finish(plan, job, world, now, True, Reason.SUCCEEDED, "the master replica succeeded")
    elif workers and all(w is not None and w.phase is Phase.SUCCEEDED for w in workers):
        _finish(plan, job, world, now, True, Reason.SUCCEEDED, "every worker succeeded")
    elif job.spec.elasticPolicy is not None and any(w is not None and w.phase is Phase.SUCCEEDED for w in workers):
        _finish(plan, job, world, now, True, Reason.SUCCEEDED, "a worker of the elastic job succeeded")
