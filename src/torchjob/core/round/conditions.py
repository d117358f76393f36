"""The job's conditions, and how a job ends: the Succeeded or Failed condition, the root cause in
`status.failure`, the event that says so."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from torchjob.api.status import Condition, ConditionType, EventType, ExitReason, FailureInfo, JobStatus, Reason
from torchjob.core.policies import policy
from torchjob.core.round.plan import Plan
from torchjob.core.round.world import Observed

# Each excludes the other while true.
EXCLUSIVE = {ConditionType.RUNNING: ConditionType.RESTARTING, ConditionType.RESTARTING: ConditionType.RUNNING}
ENDS = (ConditionType.SUCCEEDED, ConditionType.FAILED)


def set_condition(status: JobStatus, ctype: ConditionType, value: bool, reason: Reason | str, message: str,
                  now: datetime) -> bool:
    """Set a condition; returns whether anything changed. Failed is terminal; Running and
    Restarting exclude each other; a finished job is not Running."""
    if status.is_true(ConditionType.FAILED):
        return False
    state: Literal["True", "False"] = "True" if value else "False"
    current = status.condition(ctype)
    if current is not None and current.status == state and current.reason == reason:
        return False
    if value:
        _make_way_for(status, ConditionType(ctype), now)
    if current is None:
        status.conditions.append(Condition.model_validate(dict(
            type=ctype, status=state, reason=reason, message=message, lastTransitionTime=now, lastUpdateTime=now)))
    else:
        if current.status != state:
            current.lastTransitionTime = now
        current.status, current.reason, current.message, current.lastUpdateTime = state, str(reason), message, now
    return True


def _make_way_for(status: JobStatus, ctype: ConditionType, now: datetime) -> None:
    """What a condition turning true ends: its exclusive partner; for an end, Restarting and Running."""
    if ctype in EXCLUSIVE:
        drop_condition(status, EXCLUSIVE[ctype])
    if ctype in ENDS:
        drop_condition(status, ConditionType.RESTARTING)
        running = status.condition(ConditionType.RUNNING)
        if running is not None and running.status == "True":
            running.status, running.reason, running.lastTransitionTime = "False", str(ctype), now
            running.lastUpdateTime = now
            # not "is running" beside status False: what ended it
            running.message = f"it no longer runs: it {'succeeded' if ctype == ConditionType.SUCCEEDED else 'failed'}"


def drop_condition(status: JobStatus, ctype: ConditionType) -> None:
    status.conditions = [c for c in status.conditions if c.type != ctype]


def finish(plan: Plan, now: datetime, succeeded: bool, reason: Reason | str, message: str) -> None:
    """The job ends: Succeeded or Failed with `reason`, its completion time, and the event, once."""
    status = plan.status
    if set_condition(status, ConditionType.SUCCEEDED if succeeded else ConditionType.FAILED, True, reason, message,
                     now):
        status.completionTime = now
        plan.event(EventType.NORMAL if succeeded else EventType.WARNING, reason, message)


def fail(plan: Plan, now: datetime, reason: Reason | str, message: str, failure: FailureInfo | None = None) -> None:
    """The job fails with `reason` and `message`; `failure` is its root cause (by default, the same words)."""
    plan.status.failure = failure or FailureInfo(reason=reason, message=message)
    finish(plan, now, False, reason, message)


def failure_of(obs: Observed, reason: Reason, message: str) -> FailureInfo:
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


def exit_text(obs: Observed) -> str:
    """How an attempt ended, in words: "exit code 137 (SIGKILL), OOMKilled"."""
    text = policy.describe_exit(obs.exit_code) if obs.exit_code is not None else "an unknown exit code"
    if obs.reason and obs.reason not in (ExitReason.ERROR, ExitReason.COMPLETED):
        text += f", {obs.reason}"
    return text
