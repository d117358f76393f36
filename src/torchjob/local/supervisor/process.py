"""One replica attempt as a process group: start, stream its output, learn of its exit at once,
terminate it (SIGTERM, grace period, SIGKILL) and leave nothing of it behind."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchjob.core.diagnosis import torch_errors
from torchjob.core.policies.policy import exit_code_of
from torchjob.local import ranktag
from torchjob.local.spares.spare import LOST_AGENT_ENV, TORCHRUN_AGENT, WORKERS_AT_ONCE_ENV, Spare
from torchjob.local.spares.workers import WORKERS_ENV
from torchjob.local.start.launch import LaunchSpec
from torchjob.local.start.volumes import preexec
from torchjob.local.store.files import private_dir, private_file
from torchjob.local.supervisor import pids
from torchjob.local.supervisor.quiet import QuietStop

LineSink = Callable[[str, bytes], None]  # (replica name, one line of output)


@dataclass(frozen=True)
class Exited:
    """Posted to the supervisor's queue when a replica's leader process exits."""

    replica: str
    attempt: int
    exit_code: int
    stopping: bool  # torchjob had asked it to stop


@dataclass(frozen=True)
class LogLost:
    """Posted when a replica's log file cannot be written (a full disk): its output still streams to
    the console and the pipe is still drained, so the replica never blocks on it."""

    replica: str
    attempt: int
    path: str
    error: str


def error_file_summary(path: Path) -> str | None:
    """The traceback torch's `@record` wrote, if the replica left one."""
    try:
        return torch_errors.traceback(path.read_text())
    except OSError:
        return None


def read_error(path: Path) -> str | None:
    """The one-line error of the attempt's error file, if any."""
    trace = error_file_summary(path)
    return torch_errors.headline(trace) if trace else None


class ReplicaProcess:
    def __init__(self, spec: LaunchSpec, attempt: int, log_path: Path, error_file: Path) -> None:
        self.spec = spec
        self.attempt = attempt
        self.log_path = log_path
        self.error_file = error_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ticks: int | None = None  # its start time, as /proc says (pids.started)
        self.ended_at: float | None = None
        self.exit_code: int | None = None
        self.error: str | None = None  # torch's error, read once at a failed exit (its error file)
        self.stopping = False
        self._pump: threading.Thread | None = None
        self._kill_timer: threading.Timer | None = None
        # The group is signalled only while its leader is not reaped: until then its pid, and so the
        # group's number, cannot be given to another process (pids are reused within minutes).
        self._reap_lock = threading.Lock()
        self._reaped = False
        self._ended = threading.Event()
        self.from_spare = False  # its process was a warm spare's

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    def start(self, events: queue.SimpleQueue[object], sink: LineSink, spare: Spare | None = None,
              earlier: Sequence[ReplicaProcess] = ()) -> None:
        """Start the attempt: as `spare` where one is given and can take it (torchjob.local.spares.spare),
        else as a new process. `earlier`: the replica's attempts before, oldest first, ended."""
        private_dir(self.log_path.parent)
        self.error_file.unlink(missing_ok=True)
        env = {**os.environ, **self.spec.env, "TORCHELASTIC_ERROR_FILE": str(self.error_file)}
        if self.attempt > 0 and WORKERS_ENV in self.spec.env:
            env[WORKERS_AT_ONCE_ENV] = "1"  # its torchrun's first workers start from spares too
        if earlier and earlier[-1].ticks is not None and TORCHRUN_AGENT in self.spec.argv:
            env[LOST_AGENT_ENV] = f"{earlier[-1].pid}:{earlier[-1].ticks}"
        self.proc = spare.take(env) if spare is not None else None
        self.from_spare = self.proc is not None
        enter = preexec(self.spec.mounts, self.spec.cwd)
        try:
            if self.proc is None:
                self.proc = subprocess.Popen(
                    self.spec.argv,
                    env=env,
                    cwd=None if enter else self.spec.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: one signal reaches all of it
                    preexec_fn=enter,
                )
        except OSError as e:
            raise StartError(self.spec.name, self.spec.argv, e) from e
        self.started_at = time.time()
        self.ticks = pids.started(self.proc.pid)
        log = private_file(self.log_path)
        assert self.proc.stdout is not None
        out = self.proc.stdout
        name = self.spec.name

        quiet = QuietStop(lambda: self.stopping)

        def pump() -> None:
            writing = True
            try:
                for line in iter(out.readline, b""):
                    line = ranktag.as_shown(line)  # a progress bar's last state, not every one
                    if writing:
                        try:
                            log.write(line)
                            log.flush()
                        except OSError as e:  # ENOSPC, EIO: told once; the output goes on to the console
                            writing = False
                            events.put(LogLost(name, self.attempt, str(self.log_path), e.strerror or str(e)))
                    for shown in quiet.feed(line):
                        sink(name, shown)
                for shown in quiet.end():
                    sink(name, shown)
            finally:
                with contextlib.suppress(OSError):  # what a full disk would not take is gone already
                    log.close()

        def wait() -> None:
            assert self.proc is not None
            with contextlib.suppress(ChildProcessError):  # exited, left unreaped (WNOWAIT)
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
            self._killpg(signal.SIGKILL)  # whatever the leader left in its group goes with it
            with self._reap_lock:
                rc = self.proc.wait()
                self._reaped = True
            self.ended_at = time.time()
            self.exit_code = exit_code_of(rc)
            if self.exit_code != 0:
                self.error = read_error(self.error_file)
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._ended.set()
            events.put(Exited(name, self.attempt, self.exit_code, self.stopping))

        self._pump = threading.Thread(target=pump, name=f"pump-{name}", daemon=True)
        self._pump.start()
        threading.Thread(target=wait, name=f"wait-{name}", daemon=True).start()

    def _killpg(self, sig: signal.Signals) -> None:
        with self._reap_lock:
            if self.proc is None or self._reaped:
                return
            try:
                os.killpg(self.proc.pid, sig)  # the unreaped leader keeps the group's number ours
            except (ProcessLookupError, PermissionError):
                pass

    def wait_ended(self, timeout: float) -> bool:
        """Until its leader has exited and been reaped (only the replica's own thread reaps it)."""
        return self._ended.wait(timeout)

    def terminate(self, grace_s: float | None = None) -> None:
        """SIGTERM the group now, SIGKILL it after the grace period."""
        if not self.alive or self.stopping:
            return
        self.stopping = True
        self._killpg(signal.SIGTERM)
        grace = self.spec.grace_period_s if grace_s is None else grace_s
        self._kill_timer = threading.Timer(grace, self._killpg, args=(signal.SIGKILL,))
        self._kill_timer.daemon = True
        self._kill_timer.start()

    def kill(self) -> None:
        self.stopping = True
        self._killpg(signal.SIGKILL)

    def drain(self, timeout: float) -> None:
        """Wait for the last output to be written (a grandchild may hold the pipe open)."""
        if self._pump is not None:
            self._pump.join(timeout)


class StartError(Exception):
    def __init__(self, replica: str, argv: list[str], err: OSError) -> None:
        super().__init__(f"{replica}: cannot start {argv[0]!r}: {err.strerror or err}")
        self.replica = replica
