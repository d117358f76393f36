"""Kills a job's replicas if its supervisor dies without saying goodbye (even by SIGKILL).

Forked by the supervisor before any replica starts (no new interpreter to start, so it takes
no CPU from the replicas' own start), in a session of its own, reading a pipe. The supervisor
writes `pg <pgid>` for every replica it starts and `bye` when it ends normally. End of file
without `bye` means the supervisor is gone: SIGTERM every group, SIGKILL after the grace period,
and sweep the job's stray descendants. (The store is not touched here: SQLite must not be used
across a fork. Readers mark a job whose supervisor is gone as failed: `runtime.get`.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

from torchjob.local.sweep import sweep


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except OSError:
        return False


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
    # The supervisor died.
    alive = [g for g in groups if _killpg(g, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [g for g in alive if _killpg(g, 0)]  # signal 0: does the group still exist?
    for g in alive:
        _killpg(g, signal.SIGKILL)
    sweep(f"TORCHJOB_JOB_UID={uid}")
