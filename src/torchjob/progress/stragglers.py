"""Which reporter of a job is a straggler, from the steps its reports carry. Pure: times are given.

Reports are per replica attempt (the token names the replica), so a straggler is named by its
replica: in plain mode a replica is one rank (`worker-2` is rank 3). Under torchrun, where a
replica is one node's workers, each worker's report also names its rank, and each rank is a
reporter of its own (`worker-0 rank 3`).

A reporter's step time is its seconds per step over the last WINDOW_S of its reports (the steps
it advanced over the time between its first and its latest report in that window); where its
reports carry a `step_time` metric (seconds: the rank's own work in a step, before it waits in a
collective) the mean of those is used instead, since in lockstep data-parallel training every
rank advances at the pace of the slowest and only its own time tells which one that is.

A reporter is a straggler when its step time is at least FACTOR times the median of the others',
judged over at least MIN_SPAN_S of its reports, with at least MIN_REPORTERS reporters timed (with
two, the slow one and the fast one cannot be told from a slow job and a fast one). It stops being
one when it falls under CLEAR_FACTOR (a margin, so that one near the line is not named again and
again). Being slow is no stall: a straggler still reports, and stalls are judged by the time of
the last report alone.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from datetime import datetime

WINDOW_S = 60.0  # a step time is over the reports of about the last minute
MIN_SPAN_S = 10.0  # ... and over at least this long of them
MIN_STEPS = 3  # ... and at least this many steps (or step_time values)
FACTOR = 1.5  # a straggler: at least this many times the median of the others' step time
CLEAR_FACTOR = 1.25  # ... until it is under this
MIN_REPORTERS = 3
# A reporter's samples are kept at least this far apart (its latest report replacing one closer): a window
# holds about 240 of them however fast it reports, and a report costs the same at 1 report/s or 1,000
SAMPLE_S = WINDOW_S / 240
STEP_TIME = "step_time"  # the metric a rank may report its own step time in (seconds)
RANK_SEP = " rank "  # a torchrun worker's reporter: REPLICA rank RANK


@dataclass(frozen=True)
class Straggler:
    reporter: str
    factor: float  # its step time over the median of the others'
    seconds: float  # its step time

    @property
    def message(self) -> str:
        return f"{self.reporter}: {self.factor:.1f}x the median step time over the last minute"


@dataclass(frozen=True)
class Change:
    """A reporter became a straggler (`straggler` set) or caught up (None)."""
    reporter: str
    straggler: Straggler | None


def said(change: Change) -> tuple[str, str, str]:
    """The event that says a change once: (type, reason, message)."""
    if change.straggler is not None:
        return "Warning", "Straggler", change.straggler.message
    return "Normal", "StragglerCaughtUp", f"{change.reporter}: back within the others' step time"


class Stragglers:
    def __init__(self) -> None:
        self._seen: dict[str, deque[tuple[datetime, int, float | None]]] = {}  # reporter -> (at, step, step_time)
        self.current: dict[str, Straggler] = {}

    def note(self, reporter: str, at: datetime, step: int, step_time: float | None = None) -> None:
        """One report of `reporter` at `at`. A step behind its latest is not counted (under torchrun a
        replica's workers report with one token, one a step behind another); a new attempt of the
        replica (a restart from a checkpoint) is `forget` first."""
        q = self._seen.setdefault(reporter, deque())
        if q and step < q[-1][1]:
            return
        if len(q) >= 2 and (at - q[-2][0]).total_seconds() < SAMPLE_S:
            q[-1] = (at, step, step_time)  # the latest replaces a sample too close to the one before it
        else:
            q.append((at, step, step_time))
        while len(q) > 2 and (at - q[0][0]).total_seconds() > WINDOW_S:
            q.popleft()

    def forget(self, replica: str) -> None:
        """A replica that is gone or restarted, and each of its ranks: neither timed nor named any more."""
        for reporter in [r for r in self._seen.keys() | self.current.keys()
                         if r == replica or r.startswith(replica + RANK_SEP)]:
            self._seen.pop(reporter, None)
            self.current.pop(reporter, None)

    def step_time(self, reporter: str, now: datetime) -> float | None:
        """Its seconds per step over the last WINDOW_S; None without MIN_SPAN_S and MIN_STEPS of reports
        (or when its latest report is older than the window: it is not moving, which stalls judge)."""
        q = [r for r in self._seen.get(reporter, ()) if (now - r[0]).total_seconds() <= WINDOW_S]
        if len(q) < 2 or (q[-1][0] - q[0][0]).total_seconds() < MIN_SPAN_S:
            return None
        own = [t for _, _, t in q if t is not None]
        if len(own) >= MIN_STEPS:
            return statistics.fmean(own)
        steps = q[-1][1] - q[0][1]
        return (q[-1][0] - q[0][0]).total_seconds() / steps if steps >= MIN_STEPS else None

    def judge(self, now: datetime) -> list[Change]:
        """Who is a straggler now; the changes since the last judgement (each named once)."""
        times = {r: t for r in self._seen if (t := self.step_time(r, now)) is not None and t > 0}
        changes: list[Change] = []
        for r in sorted(self._seen):
            others = [t for o, t in times.items() if o != r]
            factor = times[r] / statistics.median(others) if r in times and len(times) >= MIN_REPORTERS else None
            was = r in self.current
            if factor is not None and (factor >= FACTOR or (was and factor >= CLEAR_FACTOR)):
                self.current[r] = Straggler(r, round(factor, 2), round(times[r], 3))
                if not was:
                    changes.append(Change(r, self.current[r]))
            elif was and (factor is not None or r not in times):
                del self.current[r]
                changes.append(Change(r, None))
        return changes
