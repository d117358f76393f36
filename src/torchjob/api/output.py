"""Lines of a job's output that carry something other than the user's text: a shipped function's runner
(torchjob.sdk.runner) prints rank 0's value, or why it cannot travel, on a line of its own, which the
Python API reads back and no face shows (the terminal, `torchjob logs`, `JobHandle.logs`, the dashboard).
The runner writes the same marks (it runs where torchjob may not be installed)."""

from __future__ import annotations

import re

RESULT_MARK = "@@torchjob-result@@"
UNRETURNABLE_MARK = "@@torchjob-unreturnable@@"
# what may come before the mark on a line as it is shown: the replica's prefix, the process's rank tag
_TAGS = re.compile(r"^(?:\[[\w.-]+\] )?(?:\[rank\d+\]: ?)?")


def hidden(line: str) -> bool:
    """Whether a line (a replica's, or the combined log's `[master-0] ...`) is one of the value's lines."""
    m = _TAGS.match(line)
    text = line[m.end():] if m else line
    return text.startswith((RESULT_MARK, UNRETURNABLE_MARK))
