"""The real node's daemons (the kubelet, containerd), killed as a crash or a lost machine would kill
them. scripts/dev-cluster.sh runs each under a keeper (hack/devcluster/keeper.py) that starts it
again when it exits; `hold` keeps it down until `start_daemon`. For the node-loss test and
bench/chaos.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from torchjob.local.supervisor import pids


def ours(state: Path, name: str) -> pids.Check:
    """The process runs the component's binary from this cluster's state dir (pids are reused)."""
    def check(pid: int) -> bool:
        args = pids.cmdline(pid)
        return bool(args) and args[0].endswith(name) and any(str(state) + "/" in a for a in args)
    return check


def running_pid(state: Path, name: str) -> int | None:
    try:
        pid = int((state / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if ours(state, name)(pid) and pids.alive(pid, pids.started(pid)) else None


def kill_daemon(state: Path, name: str, hold: bool = True) -> int | None:
    """SIGKILL it; its pid, or None if it was not running. containerd's shims outlive it, and so do the
    containers: a dead kubelet leaves its pods' processes running, with nobody to report them. With
    `hold` its keeper leaves it down until `start_daemon`."""
    if hold:
        (state / f"{name}.hold").touch()
    pid = running_pid(state, name)
    if pid is None or not pids.send(pid, signal.SIGKILL, ours(state, name)):
        return None
    return pid


def start_daemon(state: Path, name: str, timeout: float = 60) -> int:
    """Let its keeper start it again; the new process's pid, once it runs."""
    old = (state / f"{name}.pid").read_text().strip()
    (state / f"{name}.hold").unlink(missing_ok=True)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pid = running_pid(state, name)
        if pid is not None and str(pid) != old:
            return pid
        time.sleep(0.1)
    raise RuntimeError(f"{name} was not started again within {timeout:g} s: see {state / (name + '.log')}")


def _children(pid: int) -> list[int]:
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out += [int(p), *_children(int(p))]
    return out


def kill_node(state: Path, index: int) -> int:
    """Real node `index` of a `--real-nodes N` cluster dies as a machine does: its kubelet and containerd
    SIGKILLed and held down (until `start_daemon` of each), and every process of its containers (its
    containerd's shims and all under them). How many container processes were killed."""
    suffix = f"-{index}" if index else ""
    kill_daemon(state, f"kubelet{suffix}")
    kill_daemon(state, f"containerd{suffix}")
    sock = str(state / f"realnode{suffix}" / "containerd") + "/"
    shims = [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
             if any("shim" in a for a in pids.cmdline(int(p))[:1]) and any(sock in a for a in pids.cmdline(int(p)))]
    victims = [(v, pids.started(v)) for v in [c for s in shims for c in _children(s)] + shims]
    return sum(pids.send(v, signal.SIGKILL, pids.started_at(ticks)) for v, ticks in victims)  # the same processes
