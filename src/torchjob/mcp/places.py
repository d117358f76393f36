"""Where a call of `torchjob mcp` acts (`Scope`: what the server was started for; `Where`: what a call
names), and the supervisor a local submit starts, looked after."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from torchjob.connect import Target


@dataclass(frozen=True)
class Scope:
    """What the server was started for: the default place (`torchjob mcp --kube -n team-a`: that
    cluster's namespace), and whether it serves only the tools that read."""

    target: Target = field(default_factory=Target)
    read_only: bool = False


@dataclass(frozen=True)
class Where:
    """The place arguments of a call (each None: the server's)."""

    kube: bool | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None


def reap(pid: int | None) -> None:
    """The detached supervisor is this server's child: waited for in the background, so that once it ends it
    is gone, not a zombie that looks alive (as the Python API's submit does)."""
    if pid:
        threading.Thread(target=wait_for, args=(pid,), daemon=True, name=f"reap-{pid}").start()


def wait_for(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


