"""Lifecycle policies (Volcano's, native here) and restartPolicy: which policy an event of a
replica type matches, the hold-back of a policy's timeout, and carrying out an action (end the
job, or restart a replica, its type, or every replica, within backoffLimit). And a gang's lost
rank: every replica restarts, uncounted."""

from __future__ import annotations

from datetime import datetime, timedelta

from torchjob.api.model import LifecycleAction, LifecycleEvent, LifecyclePolicy, RestartScope, TorchJob
from torchjob.api.status import ConditionType, EventType, ExitReason, JobStatus, Reason
from torchjob.core.policies import policy
from torchjob.core.round.conditions import exit_text, fail, failure_of, finish, set_condition
from torchjob.core.round.plan import Plan, Round
from torchjob.core.round.world import Observed, Phase
from torchjob.core.shape.topology import ReplicaId, replica_total, replicas

FAILURE_EVENTS = (LifecycleEvent.POD_FAILED, LifecycleEvent.POD_EVICTED)


def match_policy(job: TorchJob, rtype: str, event: str, exit_code: int | None) -> LifecyclePolicy | None:
    """The policy for an event of one replica type: the replica type's own first, then the job's;
    the first that matches wins (as in Volcano). Exit-code policies match failures only."""
    own = job.spec.pytorchReplicaSpecs[rtype].policies or []
    for pol in [*own, *(job.spec.policies or [])]:
        if pol.exitCode is not None:
            if event in FAILURE_EVENTS and exit_code == pol.exitCode:
                return pol
        elif event in pol.event_names() or LifecycleEvent.ANY in pol.event_names():
            return pol
    return None


def waits_for_timeout(plan: Plan, pol: LifecyclePolicy, since: datetime, now: datetime) -> bool:
    """A policy with a timeout acts only once its event has held that long: True (and a requeue at
    that time) while it has not."""
    if pol.timeout is None:
        return False
    due = since + timedelta(seconds=policy.parse_duration(pol.timeout))
    if now < due:
        plan.requeue(due)
        return True
    return False


def type_restarts(job: TorchJob, status: JobStatus, rtype: str) -> int:
    return sum(status.replicas[r.name].restarts for r in replicas(job) if r.rtype == rtype)


# --- events --------------------------------------------------------------------------------


def act_on_completed_types(r: Round, expected: list[ReplicaId]) -> None:
    """TaskCompleted: every replica of a type succeeded; a policy on it acts (e.g. CompleteJob)."""
    for rtype in r.job.spec.pytorchReplicaSpecs:
        done = [r.current.get(rid.name) for rid in expected if rid.rtype == rtype]
        if not done or not all(o is not None and o.phase is Phase.SUCCEEDED for o in done):
            continue
        pol = match_policy(r.job, rtype, LifecycleEvent.TASK_COMPLETED, None)
        if pol is None:
            continue
        since = max(o.finished_at or r.now for o in done if o is not None)
        if waits_for_timeout(r.plan, pol, since, r.now):
            continue
        take_action(r, pol.action, None, f"the {rtype.lower()} replicas completed", rtype=rtype)
        if r.status.finished:
            return


def act_on_exit(r: Round, obs: Observed) -> None:
    """One attempt ended: a lifecycle policy that matches acts (a failure past the type's maxRestarts
    is TaskFailed); else restartPolicy restarts it (with backoff) or the job fails."""
    rtype = obs.replica.rtype
    code = obs.exit_code if obs.exit_code is not None else (0 if obs.phase is Phase.SUCCEEDED else 1)
    if obs.phase is Phase.FAILED:
        event = LifecycleEvent.POD_EVICTED if obs.reason == ExitReason.EVICTED else LifecycleEvent.POD_FAILED
        pol = match_policy(r.job, rtype, event, code)
        cap = r.job.spec.pytorchReplicaSpecs[rtype].maxRestarts
        if pol is None and cap is not None and type_restarts(r.job, r.status, rtype) >= cap:
            pol = match_policy(r.job, rtype, LifecycleEvent.TASK_FAILED, None)
            if pol is None:
                msg = (f"{obs.replica.name} failed with {exit_text(obs)} and the {rtype.lower()} replicas "
                       f"have used all {cap} restarts of their maxRestarts")
                fail(r.plan, r.now, Reason.TASK_FAILED, msg, failure_of(obs, Reason.TASK_FAILED, msg))
                return
        if pol is not None:
            if not waits_for_timeout(r.plan, pol, obs.finished_at or r.now, r.now):
                take_action(r, pol.action, obs, f"{obs.replica.name} failed with {exit_text(obs)}", rtype=rtype)
            return
    rpolicy = r.job.restart_policy(rtype)
    if policy.should_restart(rpolicy, code):
        # A failed rank of a job that cannot go on without it: the whole gang restarts now, once and
        # counted once; the peers' exits that follow (they are stopped, or fail in their collective)
        # are of attempts already replaced, so they count for nothing.
        gang = obs.phase is Phase.FAILED and r.job.restart_scope is RestartScope.JOB and replica_total(r.job) > 1
        action = LifecycleAction.RESTART_JOB if gang else LifecycleAction.RESTART_POD
        take_action(r, action, obs, f"{obs.replica.name} exited with {exit_text(obs)}", rtype=rtype, backoff=True)
    elif obs.phase is Phase.FAILED:  # a worker that succeeded first waits for the master
        _fail_by_restart_policy(r, obs, rpolicy)


