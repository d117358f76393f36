"""Reading torch's error file: what `@record` (torch.distributed.elastic) writes to
TORCHELASTIC_ERROR_FILE when a replica raises. Locally it is a file per attempt; on Kubernetes it
is the pod's termination message (TORCHELASTIC_ERROR_FILE=/dev/termination-log). Pure."""

from __future__ import annotations

import json
import re


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
    what = entry.get("traceback") or f"exit code {entry.get('exitcode', '?')}"
    return own, f"torchrun's root cause: rank {entry.get('rank', '?')}: {what}"
