"""What a runtime keeps of one job's progress reports: the latest progress (percent, ETA, rate,
metrics, and their downsampled history), when each replica attempt last reported (the fact `core`
judges stalls by), and the job's rate limit. Thread-safe; times are given by the caller, so it can
be tested without a clock."""

from __future__ import annotations

import threading
from collections import deque
from datetime import datetime, timedelta

from torchjob.api.model import Metric, Progress
from torchjob.api.status import MetricHistory, Straggler
from torchjob.progress.history import LOCAL_CAPACITY, LOCAL_SERIES, History, number
from torchjob.progress.protocol import Report
from torchjob.progress.stragglers import RANK_SEP, STEP_TIME, Change, Stragglers

RATE_WINDOW_S = 60.0  # the rate is the steps made over about this long
REPORTS_PER_S = 20.0  # a job's sustained report rate (a helper sends one per replica per second)
BURST = 200  # reports a job may send at once beyond that (every rank at start, say)
FAIR_S = 0.9  # a replica attempt not let through for this long is, past the job's rate (see Book.admit)


class RateLimit:
    """A token bucket: `rate` a second, `burst` at once."""

    def __init__(self, rate: float = REPORTS_PER_S, burst: int = BURST) -> None:
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.at = float(burst), None  # type: float, float | None

    def take(self, now: float) -> float:
        """0 when allowed; otherwise the seconds until a report would be."""
        wait = self.wait(now)
        if wait == 0:
            self.tokens -= 1
        return wait

    def wait(self, now: float) -> float:
        """What `take` would answer, taking nothing."""
        if self.at is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def full(self, now: float) -> bool:
        self.wait(now)
        return self.tokens >= self.burst


