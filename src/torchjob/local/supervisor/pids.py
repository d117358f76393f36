"""Signals that reach only the process meant. A pid read from a file, a log, a record or /proc
can name another process a few minutes later: pids wrap fast on a busy machine (pid_max is 32768
by default), and a signal sent to a reused pid kills a stranger without a trace. So a signal goes
through a pidfd opened *before* the process is checked: if the process checked is not the one the
pidfd holds (it died and its pid was taken in between), the signal fails instead of landing.

Standard library only: the watchdog imports it and must start fast. The one place in torchjob, its
tests and benches that signals a process it did not just start (tests/test_signals.py keeps it so).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

Check = Callable[[int], bool]


def _stat(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces): field 3 (the state) first."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()


def started(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22): with the pid,
    an identity no later process shares. None if there is no such process."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def environ_has(pid: int, entry: str) -> bool:
    """Whether the process's environment holds `entry` (NAME=value) exactly."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = b"\0" + f.read()
    except OSError:
        return False
    return b"\0" + entry.encode() + b"\0" in env


def process_group(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[2]) if fields else None


def send(pid: int, sig: int, check: Check) -> bool:
    """Send `sig` to `pid` if `check(pid)` holds for the process that has the pid now; True if sent."""
    if pid <= 0:
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if not check(pid):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False  # it ended: the pidfd held it, not whoever has its pid now
    finally:
        os.close(fd)


def started_at(ticks: int | None) -> Check:
    """The process started at `ticks` (as `started` read it when the pid was known to be it)."""
    return lambda pid: ticks is not None and started(pid) == ticks


def with_env(entry: str) -> Check:
    return lambda pid: environ_has(pid, entry)


def all_pids() -> Iterator[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield int(name)


def alive(pid: int | None, ticks: int | None) -> bool:
    """Whether the process that started at `ticks` with this pid still runs (a zombie does not)."""
    if not pid or ticks is None or started(pid) != ticks:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def spare_waiting(pid: int) -> bool:
    """Whether process `pid` is a warm spare (local/spares/spare.py, or one in a pod seen from its node) that has
    warmed and waits for its attempt: blocked reading its socket (read(2), x86-64's syscall 0, on the fd
    its environment's TORCHJOB_SPARE_FD names), where its launcher goes once its imports are done. For
    benches and tests that look from outside."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()
    except OSError:
        return False
    fd = env.get(b"TORCHJOB_SPARE_FD", b"")
    return fd.isdigit() and len(call) > 1 and call[0] == "0" and int(call[1], 16) == int(fd)
