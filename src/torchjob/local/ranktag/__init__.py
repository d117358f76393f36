"""Each process's lines tagged with its rank: a local replica that runs several processes through
torchrun writes every line of each as `[rank3]: ...` (torch's own `[rankN]:` convention), so the
terminal, `torchjob logs`, the Python API's stream and the dashboard tell rank 0 from rank 1 of the
same replica. torchrun's `--tee` does this by tailing files and was seen to drop and repeat lines;
here each process tags its own writes (`hook/sitecustomize.py`, loaded by Python's `site` at start-up
through PYTHONPATH), whole lines at a time, so nothing is lost or interleaved mid-line.

What a process writes to its file descriptors below Python (a C++ warning) is not tagged; it still
carries its replica's `[master-0]`."""

from __future__ import annotations

import os
import re
from pathlib import Path

HOOK_DIR = str(Path(__file__).resolve().parent / "hook")
ENABLE = "TORCHJOB_RANK_TAG"
TAG = re.compile(r"^\[rank(\d+)\]: ?")


def env(pythonpath: str | None) -> dict[str, str]:
    """What a replica of several processes gets: the hook first on its PYTHONPATH, and the switch."""
    parts = [HOOK_DIR, *(p for p in (pythonpath or "").split(os.pathsep) if p and p != HOOK_DIR)]
    return {"PYTHONPATH": os.pathsep.join(parts), ENABLE: "1"}


def rank_of(line: str) -> int | None:
    """The rank a tagged line names, else None."""
    m = TAG.match(line)
    return int(m.group(1)) if m else None


def as_shown(line: bytes) -> bytes:
    """A line of output as a terminal leaves it: a progress bar (tqdm) redraws itself with `\r` and
    the new state, its line ending only when it does; kept whole, the line would hold every state and,
    printed under a `[master-0] ` prefix, its first `\r` would return over the prefix. Its last state
    (the last part that is not blank) is the line. A replica of several processes gets this from the
    hook already, with each state tagged."""
    body = line.rstrip(b"\r\n")
    if b"\r" not in body:
        return line
    last = next((part for part in reversed(body.split(b"\r")) if part.strip()), b"")
    return last + line[len(body):]
