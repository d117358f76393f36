"""Warm spares of local replicas: a process started ahead of need that becomes a replica's next attempt.

Which replica gets one is core's decision (core/spares.py); this is the mechanism. A spare is the
replica's interpreter running `spare_launcher/torchjob_spare.py` with the replica's own interpreter
options, command line, working directory, mounts and environment (less what only an attempt knows:
`ATTEMPT_ENV`), in a process group of its own, as a replica's process is. It imports `torch` (and
what else is safe to import ahead), says so on a socket, and waits. `take` hands it the new
attempt's whole environment; it then runs the script or module as `python` would, and from then on
it is the attempt's process: its pid, its process group, its output pipe are the ones the supervisor
watches, signals and streams (torchjob.local.process). A spare not needed is told so by end of file
on its socket (also when the supervisor dies) and killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from torchjob.core.spares import PythonEntry
from torchjob.local.launch import LaunchSpec
from torchjob.local.volumes import preexec

LAUNCHER = Path(__file__).resolve().parent / "spare_launcher" / "torchjob_spare.py"
FD_ENV = "TORCHJOB_SPARE_FD"
WARM_ENV = "TORCHJOB_SPARE_WARM"
# What only an attempt knows (its error file, its progress token): the rest of a replica's
# environment is the same for each of its attempts, and a spare starts with it.
ATTEMPT_ENV = frozenset({"TORCHELASTIC_ERROR_FILE", "KUBEFLOW_TRAINER_SERVER_TOKEN"})
# torchrun's agent, as a local replica runs it, and what it imports itself before its rendezvous
# (loopback_torchrun.install patches what these hold, as it does when it imports them itself).
TORCHRUN_AGENT = "torchjob.local.loopback_torchrun"
AGENT_MODULES = (
    "torch.distributed",
    "torch.distributed.rendezvous",
    "torch.distributed.elastic.utils.distributed",
    "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
    "torch.distributed.run",
)


def warm_modules(entry: PythonEntry) -> list[str]:
    """What a spare imports ahead besides the script's own module-level imports."""
    return ["torch", *(AGENT_MODULES if entry.module == TORCHRUN_AGENT else ())]


def shared_env(env: dict[str, str]) -> dict[str, str]:
    """`env` less what only an attempt knows."""
    return {k: v for k, v in env.items() if k not in ATTEMPT_ENV}


class Spare:
    """One spare process of one replica."""

    def __init__(self, spec: LaunchSpec, entry: PythonEntry, env: dict[str, str]) -> None:
        self.spec = spec
        self.entry = entry
        # the replica's environment as an attempt gets it, less the attempt's own (os.environ included)
        self.env = shared_env({**os.environ, **env})
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.warm_s: float | None = None  # seconds from its start to warm, once it is
        self.modules = 0  # modules it imported ahead
        self._sock: socket.socket | None = None
        self._taken = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, on_warm: Callable[[Spare], None] | None = None) -> None:
        """Start it (raises OSError where it cannot start: no spare then)."""
        ours, theirs = socket.socketpair()
        env = {**self.env, FD_ENV: str(theirs.fileno()), WARM_ENV: ",".join(warm_modules(self.entry))}
        argv = [self.spec.argv[0], *self.entry.options, str(LAUNCHER), *self.entry.target]
        enter = preexec(self.spec.mounts, self.spec.cwd)
        try:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=None if enter else self.spec.cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=enter,
                pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.started_at = time.time()
        self._sock = ours
        threading.Thread(target=self._listen, args=(ours, on_warm), name=f"spare-{self.spec.name}",
                         daemon=True).start()

    def _listen(self, sock: socket.socket, on_warm: Callable[[Spare], None] | None) -> None:
        """Reads the spare's one line (`warm SECONDS MODULES`), then waits for its end of file."""
        data = b""
        try:
            while b"\n" not in data:
                chunk = sock.recv(256)
                if not chunk:
                    return
                data += chunk
            fields = data.split(b"\n", 1)[0].split()
            if len(fields) == 3 and fields[0] == b"warm":
                self.warm_s, self.modules = float(fields[1]), int(fields[2])
                if on_warm is not None and not self._taken:
                    on_warm(self)
            while sock.recv(256):
                pass
        except OSError:
            pass
        finally:
            sock.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def take(self, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        """Make it the attempt whose whole environment is `env`: its process, or None where it cannot
        be (it died, or `env` differs from the one it started with in more than the attempt's own
        variables); then it is discarded, and the attempt starts as a new process."""
        if self._taken or self.proc is None or self._sock is None:
            return None
        self._taken = True
        if not self.alive or shared_env(env) != self.env:
            self._end()
            return None
        try:
            self._sock.sendall(json.dumps({"env": env}).encode())
            self._sock.shutdown(socket.SHUT_WR)  # its end of file: the plan is whole
        except OSError:
            self._end()
            return None
        return self.proc

    def discard(self) -> None:
        """Not needed: it ends (end of file on its socket, and SIGKILL to its group)."""
        if self._taken:
            return
        self._taken = True
        self._end()

    def _end(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # unreaped: the group's number is still its own
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
