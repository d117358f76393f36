"""A job's progress as text, for the live bar, `list` and `describe`. Pure."""

from __future__ import annotations

from datetime import datetime

from torchjob.api.model import Progress


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
