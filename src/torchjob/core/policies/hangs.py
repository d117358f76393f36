"""Hangs without any report (runPolicy.hangDeadlineSeconds): a job none of whose ranks moved for that
long is the event Stalled, as a replica that stopped reporting is (core/policies/stalls.py); a lifecycle
policy on Stalled acts on it, or the job fails with HangDeadlineExceeded.

A rank "moved" between two samples when its main thread's Python stack changed, its process used CPU
(at least CPU_SHARE of the time between them), or its main thread went to sleep and woke more than a
sample's own signal makes it (voluntary context switches). A collective that waits for a peer that
never comes blocks in C++ on one condition variable: the stack stays put, the process uses no CPU, the
thread does not wake. A training loop changes its stack from step to step; a long kernel, `backward`
or a checkpoint's write uses CPU; a loop that sleeps or polls at one line (`time.sleep`, a GPU's
blocking synchronize, a queue's get with a timeout) wakes.
Judged only from a sample of every running replica's ranks (the runtime says when it has one), and
only at a sample: a move after the latest one is not yet seen, so `since` is a sampled time.
Pure: the runtime samples (local/inspect/hangs.py) and `Stillness` turns its samples into a World.still."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api.model import TorchJob
from torchjob.core.round.world import Still

DEFAULT_S = 300  # under torch's own defaults (NCCL 10 min, gloo 30 min), so that torchjob sees a hang first
SAMPLES = 10  # samples per deadline: a hang is caught within (1 + 2/SAMPLES) x the deadline
MIN_EVERY_S = 0.5
MAX_EVERY_S = 60.0
CPU_SHARE = 0.01  # a process that used at least 1 % of a core between samples moved
MIN_CPU_S = 0.02  # and at least this much: two of the kernel's 10 ms ticks (one may be a signal's dump)
SIGNAL_WAKES = 2  # a sample's signal may wake the main thread (its handler, the wait resumed): not a move


def deadline(job: TorchJob) -> int | None:
    """The job's hang deadline in seconds (None: not watched, as a debug run is: its replicas wait for you)."""
    debug = job.spec.runMode.debug if job.spec.runMode is not None else None
    if debug is not None and debug.enabled:
        return None
    value = job.run_policy.hangDeadlineSeconds
    if value is None:
        return DEFAULT_S
    return value or None


def sample_every(limit: float) -> float:
    """How often the runtime samples every rank for a deadline of `limit` seconds."""
    return min(max(limit / SAMPLES, MIN_EVERY_S), MAX_EVERY_S)


def bound(limit: float) -> float:
    """The latest a hang is caught after its ranks' last move (without the samples' own time): the move
    is seen at the next sample, and the deadline is judged at a sample."""
    return limit + 2 * sample_every(limit)


@dataclass(frozen=True)
class RankSample:
    """One rank process at a sample: its main thread's stack (any hashable form), its CPU seconds and
    its main thread's voluntary context switches (None: not known, not taken)."""

    stack: Hashable
    cpu_s: float | None = None
    wakes: int | None = None


class Stillness:
    """Since when no sampled rank moved. `observe` each sample (every running replica's ranks, by a
    key that names a process: a new key is a move); `still` is None until a sample covered every
    running replica. A sample's stacks are needed only where the counters (CPU, wakes) say no rank
    moved (`needs_stacks`): a running job's ranks are then never signalled, since a signal can cut a
    system call short (a socket's connect or poll returns EINTR, and torch retries it with a warning)."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[RankSample, datetime]] = {}
        self._moved_at: datetime | None = None
        self._seen_at: datetime | None = None
        self._complete = False

    def needs_stacks(self, at: datetime, ranks: Mapping[Hashable, RankSample]) -> bool:
        """Whether these ranks (their counters, no stacks yet) moved by their counters alone since the
        latest sample: if none did, the runtime takes their stacks to tell."""
        if not ranks or set(ranks) != set(self._last):
            return False
        return not any(_moved(self._last[k][0], RankSample(None, r.cpu_s, r.wakes),
                              (at - self._last[k][1]).total_seconds()) for k, r in ranks.items())

    def observe(self, at: datetime, ranks: Mapping[Hashable, RankSample], complete: bool) -> None:
        """A sample taken at `at`; `complete`: it holds a rank of every running replica."""
        moved = set(ranks) != set(self._last)  # a process came or went: a restart, a new attempt
        for key, now in ranks.items():
            before = self._last.get(key)
            if before is not None and _moved(before[0], now, (at - before[1]).total_seconds()):
                moved = True
        self._last = {key: (sample, at) for key, sample in ranks.items()}
        if moved or self._moved_at is None:
            self._moved_at = at
        self._seen_at = at
        self._complete = complete and bool(ranks)

    def still(self) -> Still | None:
        if not self._complete or self._moved_at is None or self._seen_at is None:
            return None
        return Still(since=self._moved_at, seen_at=self._seen_at)


def _moved(before: RankSample, now: RankSample, seconds: float) -> bool:
    if now.stack is not None and before.stack is not None and now.stack != before.stack:
        return True
    if now.wakes is not None and before.wakes is not None and now.wakes - before.wakes > SIGNAL_WAKES:
        return True
    if now.cpu_s is None or before.cpu_s is None:
        return False
    return now.cpu_s - before.cpu_s >= max(CPU_SHARE * seconds, MIN_CPU_S)


def job_still(samples: Sequence[tuple[datetime, datetime] | None]) -> Still | None:
    """A job's stillness on a cluster from each running replica's latest sample (since when none of its ranks
    moved, when its pod saw that: kube/inpod/torchjob_stacks.py): no rank of the job moved since the latest
    of them, as of the earliest; None unless every running replica has one."""
    if not samples or any(s is None for s in samples):
        return None
    return Still(since=max(s[0] for s in samples if s), seen_at=min(s[1] for s in samples if s))


def next_look(job: TorchJob, still: Still, now: datetime) -> datetime:
    """When a job not hung yet could be, by its samples: its deadline after the last move, and no sooner than
    the next sample (a runtime whose samples do not wake its rounds looks again then: the operator's)."""
    limit = deadline(job) or 0
    return max(still.since + timedelta(seconds=limit), now + timedelta(seconds=sample_every(limit)))


def hung(job: TorchJob, still: Still | None) -> bool:
    """No rank moved for the job's hang deadline, as of the latest sample."""
    limit = deadline(job)
    return limit is not None and still is not None and still.seen_at - still.since >= timedelta(seconds=limit)
