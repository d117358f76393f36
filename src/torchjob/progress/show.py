"""A job's progress as text, for the live bar, `list` and `describe`. Pure."""

from __future__ import annotations

from datetime import datetime

from torchjob.api.model import Progress
from torchjob.api.status import MetricHistory


def duration(seconds: float | None) -> str:
    """`45s`, `3m05s`, `2h10m`; `-` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def percent(p: Progress | None) -> str:
    if p is None:
        return "-"
    if p.percent is not None:
        return f"{p.percent:.0f}%"
    return f"step {p.step}" if p.step is not None else "-"


def steps(p: Progress) -> str | None:
    if p.step is None:
        return None
    return f"step {p.step}/{p.total}" if p.total is not None else f"step {p.step}"


def rate(p: Progress) -> str | None:
    if not p.rate:
        return None
    return f"{p.rate:.3g} steps/s" if p.rate >= 1 else f"{1 / p.rate:.3g} s/step"


def metrics(p: Progress, limit: int = 4) -> str:
    shown = [f"{m.name}={m.value}" for m in p.metrics[:limit]]
    if len(p.metrics) > limit:
        shown.append(f"+{len(p.metrics) - limit}")
    return " ".join(shown)


def summary(p: Progress, now: datetime | None = None) -> str:
    """One line: `45% · step 450/1000 · 12.3 steps/s · ETA 45s · loss=0.31`."""
    parts = [percent(p)] if p.percent is not None else []
    parts += [x for x in (steps(p), rate(p)) if x]
    if p.etaSeconds is not None:
        parts.append(f"ETA {duration(p.etaSeconds)}")
    if p.metrics:
        parts.append(metrics(p))
    if now is not None and p.lastReportTime is not None:
        parts.append(f"last report {duration((now - p.lastReportTime).total_seconds())} ago")
    return " · ".join(parts) or "-"


def stragglers(p: Progress) -> list[str]:
    """describe's Stragglers line, under Progress: `Stragglers:  worker-2: 1.9x the median step time ...`."""
    return [f"Stragglers:  {'; '.join(s.message for s in p.stragglers)}"] if p.stragglers else []


def straggler_mark(p: Progress | None) -> str:
    """list's short marker after the progress: ` (straggler worker-2)`, ` (straggler worker-0 rank 3)` under
    torchrun, ` (2 stragglers)`."""
    if p is None or not p.stragglers:
        return ""
    if len(p.stragglers) > 1:
        return f" ({len(p.stragglers)} stragglers)"
    s = p.stragglers[0]
    return f" (straggler {s.replica}" + (f" rank {s.rank})" if s.rank is not None else ")")


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int = 24) -> str:
    """The curve in block characters: `width` samples, evenly spaced; a gap as a space."""
    if not values:
        return ""
    picked = [values[round(i * (len(values) - 1) / max(1, width - 1))] for i in range(min(width, len(values)))]
    nums = [v for v in picked if v is not None]
    if not nums:
        return " " * len(picked)
    low, high = min(nums), max(nums)
    span = (high - low) or 1.0
    return "".join(" " if v is None else SPARKS[round((v - low) / span * (len(SPARKS) - 1))] for v in picked)


def history_lines(h: MetricHistory | None) -> list[str]:
    """describe's History block: each metric's curve over the kept steps, loss first."""
    if h is None or not h.steps:
        return []
    head = (f"History:     {len(h.steps)} points, steps {h.steps[0]}-{h.steps[-1]}"
            + (f", one per {h.stride} steps" if h.stride > 1 else "")
            + (f", {h.omitted} metrics not kept" if h.omitted else ""))
    out = [head]
    for s in h.series:
        nums = [v for v in s.values if v is not None]
        if not moves(s.values):  # a constant or a value reported once: the value, not a curve
            out.append(f"  {s.name}: {nums[0]:.4g}" if nums else f"  {s.name}: -")
            continue
        out.append(f"  {s.name}: {sparkline(s.values)} {nums[0]:.4g} -> {nums[-1]:.4g}")
    return out


def moves(values: list[float | None]) -> bool:
    """Whether a metric's values make a curve: more than one value, not all the same (a total, a
    run's summary such as transformers' train_runtime, is a value to show, not a chart)."""
    return len({v for v in values if v is not None}) > 1
