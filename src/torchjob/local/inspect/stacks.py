"""Taking a local job's stacks: every rank's process registered faulthandler on SIGUSR2 at start-up
(torchjob's hook, local/ranktag/hook/sitecustomize.py) with a file of its own in its attempt's
`stacks/` folder; each is signalled (checked through its pidfd to hold that file open, so a reused pid is
never signalled), and what it appends is read back. core.stacks reads and groups them."""

from __future__ import annotations

import dataclasses
import os
import signal
import sysconfig
import threading
import time
from pathlib import Path

from torchjob.core.diagnosis.stacks import ProcessStacks, Stacks, full, parse, short
from torchjob.local.ranktag import HOOK_DIR
from torchjob.local.start.launch import LaunchSpec
from torchjob.local.supervisor import pids

SIGNAL = signal.SIGUSR2
ENV = "TORCHJOB_STACKS_DIR"
WAIT_S = 3.0  # how long the processes get to answer, all together
SETTLE_S = 0.05  # a dump is whole once its file stopped growing this long
_COLLECTING = threading.Lock()


def stacks_dir(attempt_dir: Path) -> Path:
    return attempt_dir / "stacks"


def hook_path(pythonpath: str | None) -> str:
    """A replica's PYTHONPATH with torchjob's start-up hook first (once): the same for each of its
    attempts, so that a warm spare started with it can take one."""
    return os.pathsep.join([HOOK_DIR, *(p for p in (pythonpath or "").split(os.pathsep) if p and p != HOOK_DIR)])


def with_hook(specs: list[LaunchSpec]) -> list[LaunchSpec]:
    """Each replica's spec with the hook on its PYTHONPATH (the one it gets, else this process's)."""
    return [dataclasses.replace(s, env={**s.env, "PYTHONPATH": hook_path(
        s.env.get("PYTHONPATH", os.environ.get("PYTHONPATH")))}) for s in specs]


def env(attempt_dir: Path) -> dict[str, str]:
    """What only an attempt's processes get: the folder of their stacks (local/spares/spare.py's ATTEMPT_ENV)."""
    return {ENV: str(stacks_dir(attempt_dir))}


def library_dirs() -> tuple[str, ...]:
    """The standard library's folders: frames there are not the user's own."""
    return tuple(sorted({p for k in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(k))}))


def collect(attempts: dict[str, Path], wait_s: float = WAIT_S) -> Stacks:
    """The stacks of every live process of these attempts (replica -> its attempt's folder); one
    collection at a time in this process (the hang watch's thread and a stall's), so that each reads
    only its own dumps."""
    with _COLLECTING:
        return _collect(attempts, wait_s)


def registered(attempts: dict[str, Path]) -> list[tuple[str, int]]:
    """(replica, pid) of every live process of these attempts that registered for its stacks (its file
    open), without signalling any."""
    return [(replica, pid) for replica, f, pid in _files(attempts) if _holds(f)(pid)]


def _files(attempts: dict[str, Path]) -> list[tuple[str, Path, int]]:
    found: list[tuple[str, Path, int]] = []
    for replica, adir in sorted(attempts.items()):
        try:
            files = sorted(stacks_dir(adir).iterdir())
        except OSError:
            continue
        found += [(replica, f, pid) for f in files if (pid := _pid_of(f.name)) is not None]
    return found


def _collect(attempts: dict[str, Path], wait_s: float) -> Stacks:
    t0 = time.monotonic()
    sent: dict[Path, tuple[str, int, int]] = {}  # file -> (replica, pid, its size before)
    missing: list[str] = []
    for replica, f, pid in _files(attempts):
        try:
            size = f.stat().st_size
        except OSError:
            continue
        if pids.send(pid, SIGNAL, _holds(f)):
            sent[f] = (replica, pid, size)
    # faulthandler writes from its signal handler at once; wait until every file grew and settled
    end = t0 + wait_s
    done: dict[Path, str] = {}
    last: dict[Path, tuple[int, float]] = {}
    while len(done) < len(sent) and time.monotonic() < end:
        for f, (_, _, before) in sent.items():
            if f in done:
                continue
            try:
                size = f.stat().st_size
            except OSError:
                continue
            now = time.monotonic()
            seen = last.get(f)
            if size > before and seen is not None and seen[0] == size and now - seen[1] >= SETTLE_S:
                with f.open("rb") as fh:
                    head = fh.readline()  # the hook's header line names the rank and the main thread
                    fh.seek(before)
                    done[f] = (head + fh.read()).decode(errors="replace")
            elif seen is None or seen[0] != size:
                last[f] = (size, now)
        time.sleep(0.01)
    procs: list[ProcessStacks] = []
    for f, (replica, pid, _) in sent.items():
        if f not in done:
            missing.append(f"{replica} pid {pid}")
            continue
        rank, _, threads = parse(done[f])
        procs.append(ProcessStacks(replica, rank, pid, tuple(threads)))
    return Stacks(procs, missing, library_dirs(), time.monotonic() - t0)


def _holds(path: Path) -> pids.Check:
    """The process has this very file open: the one that registered it (not another that got its pid
    since; a warm spare's environment as /proc shows it is the one it started with, not its attempt's)."""
    target = str(path)

    def check(pid: int) -> bool:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
        return False

    return check


def _pid_of(name: str) -> int | None:
    # rank-<RANK>-pid-<PID>.txt
    stem = name.removesuffix(".txt")
    _, sep, pid = stem.rpartition("-pid-")
    return int(pid) if sep and pid.isdigit() else None


def for_stall(live: dict[str, Path], quiet: dict[str, Path], taken: Stacks | None = None,
              what: str = "stalled") -> tuple[str, str, str | None]:
    """A stalled job's stacks, before its replicas are stopped: every live attempt's (replica -> its
    folder; `taken`: those already taken), the full form kept in each quiet attempt's folder (stacks.txt).
    Returns the StacksTaken event's message, the block for the job's log, and the short form for the
    stall's message."""
    taken = taken or collect(live)
    brief = short(taken) or None
    body = full(taken)
    for adir in quiet.values():
        try:
            (adir / "stacks.txt").write_text(body)
        except OSError:
            pass
    where = ", ".join(f"{name}: {adir / 'stacks.txt'}" for name, adir in sorted(quiet.items()))
    event = (f"stacks taken in {taken.seconds:.2f} s before stopping the {what} job "
             f"({len(taken.processes)} process(es)): {brief}; in full: {where}")
    block = "where the ranks were (torchjob stacks), most recent call first (. marks a library frame):\n" + body
    return event, block, brief
