"""A simulated runtime for `core.reconcile`: replicas are records, time is a number.

It applies a plan the way a runtime must: Create starts an attempt at `now`, Stop ends a
running attempt at `now` with exit code 143 (SIGTERM), Forget and Purge drop a finished attempt;
the new status is fed back into the job. Between reconciles the clock jumps to the next exit of a
running attempt or to `plan.requeue_at`, whichever comes first. An attempt that reports progress
(`reports`: until that many seconds after its start) is observed with the time of its last report.
Facts a runtime learns: a replica deleted by someone else (`deletions`: seconds after its first
attempt started) is observed gone, `deleted`, until it is made again or forgotten; a refusal and a
lost runner are in the world from their time on. Abandon ends an attempt where it is.

For tests that write each observed world themselves: `up`, `pending` and `ended` build what a
runtime observes of one attempt, `world` gathers them, and a `Driver` reconciles one world at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from tests.core.invariants import check_all
from torchjob.api.model import JobStatus, TorchJob
from torchjob.core.round.reconcile import (
    Abandon,
    Action,
    Create,
    DeleteJob,
    Forget,
    Observed,
    Phase,
    Plan,
    Purge,
    Refusal,
    Stop,
    World,
    reconcile,
)
from torchjob.core.shape.topology import ReplicaId

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SIGTERM_EXIT = 143

Exits = Mapping[str, Sequence[tuple[float, int]]]
Reports = Mapping[str, Sequence[float]]
Check = Callable[[TorchJob, World, datetime, Plan], None]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seconds(when: datetime) -> float:
    return (when - T0).total_seconds()


def exit_reason(code: int) -> str:
    """The reason a runtime gives an exit of its own (as the kubelet does): Completed for 0, else Error."""
    return "Completed" if code == 0 else "Error"


def final_reason(status: JobStatus) -> str | None:
    """The reason of the Failed or Succeeded condition, None while the job has not finished."""
    for ctype in ("Failed", "Succeeded"):
        c = status.condition(ctype)
        if c is not None and c.status == "True":
            return c.reason
    return None


@dataclass(frozen=True)
class Facts:
    """What the runtime learns at a time (seconds): a refusal, a lost runner."""

    refused: tuple[float, Refusal] | None = None
    runner_lost: tuple[float, str] | None = None

    def times(self) -> list[float]:
        return [f[0] for f in (self.refused, self.runner_lost) if f is not None]


class SimError(AssertionError):
    """The runtime contract was broken, or the job never finished."""


@dataclass(frozen=True)
class Step:
    t: float
    world: World
    plan: Plan


@dataclass
class SimResult:
    job: TorchJob
    steps: list[Step]
    created: list[tuple[float, str, int]]  # (time, replica, attempt) of every Create applied
    stopped: list[tuple[float, str, int, str]]  # (time, replica, attempt, reason) of every Stop applied
    end: float
    deleted: bool = False

    @property
    def status(self) -> JobStatus:
        assert self.job.status is not None
        return self.job.status

    def final_reason(self) -> str | None:
        return final_reason(self.status)


@dataclass
class _Runtime:
    exits: Exits
    reports: Reports = field(default_factory=dict)
    deletions: Mapping[str, float] = field(default_factory=dict)
    deleting: dict[str, float] = field(default_factory=dict)  # name -> when its first attempt is deleted
    observed: dict[str, Observed] = field(default_factory=dict)
    reporting: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (start, quiet after)
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (exit time, code)
    created: list[tuple[float, str, int]] = field(default_factory=list)
    stopped: list[tuple[float, str, int, str]] = field(default_factory=list)

    def apply(self, actions: Sequence[Action], now: float) -> bool:
        changed = False
        for a in actions:
            if isinstance(a, DeleteJob):
                continue
            name = a.replica.name
            obs = self.observed.get(name)
            if isinstance(a, Create):
                if obs is not None and obs.attempt == a.attempt and not obs.deleted:
                    continue  # already there: creating is level-triggered
                if obs is not None and not obs.deleted:
                    raise SimError(f"Create {name} attempt {a.attempt} while attempt {obs.attempt} is observed")
                self.observed[name] = Observed(a.replica, a.attempt, Phase.RUNNING)
                self.created.append((now, name, a.attempt))
                self.reporting.pop(name, None)
                quiet = self.reports.get(name, ())
                if a.attempt < len(quiet):
                    self.reporting[name] = (now, quiet[a.attempt])
                if a.attempt == 0 and name in self.deletions and not any(
                        n == name for _, n, _ in self.created[:-1]):
                    self.deleting[name] = now + self.deletions[name]
                plan = self.exits.get(name, ())
                if a.attempt < len(plan):
                    after, code = plan[a.attempt]
                    self.pending[name] = (now + after, code)
                changed = True
            elif isinstance(a, Stop):
                if obs is None or obs.attempt != a.attempt or not obs.phase.active or obs.deleted:
                    continue
                self.observed[name] = dataclasses.replace(
                    obs, phase=Phase.FAILED, exit_code=SIGTERM_EXIT, reason="Error", finished_at=at(now)
                )
                self.pending.pop(name, None)
                self.stopped.append((now, name, a.attempt, a.reason))
                changed = True
            elif isinstance(a, Abandon):
                if obs is None or obs.attempt != a.attempt or not obs.phase.active:
                    continue
                self.observed[name] = dataclasses.replace(
                    obs, phase=Phase.FAILED, reason=a.reason, finished_at=at(now), stopping=False)
                self.pending.pop(name, None)
                self.reporting.pop(name, None)
                changed = True
            elif isinstance(a, Forget | Purge):
                if obs is None or obs.attempt != a.attempt:
                    continue
                if obs.phase.active and not obs.deleted:
                    raise SimError(f"{type(a).__name__} of {name} attempt {a.attempt}, which still runs")
                del self.observed[name]
                changed = True
        return changed

    def world(self, now: float, stop: str | None, facts: Facts) -> World:
        """What a runtime observes at `now`: each running attempt that reports, with its last report;
        the facts whose time has come."""
        seen = dict(self.observed)
        for name, (start, quiet) in self.reporting.items():
            obs = seen.get(name)
            if obs is not None and obs.phase is Phase.RUNNING:
                seen[name] = dataclasses.replace(obs, last_report=at(start + min(now - start, quiet)))
        refused = facts.refused[1] if facts.refused is not None and facts.refused[0] <= now else None
        lost = facts.runner_lost[1] if facts.runner_lost is not None and facts.runner_lost[0] <= now else None
        return World(replicas=seen, stop_requested=stop, refused=refused, runner_lost=lost)

    def next_times(self) -> list[float]:
        return [t for t, _ in self.pending.values()] + list(self.deleting.values())

    def advance(self, now: float) -> None:
        for name, t in list(self.deleting.items()):
            if t <= now:
                del self.deleting[name]
                obs = self.observed.get(name)
                if obs is not None and obs.attempt == 0 and obs.phase.active:
                    # gone: its last state is what the runtime keeps of it
                    self.observed[name] = dataclasses.replace(obs, deleted=True, stopping=False, finished_at=at(t))
                    self.pending.pop(name, None)
                    self.reporting.pop(name, None)
        for name, (t, code) in list(self.pending.items()):
            if t <= now:
                obs = self.observed[name]
                self.observed[name] = dataclasses.replace(
                    obs,
                    phase=Phase.SUCCEEDED if code == 0 else Phase.FAILED,
                    exit_code=code,
                    reason=exit_reason(code),
                    finished_at=at(t),
                )
                del self.pending[name]


def simulate(
    job: TorchJob,
    exits: Exits,
    *,
    check: Check | None = None,
    stop_when_idle: str | None = None,
    run_policy_changes: Sequence[tuple[float, Mapping[str, Any]]] = (),
    reports: Reports | None = None,
    deletions: Mapping[str, float] | None = None,
    facts: Facts = Facts(),
    max_steps: int = 2000,
) -> SimResult:
    """Run `job` until `plan.done` (or DeleteJob). With `stop_when_idle`, a job that waits on
    replicas that never exit is stopped by the user (World.stop_requested) instead of raising.
    `run_policy_changes` are user edits of spec.runPolicy (e.g. suspend) at the given times."""
    rt = _Runtime(exits, reports or {}, deletions or {})
    changes = sorted(run_policy_changes, key=lambda c: c[0])
    now = 0.0
    stop: str | None = None
    steps: list[Step] = []
    for _ in range(max_steps):
        while changes and changes[0][0] <= now:
            rp = job.run_policy.model_copy(update=dict(changes.pop(0)[1]))
            job = job.model_copy(update={"spec": job.spec.model_copy(update={"runPolicy": rp})})
        w = rt.world(now, stop, facts)
        plan = reconcile(job, w, at(now))
        if check is not None:
            check(job, w, at(now), plan)
        steps.append(Step(now, w, plan))
        job = job.model_copy(update={"status": plan.status})
        if any(isinstance(a, DeleteJob) for a in plan.actions):
            return SimResult(job, steps, rt.created, rt.stopped, now, deleted=True)
        if plan.done:
            return SimResult(job, steps, rt.created, rt.stopped, now)
        if rt.apply(plan.actions, now):
            continue
        candidates = rt.next_times() + [t for t in facts.times() if t > now]
        if changes:
            candidates.append(changes[0][0])
        if plan.requeue_at is not None:
            if seconds(plan.requeue_at) <= now:
                # "Again at once" is allowed only right after the status changed (the job just ended).
                if steps[-1].plan.status == (steps[-2].plan.status if len(steps) > 1 else None):
                    raise SimError(f"t={now}: requeue_at {plan.requeue_at} is not in the future and nothing changed")
                continue
            candidates.append(seconds(plan.requeue_at))
        if not candidates:
            if stop_when_idle is not None and stop is None:
                stop = stop_when_idle
                continue
            raise SimError(f"t={now}: the job waits for nothing (state {plan.status.state}); actions={plan.actions}")
        now = min(candidates)
        rt.advance(now)
    raise SimError(f"no end after {max_steps} reconciles")


# --- one observed world at a time ----------------------------------------------------------------


def up(rid: ReplicaId, attempt: int = 0, *, stopping: bool = False) -> Observed:
    """`rid`'s `attempt`, observed running (`stopping`: a stop was asked for and is under way)."""
    return Observed(rid, attempt, Phase.RUNNING, stopping=stopping)


