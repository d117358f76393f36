"""What this process keeps of a job between its rounds, in one object per job, in one dict: a
deleted job's memory goes with one `forget` (controller.py), never door by door.

Nothing here is the truth about a job (that is its object and its pods on the API server); it is
what spares a round a question already answered, a fact learned while acting, and what was said
once. Lost on a restart, it is learned again."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from torchjob.core.diagnosis.stacks import Stacks
from torchjob.core.round.reconcile import Refusal
from torchjob.kube.machinery.informer import Key


@dataclass
class GangMemory:
    """The job's PodGroup as this process knows it; dropped whole when the job stops running."""

    made: bool = False  # its own PodGroup was created or found by this process
    admitted: bool = False  # its PodGroup lets its pods be created
    waiting_said: bool = False  # an event told it waits for admission
    told: set[str] = field(default_factory=set)  # PodGroups of its name not its own, said once each


@dataclass
class StallStacksMemory:
    """The stacks taken of a stalled job's pods (stall_stacks.py), for one set of quiet attempts."""

    quiet: tuple[tuple[str, int], ...]  # the quiet (replica, attempt)s they are for
    asked_at: datetime
    due: datetime  # core waits for them until then (World.stacks_due)
    attempts: dict[str, int]  # every replica attempt asked (its pod made with the front)
    taken: Stacks | None = None  # once every pod answered, or the bound passed
    said: bool = False  # their StacksTaken event was planned


@dataclass
class JobMemory:
    learned: Refusal | None = None  # what acting taught, for the next round's World
    gone: dict[str, dict[str, Any]] = field(default_factory=dict)  # its pods deleted since (their last state)
    board: bool = False  # its TensorBoard was created or found
    claims: bool = False  # its volume claims (spec.volumeClaims) were created or found
    told: set[str] = field(default_factory=set)  # what its events said once (a pod not ours, a pod leaving)
    gang: GangMemory = field(default_factory=GangMemory)
    stacks: StallStacksMemory | None = None  # a stall's stacks, taken or being taken
    deletes: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # pods/deletes.py: asked once


class Memories:
    """Every job's memory, keyed by job."""

    def __init__(self) -> None:
        self.jobs: dict[Key, JobMemory] = {}

    def of(self, key: Key) -> JobMemory:
        memory = self.jobs.get(key)
        if memory is None:
            memory = self.jobs[key] = JobMemory()
        return memory

    def forget(self, key: Key) -> None:
        self.jobs.pop(key, None)

    def settle(self, key: Key) -> None:
        """After a round of the job: its memory dropped where it holds nothing a new one would not
        (most jobs' most of the time), so that 10,000 jobs do not each keep ~850 bytes of empty
        sets and dicts; the next `of` makes it again, the same."""
        memory = self.jobs.get(key)
        if memory is not None and memory == JobMemory():
            del self.jobs[key]

    def __len__(self) -> int:
        return len(self.jobs)
