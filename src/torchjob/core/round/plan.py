"""What a reconcile decides: the actions a runtime carries out, the events it records, the new
status; and `Round`, one reconcile's inputs with the plan it is building."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from torchjob.api.model import TorchJob
from torchjob.api.status import EventType, JobStatus, Reason, ReplicaAttemptState
from torchjob.core.round.world import Observed, World
from torchjob.core.shape.topology import ReplicaId


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
    # Stopped because its replica restarts: a runtime may stop it faster than its default grace (a
    # peer hung in a collective; on Kubernetes a container's PID 1 ignores SIGTERM) where the job set none.
    restarting: bool = field(default=False, compare=False)  # how, not what: equal stops stop the same


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


class Admit(str, enum.Enum):
    """A step of the job's admission, decided by core (core/policies/admission.py), carried out by a runtime's
    gates: before the pods, in this order."""

    HOLD = "Hold"  # suspend the job until its Kueue queue admits it (before anything else)
    RESUME = "Resume"  # its Workload is admitted: resume it where Kueue placed it
    REQUEUE = "Requeue"  # its Workload's admission was taken back: suspend it again
    MAKE_WORKLOAD = "MakeWorkload"
    FINISH_WORKLOAD = "FinishWorkload"  # the job ended: its Workload is marked Finished (its quota freed)
    MAKE_PODGROUP = "MakePodGroup"
    DELETE_PODGROUP = "DeletePodGroup"

    @property
    def ends_round(self) -> bool:
        """It changes the job's spec: nothing else is decided or done in this round."""
        return self in (Admit.HOLD, Admit.RESUME, Admit.REQUEUE)


@dataclass(frozen=True)
class Event:
    type: str  # an EventType: Normal | Warning
    reason: str  # a Reason
    message: str


@dataclass
class Plan:
    status: JobStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_at: datetime | None = None  # reconcile again at this time at the latest
    admission: list[Admit] = field(default_factory=list)  # what the admission gates carry out
    done: bool = False  # finished and nothing left running: the runtime may stop watching

    def requeue(self, at: datetime) -> None:
        if self.requeue_at is None or at < self.requeue_at:
            self.requeue_at = at

    def event(self, type_: EventType | str, reason: Reason | str, message: str) -> None:
        self.events.append(Event(str(type_), str(reason), message))

    def stop_active(self, world: World, reason: str) -> None:
        """Stop every attempt that still runs and is not being stopped already."""
        stopping = {(a.replica, a.attempt) for a in self.actions if isinstance(a, Stop)}
        for obs in world.replicas.values():
            if obs.phase.active and not obs.stopping and (obs.replica, obs.attempt) not in stopping:
                self.actions.append(Stop(obs.replica, obs.attempt, reason))

    def retire(self, obs: Observed, why: str, restarting: bool = False) -> None:
        """An attempt that is no longer current: stopped if it runs (and is not stopping yet), else
        forgotten (it ended, or was deleted and is gone)."""
        if not obs.phase.active or (obs.deleted and not obs.stopping):
            self.actions.append(Forget(obs.replica, obs.attempt))
        elif not obs.stopping:
            self.actions.append(Stop(obs.replica, obs.attempt, why, restarting))


@dataclass
class Round:
    """One reconcile: the job, what the runtime observed, the time, and the plan being built.
    `current` is the current attempt of each replica, as observed (filled once the job runs)."""

    job: TorchJob
    world: World
    now: datetime
    plan: Plan
    current: dict[str, Observed] = field(default_factory=dict)

    owned: set[str] = field(default_factory=set)  # the replicas whose state this round copied to change

    @property
    def status(self) -> JobStatus:
        return self.plan.status

    def replica_state(self, name: str) -> ReplicaAttemptState:
        """`name`'s state in the round's status, to change: the round's status shares each replica's state with
        the observed one until the round changes it, copied then, once (thousands of copies a round were most
        of a big job's round: tests/core/test_round_cost.py)."""
        states = self.plan.status.replicas
        if name not in self.owned:
            self.owned.add(name)
            kept = states.get(name)
            states[name] = kept.model_copy() if kept is not None else ReplicaAttemptState()
        return states[name]