def restart_for_lost_rank(r: Round, obs: Observed) -> None:
    """A rank of a gang deleted by someone else while the job runs (core/round/facts.py `lost_rank`): every
    replica restarts at once, whatever restartPolicy says, and uncounted (neither restartCount, and so
    backoffLimit, nor the replicas' restarts, and so maxRestarts and their backoff): a deletion is not
    a failure of the job. Kubeflow makes the deleted pod again, uncounted too, but alone."""
    why = f"{obs.replica.name} was deleted while it ran"
    _restart(r, LifecycleAction.RESTART_JOB, obs, why, rtype=obs.replica.rtype, backoff=False, counted=False)


def _fail_by_restart_policy(r: Round, obs: Observed, rpolicy: str) -> None:
    if rpolicy == "ExitCode":
        reason = Reason.NON_RETRYABLE_EXIT_CODE
        msg = (f"{obs.replica.name} failed with {exit_text(obs)}, which restartPolicy ExitCode "
               "does not retry (only codes >= 128: signals, and 138)")
    else:
        reason = Reason.REPLICA_FAILED
        msg = f"{obs.replica.name} failed with {exit_text(obs)} (restartPolicy {rpolicy})"
    fail(r.plan, r.now, reason, msg, failure_of(obs, reason, msg))


# --- actions -------------------------------------------------------------------------------


def take_action(r: Round, action: str, obs: Observed | None, why: str, *, rtype: str, backoff: bool = False) -> None:
    """Carry out a lifecycle action on `obs` (None: on its replica type); restartPolicy's restarts
    are RestartPod with backoff."""
    if action == LifecycleAction.COMPLETE_JOB:
        finish(r.plan, r.now, True, Reason.COMPLETED, f"{why}: CompleteJob")
        return
    if action in (LifecycleAction.ABORT_JOB, LifecycleAction.TERMINATE_JOB):
        reason = Reason.ABORTED if action == LifecycleAction.ABORT_JOB else Reason.TERMINATED
        msg = f"{why}: {action}"
        fail(r.plan, r.now, reason, msg, failure_of(obs, reason, msg) if obs else None)
        return
    limit = r.job.run_policy.backoffLimit
    if policy.backoff_exhausted(limit, r.status.restartCount):
        msg = f"{why} and the job has used all {limit} restarts of backoffLimit"
        reason = Reason.BACKOFF_LIMIT_EXCEEDED
        fail(r.plan, r.now, reason, msg, failure_of(obs, reason, msg) if obs else None)
        return
    _restart(r, action, obs, why, rtype=rtype, backoff=backoff)


def _restart_targets(job: TorchJob, action: str, obs: Observed | None, rtype: str) -> list[ReplicaId]:
    if action == LifecycleAction.RESTART_POD:
        assert obs is not None
        return [obs.replica]
    if action == LifecycleAction.RESTART_TASK:
        return [rid for rid in replicas(job) if rid.rtype == rtype]
    return replicas(job)  # RestartJob


def _restart(r: Round, action: str, obs: Observed | None, why: str, *, rtype: str, backoff: bool,
             counted: bool = True) -> None:
    """Move each target on to a new attempt (after its backoff), the old one stopped or forgotten."""
    status = r.status
    if counted:
        status.restartCount += 1
    delay = 0.0
    for rid in _restart_targets(r.job, action, obs, rtype):
        st = r.replica_state(rid.name)
        seen = r.current.pop(rid.name, None)
        if seen is not None:
            # a gang restart by restartPolicy (or for a lost rank) says whose end it is; a policy's
            # says which action
            told = f"{why}; restarting the job" if backoff or not counted else f"restarted by {action}"
            r.plan.retire(seen, told, restarting=True)
            st.attempt = max(st.attempt, seen.attempt + 1)
        if counted:
            delay = policy.restart_delay(st.restarts) if backoff else 0.0
            st.notBefore = r.now + timedelta(seconds=delay) if delay else None
            st.restarts += 1
    limit = r.job.run_policy.backoffLimit
    of = f" of {limit}" if limit is not None else ""
    what = "restarting it" if action == LifecycleAction.RESTART_POD else (
        f"restarting the {rtype.lower()} replicas" if action == LifecycleAction.RESTART_TASK
        else f"restarting the job's {len(replicas(r.job))} replicas")
    by = "" if backoff or not counted else f" ({action})"
    count = (f"restart {status.restartCount}{of}" + (f", in {delay:g}s" if delay else "") if counted
             else "not counted: a deletion is not a failure of the job")
    r.plan.event(EventType.WARNING, Reason.RESTARTING, f"{why}; {what}{by} ({count})")
    set_condition(status, ConditionType.RESTARTING, True, Reason.RESTARTING, f"{why}; {what}", r.now)