class Book:
    """`capacity`, `max_series`: the history's bounds (the runtime's: the store keeps more than a
    Kubernetes status); `saved`: the history a runtime stored before (an operator restarted), to go on from."""

    def __init__(self, capacity: int = LOCAL_CAPACITY, max_series: int = LOCAL_SERIES,
                 saved: MetricHistory | None = None) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], datetime] = {}  # (replica, attempt) -> last report
        self._done: set[tuple[str, int]] = set()  # replica attempts whose latest progress said 100 %
        self._progress = Progress()
        self._steps: deque[tuple[datetime, int]] = deque()  # (when, step) of the recent reports
        self._metrics: dict[str, str] = {}
        self._history = History.load(saved, capacity, max_series)
        self._reports = 0  # reports with metrics: their x when the job reports no step
        self.version = 0  # bumped by every accepted report: writers compare it to what they wrote
        self.limit = RateLimit()
        self._admitted: dict[tuple[str, int], float] = {}  # (replica, attempt) -> when last let through
        self._stragglers = Stragglers()
        self._news: list[Change] = []  # straggler changes not yet said as events (see news)
        # (replica, attempt) -> (since when none of its ranks moved, when that was seen): its pod's samples
        self._still: dict[tuple[str, int], tuple[datetime, datetime]] = {}

    def admit(self, replica: str, attempt: int, now: float) -> float:
        """The job's rate limit for a report of this replica attempt (`now`: monotonic seconds): 0 when
        it is taken, else the seconds to wait. A replica attempt that has not been let through for
        FAIR_S is let through past the job's rate, so that in a job of more replicas than the rate
        (each sending one a second) none is starved into looking stalled; a flood still gets 429s."""
        with self._lock:
            wait = self.limit.take(now)
            last = self._admitted.get((replica, attempt))
            if wait > 0 and (last is None or now - last >= FAIR_S):
                wait = 0.0
            if wait == 0:
                self._admitted[(replica, attempt)] = now
            return wait

    def record(self, replica: str, attempt: int, report: Report, at: datetime) -> bool:
        """Take a report; True when it is that attempt's first (the runtime then looks again at once:
        `core` starts its clock). A pod's stillness (`still_seconds`) is not progress: `note_still`."""
        if report.still_seconds is not None:
            return self.note_still(replica, attempt, report.still_seconds, at)
        with self._lock:
            first = (replica, attempt) not in self._last
            restart = False
            self._last[(replica, attempt)] = at
            if report.percent is not None:
                if report.percent >= 100:
                    self._done.add((replica, attempt))
                else:
                    self._done.discard((replica, attempt))
            self.version += 1
            p = self._progress.model_copy()
            p.lastReportTime, p.reporter = at, replica
            if report.percent is not None:
                p.percent = round(report.percent, 2)
            if report.total is not None:
                p.total = report.total
            if report.step is not None:
                if p.step is not None and report.step < p.step and (first or replica == self._progress.reporter):
                    # the step went back, from the same reporter or in a new attempt (whichever replica
                    # reports first after a restart): a restart from a checkpoint, the rate starts again
                    self._steps.clear()
                    restart = True
                p.step = report.step
                self._steps.append((at, report.step))
                if first:  # a new attempt (a restart): its step time starts afresh
                    self._stragglers.forget(replica)
                own = number(report.metrics.get(STEP_TIME, "-"))
                # under torchrun each worker (its report names its rank) is timed on its own
                who = replica if report.rank is None else f"{replica}{RANK_SEP}{report.rank}"
                self._stragglers.note(who, at, report.step, own if isinstance(own, float) else None)
                self._news += self._stragglers.judge(at)
                while len(self._steps) > 2 and (at - self._steps[0][0]).total_seconds() > RATE_WINDOW_S:
                    self._steps.popleft()
                p.rate = self._rate()
            elif report.percent is not None and report.percent >= 100 and p.total is not None:
                # done without a step (transformers' KubeflowCallback ends so): at the last step, not at
                # the last one a rate-limited report carried
                p.step = max(p.step or 0, p.total)
            self._metrics.update(report.metrics)
            if report.metrics or restart:
                self._reports += bool(report.metrics)
                x = _step_of(report, p, self._reports)
                self._history.record(x, report.metrics, restart)
            p.metrics = [Metric(name=k, value=v) for k, v in self._metrics.items()]
            if report.eta_seconds is not None:
                p.etaSeconds = report.eta_seconds
            elif p.rate and p.step is not None and p.total is not None:
                p.etaSeconds = max(0, round((p.total - p.step) / p.rate))
            elif report.step is not None:
                p.etaSeconds = None  # no rate yet (after a restart, say): no ETA rather than the old run's
            self._progress = p
            return first

    def _rate(self) -> float | None:
        if len(self._steps) < 2:
            return None
        (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        dt = (t1 - t0).total_seconds()
        return round((s1 - s0) / dt, 4) if dt > 0 and s1 >= s0 else None

    def news(self) -> list[Change]:
        """The replicas that became stragglers or caught up since the last call: each said once, as an event."""
        with self._lock:
            out, self._news = self._news, []
            return out

    def note_still(self, replica: str, attempt: int, seconds: float, at: datetime) -> bool:
        """A replica attempt's pod sampled its ranks at `at`: none moved for `seconds`. Not progress. True when
        it is that attempt's first sample (the runtime then looks again: core schedules its next look)."""
        with self._lock:
            first = (replica, attempt) not in self._still
            self._still[(replica, attempt)] = (at - timedelta(seconds=seconds), at)
            return first

    def still(self, replica: str, attempt: int) -> tuple[datetime, datetime] | None:
        """Since when none of this replica attempt's ranks moved, and when its pod last said so (None: never)."""
        with self._lock:
            return self._still.get((replica, attempt))

    def last_report(self, replica: str, attempt: int) -> datetime | None:
        with self._lock:
            return self._last.get((replica, attempt))

    def reported_done(self, replica: str, attempt: int) -> bool:
        """Whether this replica attempt's latest report with a progress said its work is complete
        (step == total, or 100 %): `core` reads it when the attempt fails afterwards."""
        with self._lock:
            return (replica, attempt) in self._done

    def progress(self, history: bool = True) -> Progress | None:
        """The latest progress (with its metric history unless `history` is False); None before the
        first report."""
        with self._lock:
            if not self._progress.lastReportTime:
                return None
            out = self._progress.model_copy(deep=True)
            # dumped when read (once per write interval), not at every report
            out.history = self._history.dump() if history and self._history.points() else None
            out.stragglers = [Straggler(replica=s.reporter.partition(RANK_SEP)[0], factor=s.factor,
                                        stepSeconds=s.seconds, message=s.message, rank=_rank_of(s.reporter))
                              for s in self._stragglers.current.values()]
            return out


def _step_of(report: Report, p: Progress, reports: int) -> int:
    """The step a report's metrics are drawn at: its own step; else, where the total is known, the
    step its percent says (Trainer's whole percent; a report at 100% is at the last step); else the
    last step reported; else the count of reports."""
    if report.step is not None:
        return report.step
    if report.percent is not None and p.total:
        return max(p.step or 0, round(p.total * report.percent / 100))
    return p.step if p.step is not None else reports


def _rank_of(reporter: str) -> int | None:
    """The rank a torchrun worker's reporter names (`worker-0 rank 3`), None for a whole replica."""
    _, sep, rank = reporter.partition(RANK_SEP)
    return int(rank) if sep and rank.isdigit() else None
