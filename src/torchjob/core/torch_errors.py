"""Reading torch's error file: what `@record` (torch.distributed.elastic) writes to
TORCHELASTIC_ERROR_FILE when a replica raises. Locally it is a file per attempt; on Kubernetes it
is the pod's termination message (TORCHELASTIC_ERROR_FILE=/dev/termination-log). Pure."""

from __future__ import annotations

import json


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
