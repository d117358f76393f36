"""Watching a local job for a hang without any report (runPolicy.hangDeadlineSeconds): a thread of the
supervisor reads from /proc, every tenth of the deadline, each rank process's CPU time and its main thread's
voluntary context switches, and where none moved by them takes every rank's stacks (local/inspect/
stacks.py: faulthandler, a signal and a file per process); core decides from them whether a rank moved
(core/policies/hangs.py) and whether the job is hung. The latest sample is the hung job's stacks:
they were the same for the whole deadline."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from pathlib import Path

from torchjob.api.model import TorchJob
from torchjob.core.diagnosis.stacks import ProcessStacks, Stacks
from torchjob.core.policies import hangs
from torchjob.core.round.world import Still
from torchjob.local.inspect import stacks

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """A process's CPU time, every thread's, user and system (None: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime: fields 14 and 15 of stat


def wakes(pid: int) -> int | None:
    """How many times a process's main thread went to sleep and woke (its voluntary context switches)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def main_stack(p: ProcessStacks) -> Hashable:
    main = p.main()
    return tuple((f.file, f.line, f.func) for f in main.frames) if main is not None else ()


class HangWatch:
    """Samples a job's ranks in a thread of its own while the job has a hang deadline. `attempts` is
    told the live attempts at each of the supervisor's rounds; `still` is core's fact for the round;
    `wake` is called when a sample finds the job hung (the supervisor's loop then decides)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._job: TorchJob | None = None
        self._live: dict[str, tuple[int, Path]] = {}  # replica -> (attempt, its folder)
        self._sampled: dict[str, int] = {}  # the attempts of the latest sample
        self._stillness = hangs.Stillness()
        self._last: Stacks | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attempts(self, job: TorchJob, live: dict[str, tuple[int, Path]]) -> None:
        with self._lock:
            self._job, self._live = job, dict(live)
        if self._thread is None and hangs.deadline(job) is not None and live:
            self._thread = threading.Thread(target=self._run, name="torchjob-hang-watch", daemon=True)
            self._thread.start()

    def still(self) -> Still | None:
        """No rank moved since when (None: no sample of exactly the live attempts yet)."""
        with self._lock:
            if self._sampled != {n: a for n, (a, _) in self._live.items()}:
                return None
            return self._stillness.still()

    def last(self) -> Stacks | None:
        with self._lock:
            return self._last

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                job, live = self._job, dict(self._live)
            limit = hangs.deadline(job) if job is not None else None
            if self._stop.wait(hangs.sample_every(limit or hangs.MAX_EVERY_S)):
                return
            if limit is None or not live:
                continue
            self.sample(job, live)

    def sample(self, job: TorchJob | None, live: dict[str, tuple[int, Path]]) -> None:
        """One sample of these attempts (the thread's; a test's): each rank process's counters from /proc,
        and its stacks only where no rank moved by them (core/policies/hangs.Stillness.needs_stacks)."""
        folders = {n: d for n, (_, d) in live.items()}
        procs = stacks.registered(folders)
        at = datetime.now(UTC)
        ranks: dict[Hashable, hangs.RankSample] = {
            (replica, pid): hangs.RankSample(None, cpu_seconds(pid), wakes(pid)) for replica, pid in procs}
        with self._lock:
            needed = self._stillness.needs_stacks(at, ranks)
        taken = stacks.collect(folders) if needed else None
        for p in taken.processes if taken is not None else ():
            if (key := (p.replica, p.pid)) in ranks:
                ranks[key] = dataclasses.replace(ranks[key], stack=main_stack(p))
        complete = {replica for replica, _ in procs} == set(live)
        with self._lock:
            if {n: a for n, (a, _) in self._live.items()} != {n: a for n, (a, _) in live.items()}:
                return  # the attempts changed while it was taken
            self._stillness.observe(at, ranks, complete)
            self._sampled = {n: a for n, (a, _) in live.items()}
            self._last = taken
            hung = job is not None and hangs.hung(job, self._stillness.still())
        if hung:
            self._wake()
