"""The real node's daemons (the kubelet, containerd), stopped and started again as
scripts/dev-cluster.sh started them: its recorded command line, a session of its own, its pid file
updated so that `dev-cluster.sh down` stops the new one. For the node-loss test and bench/chaos.py."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path


def kill_daemon(state: Path, name: str) -> None:
    """SIGKILL it, as a crash or a lost machine would. containerd's shims outlive it, and so do the
    containers: a dead kubelet leaves its pods' processes running, with nobody to report them."""
    try:
        os.kill(int((state / f"{name}.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def start_daemon(state: Path, name: str) -> int:
    """Start it again from its recorded command line; its pid."""
    cmdline = (state / f"{name}.cmdline").read_text()
    with (state / f"{name}.log").open("ab") as out:
        p = subprocess.Popen(shlex.split(cmdline), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    (state / f"{name}.pid").write_text(f"{p.pid}\n")
    return p.pid
