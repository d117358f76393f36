"""Kills a job's replicas if its supervisor dies without saying goodbye (even by SIGKILL).

Forked by the supervisor before any replica starts (no new interpreter to start, so it takes
no CPU from the replicas' own start), in a session of its own, reading a pipe. The supervisor
writes `pg <pgid>` for every replica it starts and `bye` when it ends normally. End of file
without `bye` means the supervisor is gone: SIGTERM the processes of those groups that are the
job's (its marker in their environment: a group number may have been reused), SIGKILL after the
grace period every process of the job. (The store is not touched here: SQLite must not be used
across a fork. Readers mark a job whose supervisor is gone as failed: `runtime.get`.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

from torchjob.local.supervisor import pids
from torchjob.local.supervisor.sweep import sweep


def _members(groups: set[int], marker: str) -> list[int]:
    """The live processes of the replicas' groups that are the job's: a group whose replica ended
    long ago may have given its number to a stranger's session (pids are reused), so a process
    counts only if its environment carries the job's marker."""
    return [pid for pid in pids.all_pids() if pids.process_group(pid) in groups and pids.environ_has(pid, marker)]


def start(uid: str, grace_s: float) -> int:
    """Fork the watchdog; returns the write end of its pipe."""
    r, w = os.pipe()
    if os.fork() != 0:
        os.close(r)
        return w
    try:  # the watchdog: never returns
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, r)
        os.closerange(r + 1, 65536)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):  # a terminal's Ctrl-C is for the supervisor
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with os.fdopen(r) as pipe:
            watch(pipe, uid, grace_s)
    finally:
        os._exit(0)


def watch(pipe: Iterable[str], uid: str, grace_s: float) -> None:
    groups: set[int] = set()
    for raw in pipe:
        word, _, arg = raw.strip().partition(" ")
        if word == "pg":
            groups.add(int(arg))
        elif word == "bye":
            return
    # The supervisor died: SIGTERM the replicas, SIGKILL what is left after the grace period.
    marker = f"TORCHJOB_JOB_UID={uid}"
    ours = pids.with_env(marker)
    for pid in _members(groups, marker):
        pids.send(pid, signal.SIGTERM, ours)
    deadline = time.monotonic() + grace_s
    while _members(groups, marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    sweep(marker)
