"""Stalls (runPolicy.progressDeadlineSeconds): a replica that reported progress and then went quiet
is the event Stalled; a lifecycle policy acts on it, or the job fails with ProgressDeadlineExceeded."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from torchjob.api.model import LifecycleEvent, TorchJob
from torchjob.api.status import EventType, FailureInfo, Reason
from torchjob.core.policies.lifecycle import match_policy, take_action, waits_for_timeout
from torchjob.core.round.conditions import fail
from torchjob.core.round.plan import Round
from torchjob.core.round.world import Observed, Phase


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


def act_on_stalls(r: Round) -> None:
    """The event Stalled: a lifecycle policy on it acts (its restart counts toward backoffLimit);
    with none the job fails with ProgressDeadlineExceeded, naming the replicas that went quiet."""
    quiet, due = quiet_replicas(r.job, r.current, r.now)
    if due is not None:
        r.plan.requeue(due)
    if not quiet:
        return
    limit = r.job.run_policy.progressDeadlineSeconds
    assert limit is not None
    names = ", ".join(o.replica.name for o in quiet)
    why = f"{names} sent no progress report for {limit}s (runPolicy.progressDeadlineSeconds)"
    if r.world.stacks:
        why += f"; where the ranks were: {r.world.stacks}"
    told = False
    for obs in quiet:
        if r.status.finished:
            return
        if r.current.get(obs.replica.name) is not obs:
            continue  # restarted by a policy acted on earlier in this loop
        pol = match_policy(r.job, obs.replica.rtype, LifecycleEvent.STALLED, None)
        assert obs.last_report is not None
        if pol is not None and waits_for_timeout(r.plan, pol, obs.last_report + timedelta(seconds=limit), r.now):
            continue
        if not told:
            r.plan.event(EventType.WARNING, Reason.STALLED, why)
            told = True
        if pol is None:
            msg = f"{why}: the job is stalled"
            fail(r.plan, r.now, Reason.PROGRESS_DEADLINE_EXCEEDED, msg, FailureInfo(
                reason=Reason.PROGRESS_DEADLINE_EXCEEDED, message=msg, replica=obs.replica.name, attempt=obs.attempt))
            return
        take_action(r, pol.action, obs, f"{obs.replica.name} stalled", rtype=obs.replica.rtype)
