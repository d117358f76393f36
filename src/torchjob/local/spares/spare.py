"""Warm spares of local replicas: a process started ahead of need that becomes a replica's next attempt.

Which replica gets one is core's decision (core/policies/spares.py); this is the mechanism. A spare is the
replica's interpreter running `launcher/torchjob_spare.py` with the replica's own interpreter
options, command line, working directory, mounts and environment (less what only an attempt knows:
`ATTEMPT_ENV`), in a process group of its own, as a replica's process is. It imports `torch` (and
what else is safe to import ahead), says so on a socket, and waits. `take` hands it the new
attempt's whole environment; it then runs the script or module as `python` would, and from then on
it is the attempt's process: its pid, its process group, its output pipe are the ones the supervisor
watches, signals and streams (torchjob.local.supervisor.process). A spare not needed is told so by end of file
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

from torchjob.core.diagnosis import flight_recorder
from torchjob.core.policies.spares import PythonEntry

# A spare starts this long after the attempt (or torchrun worker) it would replace has started: its
# `import torch` then never competes for the cores with that attempt's own start (a cold one's
# import, or a recovering job's rendezvous and first steps).
SPARE_AFTER_S = 5.0
LAUNCHER = Path(__file__).resolve().parent / "launcher" / "torchjob_spare.py"
FD_ENV = "TORCHJOB_SPARE_FD"
WARM_ENV = "TORCHJOB_SPARE_WARM"
# What only an attempt knows (its error file, its progress token): the rest of a replica's
# environment is the same for each of its attempts, and a spare starts with it.
# The flight recorder's settings (local/inspect/flight.py) too: an attempt's own folder, set when it is created
# (a spare starts without them; torch reads them when a process group is made, after the spare took the attempt).
# A restarted torchrun replica's agent starts its workers' spares at once (local/spares/workers.py).
WORKERS_AT_ONCE_ENV = "TORCHJOB_WARM_WORKERS_AT_ONCE"
# A restarted torchrun replica's agent is told its predecessor (`PID:START_TICKS`): that one's place in the
# elastic rendezvous is given up at once (local/start/loopback_torchrun.py).
LOST_AGENT_ENV = "TORCHJOB_LOST_AGENT"
ATTEMPT_ENV = frozenset({"TORCHELASTIC_ERROR_FILE", "KUBEFLOW_TRAINER_SERVER_TOKEN", WORKERS_AT_ONCE_ENV,
                         LOST_AGENT_ENV, "TORCHJOB_STACKS_DIR",  # local/inspect/stacks.py
                         *flight_recorder.SET})
# torchrun's agent, as a local replica runs it, and what it imports itself before its rendezvous
# (loopback_torchrun.install patches what these hold, as it does when it imports them itself).
TORCHRUN_AGENT = "torchjob.local.start.loopback_torchrun"
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


def shared_env(env: dict[str, str], attempt_env: frozenset[str] = ATTEMPT_ENV) -> dict[str, str]:
    """`env` less what only an attempt knows."""
    return {k: v for k, v in env.items() if k not in attempt_env}


class Spare:
    """One spare process: of a replica (the supervisor's), or of a torchrun worker (its agent's,
    local/spares/workers.py). `capture`: its output is a pipe of its own (a replica's, streamed by the
    supervisor), else its parent's own stdout and stderr (a torchrun worker's)."""

    def __init__(self, name: str, python: str, entry: PythonEntry, env: dict[str, str], cwd: str | None = None,
                 preexec_fn: Callable[[], None] | None = None, capture: bool = True,
                 attempt_env: frozenset[str] = ATTEMPT_ENV) -> None:
        self.name = name
        self.python = python
        self.entry = entry
        self.cwd = cwd
        self.preexec_fn = preexec_fn
        self.capture = capture
        self.attempt_env = attempt_env
        # the environment as an attempt gets it, less the attempt's own (os.environ included)
        self.env = shared_env({**os.environ, **env}, attempt_env)
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
        argv = [self.python, *self.entry.options, str(LAUNCHER), *self.entry.target]
        out = subprocess.PIPE if self.capture else None
        try:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL if self.capture else None,
                stdout=out, stderr=subprocess.STDOUT if self.capture else None, start_new_session=True,
                preexec_fn=self.preexec_fn, pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.started_at = time.time()
        self._sock = ours
        threading.Thread(target=self._listen, args=(ours, on_warm), name=f"spare-{self.name}",
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
        if not self.alive or shared_env(env, self.attempt_env) != self.env:
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
