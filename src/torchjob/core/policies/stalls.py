"""Stalls (runPolicy.progressDeadlineSeconds): a replica that reported progress and then went quiet
is the event Stalled; a lifecycle policy acts on it, or the job fails with ProgressDeadlineExceeded."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from torchjob.api.model import LifecycleEvent, TorchJob
from torchjob.api.status import EventType, FailureInfo, Reason
from torchjob.core.policies import hangs
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
    with none the job fails with ProgressDeadlineExceeded, naming the replicas that went quiet. Then
    a hang (no rank moved for runPolicy.hangDeadlineSeconds, core/policies/hangs.py), the same way."""
    quiet, due = quiet_replicas(r.job, r.current, r.now)
    if due is not None:
        r.plan.requeue(due)
    if quiet:
        quiet_for = timedelta(seconds=r.job.run_policy.progressDeadlineSeconds or 0)
        names = ", ".join(o.replica.name for o in quiet)
        _stalled(r, quiet, f"{names} sent no progress report for {quiet_for.total_seconds():.0f}s "
                 "(runPolicy.progressDeadlineSeconds)", lambda o: (o.last_report or r.now) + quiet_for,
                 Reason.PROGRESS_DEADLINE_EXCEEDED, "stalled")
    still = r.world.still
    if r.status.finished or still is None or hangs.deadline(r.job) is None:
        return
    if not hangs.hung(r.job, still):
        r.plan.requeue(hangs.next_look(r.job, still, r.now))
        return
    running = [o for o in r.current.values() if o.phase is Phase.RUNNING and not o.stopping]
    if running:
        limit = hangs.deadline(r.job) or 0
        began = still.since + timedelta(seconds=limit)
        _stalled(r, running, f"no rank moved for {limit}s (runPolicy.hangDeadlineSeconds: each one asleep at "
                 "the same stack)", lambda o: began, Reason.HANG_DEADLINE_EXCEEDED, "hung")


def _stalled(r: Round, quiet: list[Observed], why: str, began: Callable[[Observed], datetime], reason: str,
             verdict: str) -> None:
    """The event Stalled for `quiet` (`began`: when each one's stall began, from which a policy's timeout
    counts): a lifecycle policy acts, or the job fails with `reason`; not before the stacks the runtime is
    taking (World.stacks_due), at most until then."""
    if r.world.stacks_due is not None and r.now < r.world.stacks_due:
        r.plan.requeue(r.world.stacks_due)
        return
    if r.world.stacks:
        why += f"; where the ranks were: {r.world.stacks}"
    told = False
    for obs in quiet:
        if r.status.finished:
            return
        if r.current.get(obs.replica.name) is not obs:
            continue  # restarted by a policy acted on earlier in this loop
        pol = match_policy(r.job, obs.replica.rtype, LifecycleEvent.STALLED, None)
        if pol is not None and waits_for_timeout(r.plan, pol, began(obs), r.now):
            continue
        if not told:
            r.plan.event(EventType.WARNING, Reason.STALLED, why)
            told = True
        if pol is None:
            msg = f"{why}: the job is {verdict}"
            fail(r.plan, r.now, reason, msg, FailureInfo(
                reason=reason, message=msg, replica=obs.replica.name, attempt=obs.attempt))
            return
        take_action(r, pol.action, obs, f"{obs.replica.name} {verdict}", rtype=obs.replica.rtype)
