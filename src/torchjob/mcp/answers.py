"""What a tool of `torchjob mcp` gives back: an `Answer` (a short text and the same facts as data), or a
`Mistake` of the agent's (the argument, the reason, the fix); and a job as that data (`row`, `detail`),
read from the `JobView` every runtime fills."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchjob.api.errors import InvalidJob, UserError
from torchjob.runtime import AmbiguousJob, JobNotFound, JobView

if TYPE_CHECKING:
    from torchjob.api.model import Progress

EVENTS = 20  # describe_job's latest events
HISTORY_POINTS = 50  # describe_job's latest points of each metric's history


@dataclass
class Mistake(Exception):
    """A mistake of the agent's: which argument, why, and what to do instead (a tool error, never a
    traceback). `problems`: a document's problems each with its field and line."""

    field: str
    reason: str
    fix: str | None = None
    problems: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        Exception.__init__(self, self.reason)

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": {"field": self.field, "reason": self.reason, "fix": self.fix}}
        if self.problems:
            out["error"]["problems"] = self.problems
        return out

    def text(self) -> str:
        return f"{self.field}: {self.reason}" + (f"\nfix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class Answer:
    text: str
    data: dict[str, Any]


def mistake_of(e: UserError, arg: str) -> Mistake:
    """A UserError of torchjob's as the agent's mistake about `arg` (a document's problems each named)."""
    if isinstance(e, InvalidJob):
        problems = [{"field": p.path, "reason": p.message, "fix": p.fix, "line": p.line} for p in e.problems]
        first = e.problems[0] if e.problems else None
        return Mistake(arg, e.render(), first.fix if first else None, problems)
    if isinstance(e, JobNotFound | AmbiguousJob):
        return Mistake("name", e.message, e.fix)
    return Mistake(arg, e.message, e.fix)


def _number(value: str) -> float | str:
    try:
        f = float(value)
    except ValueError:
        return value
    return f if math.isfinite(f) else value


def progress_data(p: Progress | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"percent": p.percent, "step": p.step, "total": p.total, "eta_s": p.etaSeconds, "rate": p.rate,
            "metrics": {m.name: _number(m.value) for m in p.metrics},
            "last_report": p.lastReportTime.isoformat() if p.lastReportTime else None, "reporter": p.reporter}


def progress_text(p: dict[str, Any]) -> str:
    parts = []
    if p.get("step") is not None:
        parts.append(f"step {p['step']}" + (f"/{p['total']}" if p.get("total") else ""))
    if p.get("percent") is not None:
        parts.append(f"{p['percent']:.0f}%")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {p['eta_s']}s")
    parts += [f"{k}={v}" for k, v in (p.get("metrics") or {}).items()]
    return ", ".join(parts)


def row(v: JobView) -> dict[str, Any]:
    """A job as list_jobs gives it."""
    from torchjob.api.spec_facts import processes

    st = v.status
    out: dict[str, Any] = {"name": v.name, "state": str(st.state), "progress": progress_data(st.progress)}
    if v.namespace is not None:
        out["namespace"] = v.namespace
    if v.kind is not None:
        out["kind"] = v.kind
    out.update({"replicas": sum(v.replicas.values()), "world_size": processes(v.job)[1],
                "restarts": st.restartCount, "reason": st.failure.reason if st.failure else None})
    return out


def _history(p: Progress | None) -> dict[str, Any] | None:
    h = p.history if p else None
    if h is None or not h.steps:
        return None
    keep = range(max(0, len(h.steps) - HISTORY_POINTS), len(h.steps))
    return {"steps": [h.steps[i] for i in keep],
            "series": {s.name: [s.values[i] if i < len(s.values) else None for i in keep] for s in h.series}}


def detail(v: JobView, brief: bool = False) -> dict[str, Any]:
    """A job as describe_job gives it (`brief`: its name, state, progress and root cause only)."""
    st = v.status
    out = row(v)
    out["root_cause"] = v.root_cause
    if brief:
        return out
    out.update({
        "started": st.startTime.isoformat() if st.startTime else None,
        "completed": st.completionTime.isoformat() if st.completionTime else None,
        "history": _history(st.progress),
        "attempts": [{"replica": a.replica, "attempt": a.attempt, "exit_code": a.exit_code, "reason": a.reason,
                      "started": a.started, "ended": a.ended, "pod": a.pod, "waiting": a.waiting}
                     for a in v.attempts],
        "conditions": [{"type": str(c.type), "status": str(c.status), "reason": c.reason, "message": c.message}
                       for c in st.conditions],
        "events": [{"type": str(e.type), "reason": e.reason, "message": e.message, "time": e.time}
                   for e in v.events[-EVENTS:]],
    })
    return out
