"""A Python traceback in a replica's output: the exception it ends with, and where it was raised.
Each line may carry its process's rank tag (`[rank3]: `). Pure; core.torch_errors and
core.rank_errors read tracebacks with it."""

from __future__ import annotations

import re

# a process's line of a replica of several (local/ranktag, the pod's tee); torch's excepthook may tag it again
_RANK_TAG = re.compile(r"^(?:\[rank(\d+)\]: ?)+")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>.+))?$')
_TRACEBACK = "Traceback (most recent call last):"


def raised_at(lines: list[str]) -> tuple[str, str | None] | None:
    """(the exception's line, the innermost frame as `FILE, line N, in FUNCTION`) of the Python
    traceback in a replica's lines (each maybe tagged `[rankN]: `): of the rank whose traceback starts
    first, its last one, read from its own lines; None when they hold no traceback."""
    tags = [_RANK_TAG.match(line) for line in lines]
    bare = [line[m.end():] if m else line for line, m in zip(lines, tags, strict=True)]
    starts = [i for i, line in enumerate(bare) if line.strip() == _TRACEBACK]
    if not starts:
        return None
    def rank_of(i: int) -> str | None:
        m = tags[i]
        return m.group(1) if m else None

    rank = rank_of(starts[0])  # the rank that failed first; its last traceback (a chained one's end)
    start = [i for i in starts if rank_of(i) == rank][-1]
    own = [bare[i] for i in range(start + 1, len(lines)) if rank_of(i) == rank]
    frames = [i for i, line in enumerate(own) if _FRAME.match(line)]
    after = own[frames[-1] + 1:] if frames else own
    # the exception's line: the first one not indented after the innermost frame (its code and carets are)
    error = next((line.strip() for line in after if line.strip() and not line[:1].isspace()), None)
    if error is None:
        return None
    where = None
    if frames:
        f = _FRAME.match(own[frames[-1]])
        assert f is not None
        where = f"{f['file']}, line {f['line']}" + (f", in {f['fn']}" if f["fn"] else "")
    return error, where
