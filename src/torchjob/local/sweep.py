"""Find and kill a job's stray processes by the marker in their environment. Standard library
only: the watchdog imports it and must start fast."""

from __future__ import annotations

import os
import signal


def sweep(marker: str, exclude: int | None = None) -> list[int]:
    """SIGKILL every process whose environment carries `marker` (TORCHJOB_JOB_UID=<uid>): the
    job's descendants that left its process groups (torchrun starts its workers in sessions of
    their own). Returns the pids killed."""
    needle = b"\0" + marker.encode() + b"\0"
    me = os.getpid()
    killed: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return killed
    for pid in pids:
        if pid in (me, exclude):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if needle in env:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed
