"""What this process keeps of a job between its rounds, in one object per job, in one dict: a
deleted job's memory goes with one `forget` (controller.py), never door by door.

Nothing here is the truth about a job (that is its object and its pods on the API server); it is
what spares a round a question already answered, a fact learned while acting, and what was said
once. Lost on a restart, it is learned again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from torchjob.api.status import JobStatus
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
    # a big job's stored status as read last ((uid, resourceVersion), the model): `status`
    status_read: tuple[tuple[str, str], JobStatus] | None = None

    def status(self, raw: dict[str, Any], read: Callable[[dict[str, Any]], JobStatus], keep_from: int) -> JobStatus:
        """The job's stored status as a model (`read`), kept for a job of `keep_from` replicas or more and read
        again only when the stored job changed (such a status holds a state per replica: parsing it each round
        was a sixth of the operator's CPU through a 4,096-pod gang restart, and few rounds follow a write of the
        job). Each caller gets its own shallow copy: core copies what it changes (core/round/reconcile.py)."""
        meta = raw["metadata"]
        mark = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
        if self.status_read is not None and self.status_read[0] == mark:
            return self.status_read[1].model_copy()
        status = read(raw)
        self.status_read = (mark, status) if mark[1] and len(status.replicas) >= keep_from else None
        return status.model_copy() if self.status_read is not None else status


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
