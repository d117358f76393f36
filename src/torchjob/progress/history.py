"""A job's metric history: every metric reported, over steps, bounded and downsampled. Pure.

The points share one step axis (`steps`) with one column of values per metric (null where a metric
was not reported at that step), the shape a time-series chart draws directly. It is bounded by
halving: each point stands for a bucket of `stride` steps (the latest report in the bucket wins,
merged with the earlier ones' metrics it lacks); when the points pass `capacity`, the stride doubles
and every two neighbouring buckets become one. So a job of S steps, reported at every step, keeps
between capacity/2 and capacity points whatever S is, spread evenly over the steps, each a value as
reported (no averaging: a spike at the kept step is shown as it was, a spike between kept steps is
not). A restart from a checkpoint (the step goes back) drops the points past it: the new attempt's
curve replaces them.

Values are kept to `digits` significant digits (a chart needs no more), NaN and infinities as null
(JSON has neither); a value that is no number (a string metric) has no curve. At most `max_series`
metrics are kept (loss first, then in the order they first came); the names of the rest are
counted in `omitted`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from torchjob.api.status import MetricHistory, MetricSeries

LOCAL_CAPACITY = 4096  # points per job locally (the store keeps them): a million steps keep 2048-4096
LOCAL_SERIES = 16
KUBE_CAPACITY = 256  # points per job in a TorchJob's status.progress (written with the progress write)
KUBE_SERIES = 8
DIGITS = 5


def number(text: str) -> float | bool | None:
    """A reported value as a chart's number: a float, None for NaN/inf (a gap), False when it is no
    number at all (no curve)."""
    try:
        v = float(text)
    except ValueError:
        return False
    return v if math.isfinite(v) else None


def first_is_loss(names: list[str]) -> list[str]:
    """Names in the order they are shown: those that say loss first, the rest as they came."""
    return sorted(names, key=lambda n: 0 if "loss" in n.lower() else 1)


@dataclass
class History:
    capacity: int = LOCAL_CAPACITY
    max_series: int = LOCAL_SERIES
    digits: int = DIGITS
    stride: int = 1
    steps: list[int] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    omitted: int = 0
    _omitted_names: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.capacity < 2:
            raise ValueError("a history keeps at least 2 points")

    def _round(self, v: float | None) -> float | None:
        return None if v is None else float(f"{v:.{self.digits}g}")

    def _admit(self, name: str) -> bool:
        if name in self.series:
            return True
        if len(self.series) < self.max_series:
            self.series[name] = [None] * len(self.steps)
            return True
        # full: a loss metric takes the place of the last non-loss one that came (loss is drawn first)
        if "loss" in name.lower():
            others = [n for n in self.series if "loss" not in n.lower()]
            if others:
                gone = others[-1]
                del self.series[gone]
                self._omit(gone)
                self.series[name] = [None] * len(self.steps)
                return True
        self._omit(name)
        return False

    def _omit(self, name: str) -> None:
        if name not in self._omitted_names:
            self._omitted_names.add(name)
            self.omitted = len(self._omitted_names)

    def record(self, step: int, metrics: dict[str, str], restart: bool = False) -> None:
        """One report's metrics at `step`; `restart`: the step went back because the job restarted
        from a checkpoint (the points past it are dropped)."""
        values: dict[str, float | None] = {}
        for name, text in metrics.items():
            v = number(text)
            if v is not False and not isinstance(v, bool) and self._admit(name):
                values[name] = self._round(v)
        if restart:
            cut = bisect.bisect_right(self.steps, step)
            del self.steps[cut:]
            for col in self.series.values():
                del col[cut:]
        if not values:
            return
        bucket = step // self.stride
        i = bisect.bisect_left(self.steps, bucket * self.stride)
        if i < len(self.steps) and self.steps[i] // self.stride == bucket:  # the bucket has a point
            later = step >= self.steps[i]
            if later:
                self.steps[i] = step
            for name, col in self.series.items():
                if name in values and (later or col[i] is None):
                    col[i] = values[name]
        else:
            self.steps.insert(i, step)
            for name, col in self.series.items():
                col.insert(i, values.get(name))
        while len(self.steps) > self.capacity:
            self._halve()

    def _halve(self) -> None:
        """Double the stride: the points of each new bucket become one (the latest, filled from earlier)."""
        self.stride *= 2
        steps: list[int] = []
        cols: dict[str, list[float | None]] = {n: [] for n in self.series}
        for i, s in enumerate(self.steps):
            if steps and steps[-1] // self.stride == s // self.stride:
                steps[-1] = s
                for n, col in self.series.items():
                    if col[i] is not None:
                        cols[n][-1] = col[i]
            else:
                steps.append(s)
                for n, col in self.series.items():
                    cols[n].append(col[i])
        self.steps, self.series = steps, cols

    def points(self) -> int:
        return len(self.steps)

    def dump(self) -> MetricHistory:
        return MetricHistory(stride=self.stride, steps=list(self.steps), omitted=self.omitted,
                             series=[MetricSeries(name=n, values=list(self.series[n]))
                                     for n in first_is_loss(list(self.series))])

    @classmethod
    def load(cls, saved: MetricHistory | None, capacity: int = LOCAL_CAPACITY,
             max_series: int = LOCAL_SERIES) -> History:
        """A history to go on with from one a runtime stored (an operator restarted: its status has it)."""
        h = cls(capacity=capacity, max_series=max_series)
        if saved is None or any(len(s.values) != len(saved.steps) for s in saved.series):
            return h  # none, or not one this code wrote: start afresh rather than draw a wrong curve
        h.stride = max(1, saved.stride)
        h.steps = list(saved.steps)
        for s in saved.series[:max_series]:
            h.series[s.name] = list(s.values)
        h.omitted = saved.omitted
        while len(h.steps) > h.capacity:
            h._halve()
        return h