def pending(rid: ReplicaId, attempt: int = 0) -> Observed:
    """`rid`'s `attempt`, created but not running yet (e.g. a pod not scheduled)."""
    return Observed(rid, attempt, Phase.PENDING)


def ended(rid: ReplicaId, code: int | None, t: float, attempt: int = 0, reason: str | None = None) -> Observed:
    """`rid`'s `attempt`, observed finished at `t` with exit `code` (0: succeeded) and the runtime's `reason`."""
    phase = Phase.SUCCEEDED if code == 0 else Phase.FAILED
    return Observed(rid, attempt, phase, exit_code=code, finished_at=at(t), reason=reason)


def world(*observed: Observed, stop: str | None = None) -> World:
    """What the runtime observes: these attempts, and the user's stop request (a signal name) if any."""
    return World(replicas={o.replica.name: o for o in observed}, stop_requested=stop)


class Driver:
    """Feeds each plan's status back into the job, as a runtime does; checks the invariants."""

    def __init__(self, job: TorchJob) -> None:
        self.job = job

    def __call__(self, w: World, t: float) -> Plan:
        plan = reconcile(self.job, w, at(t))
        check_all(self.job, w, at(t), plan)
        self.job = self.job.model_copy(update={"status": plan.status})
        return plan

    @property
    def status(self) -> JobStatus:
        assert self.job.status is not None
        return self.job.status

    def with_spec(self, **run_policy: Any) -> None:
        """Change runPolicy fields (suspend, ...) the way a user edits the job."""
        rp = self.job.run_policy.model_copy(update=run_policy)
        self.job = self.job.model_copy(update={"spec": self.job.spec.model_copy(update={"runPolicy": rp})})


def running(job: TorchJob, t: float = 0.0) -> tuple[Driver, World]:
    """A driver whose job has every replica created and observed running (at `t`), and that world."""
    d = Driver(job)
    plan = d(World(), t)
    w = world(*(up(a.replica, a.attempt) for a in plan.actions if isinstance(a, Create)))
    plan = d(w, t)
    assert plan.status.state == "Running", plan.status.conditions
    return d, w
