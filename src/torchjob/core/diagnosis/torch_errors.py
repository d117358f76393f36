"""Reading torch's error file: what `@record` (torch.distributed.elastic) writes to
TORCHELASTIC_ERROR_FILE when a replica raises. Locally it is a file per attempt; on Kubernetes it
is the pod's termination message (TORCHELASTIC_ERROR_FILE=/dev/termination-log). Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from torchjob.core.diagnosis import rank_errors
from torchjob.core.diagnosis.tracebacks import raised_at

__all__ = ["brief", "headline", "last_words", "raised_at", "said", "torchrun_report", "traceback"]


def traceback(text: str) -> str | None:
    """The traceback in an error file's text, else its message; None if it is not torch's."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, dict):
        extra = msg.get("extraInfo", {})
        return str(extra.get("py_callstack") or msg.get("message") or "").rstrip() or None
    return str(msg).rstrip() if msg else None


def headline(text: str, limit: int = 300) -> str | None:
    """One line for a status: the error itself (a traceback's last line, e.g. `RuntimeError: ...`),
    or the last line of a plain termination message."""
    found = traceback(text) or text
    lines = [line.strip() for line in found.splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= limit else line[: limit - 3] + "..."


# torchrun's own lines: its agent's log records (`E1126 22:56:13.756000 13381 torch/...] failed ...`)
# and the report it prints when a rank fails (a Python traceback, then a block of `=` and `-` rules
# listing the failures and the "Root Cause (first observed failure)").
_AGENT_RECORD = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/elastic/")
_AGENT_FAILED = re.compile(r"^E\d{4} .*\bfailed \(exitcode: -?\d+\) local_rank: \d+")


def torchrun_report(lines: list[str]) -> tuple[list[str], str] | None:
    """Split a replica's output that ends in torchrun's failure report into the ranks' own lines
    before it (what the failing rank itself said: a C++ abort's message, a traceback) and one line
    saying which rank torchrun names as the root cause. None when the output has no such report.

    torchrun's report is 40-odd lines of its own traceback and rules, so the end of the output
    shows the report and hides the rank's own last words, which say why."""
    try:
        cause_at = max(i for i, line in enumerate(lines) if line.strip() == "Root Cause (first observed failure):")
    except ValueError:
        return None
    entry: dict[str, str] = {}
    for line in lines[cause_at + 1:]:
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() in ("rank", "exitcode", "traceback"):
            entry[key.strip()] = " ".join(value.split())
    # the last failure the agent logged (after restarts inside the agent, earlier ones came before)
    start = next((i for i in range(cause_at - 1, -1, -1) if _AGENT_FAILED.match(lines[i])), None)
    if start is None:  # no agent record: the report starts at its traceback or at its first rule
        tracebacks = [i for i in range(cause_at) if lines[i].startswith("Traceback (most recent")]
        start = tracebacks[-1] if tracebacks else cause_at
    own = [line for line in lines[:start] if not _AGENT_RECORD.match(line)]
    what = entry.get("traceback") or ""
    if not what or what.startswith("To enable traceback"):  # torchrun's hint, where no error file was written
        what = f"exit code {entry.get('exitcode', '?')}"
    return own, f"torchrun's root cause: rank {entry.get('rank', '?')}: {what}"


# --- a root cause told under the output that already showed its traceback ------------------------

# the root cause's blocks of quoted output (local/inspect/read.py's root_cause): a head line, then lines indented by 4
_QUOTES = ("  traceback (from torch's error file):", "  last ")


def brief(root_cause: str, again: str, shown: Callable[[str], bool] | None = None) -> str:
    """A root cause printed under the job's output, where its traceback was just streamed: each quoted
    block that holds a traceback becomes the error's line (unless the message above says it) and where
    it was raised, and says the traceback is in the output above (`again`: where to read it once
    more). A block whose lines the output did not show (`shown` false for one: a --ranks-filter hid
    them) is kept whole."""
    lines = root_cause.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith(_QUOTES) and line.endswith(":")):
            out.append(line)
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].startswith("    "):
            end += 1
        quoted = [q[4:] for q in lines[i + 1:end]]
        found = raised_at(quoted)
        if found is None or (shown is not None and not all(shown(q) for q in quoted if q.strip())):
            out += lines[i:end]
        else:
            error, where = found
            if not any(error in said for said in out):  # not when the failure's message already says it
                out.append(f"  error     : {error}")
            if where:
                out.append(f"  raised at : {where}")
            out.append(f"  traceback : in the job's output above ({again})")
        i = end
    return "\n".join(out)


# --- a replica's last words, from what a cluster kept of it ---------------------------------------


def said(text: str, limit: int = 300) -> str | None:
    """The one line a replica's last words say, for a status: torch's error (its error file's
    headline), else the error of the traceback in its output (the ranks' own, before torchrun's
    report), else its last line of its own. `text`: a pod's termination message (torch's error file,
    or with `terminationMessagePolicy: FallbackToLogsOnError` the end of its log) or a log's tail."""
    if traceback(text) is not None:
        return headline(text, limit)
    lines = text.splitlines()
    report = torchrun_report(lines)
    own = report[0] if report is not None else lines
    told = rank_errors.failing(own, rank_errors.named_rank(report[1]) if report is not None else None)
    found = next((e for e in told[1] if e.rank == told[0]), None) if told is not None else None
    line = found.error if found is not None else next((s.strip() for s in reversed(own) if s.strip()), None)
    if line is None:
        return headline(report[1], limit) if report is not None else None
    return line if len(line) <= limit else line[: limit - 3] + "..."


def last_words(lines: list[str], count: int) -> list[str]:
    """The root cause's quoted block of a replica's output (`lines`, its tail): the failing rank's
    own lines from its traceback on (core.rank_errors: not a peer's follow-on error of a collective),
    else its last `count` lines; when torchrun ended it with its failure report, the ranks' own lines
    before the report instead, and the report's root cause in one line. Each head line is indented
    by 2, each quoted line by 4."""
    report = torchrun_report(lines)
    own, cause = report if report is not None else (lines, None)
    q = rank_errors.quote(own, count, rank_errors.named_rank(cause),
                          "the ranks' own output (before torchrun's report)" if cause else "its output")
    out = [f"  {cause}"] if cause else []
    if q.followed:  # several ranks raised: which one's error is the failure
        others = ", ".join(f"rank {e.rank}" for e in q.followed)
        out.append(f"  rank      : {q.rank} (its own error; {others} failed after it, in a collective)")
    if q.lines:
        out += [f"  {q.title}:", *("    " + t for t in q.lines)]
    return out
