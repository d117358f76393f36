"""Find and kill a job's stray processes by the marker in their environment. Standard library
only: the watchdog imports it and must start fast."""

from __future__ import annotations

import os
import signal

from torchjob.local.supervisor import pids


def sweep(marker: str, exclude: int | None = None, sig: int = signal.SIGKILL) -> list[int]:
    """SIGKILL every process whose environment carries `marker` (TORCHJOB_JOB_UID=<uid>): the
    job's descendants that left its process groups (torchrun starts its workers in sessions of
    their own). Each is checked through its pidfd (torchjob.local.supervisor.pids). Returns the pids signalled."""
    me = os.getpid()
    has = pids.with_env(marker)
    return [pid for pid in pids.all_pids() if pid not in (me, exclude) and pids.send(pid, sig, has)]
