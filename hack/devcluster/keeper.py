"""Keeps one dev-cluster component running, as a kubelet keeps a static pod: started by
scripts/dev-cluster.sh (`start_proc`) in a session of its own, it runs the component, and when the
component exits it logs how (its exit status, or the signal that ended it) and starts it again.

    keeper.py STATE NAME -- COMMAND...

Files in STATE, all the component's:
- NAME.pid     the running process's pid, rewritten at every start (what `dev-cluster.sh` and the
               tests read, always with the command line checked before a signal)
- NAME.keeper  this keeper's pid
- NAME.exits   one line per exit: when, pid, how, after how long; `dev-cluster.sh status` counts them
- NAME.hold    while it exists the component is not started again (a test that keeps the kubelet
               down on purpose); removing it starts the component at once
- NAME.log     the component's output, appended, with the keeper's own lines among it

SIGTERM (or SIGINT) to the keeper stops the component (SIGTERM, SIGKILL after 10 s) and ends the
keeper. Standard library only: it runs on the host's python3, before any virtualenv exists.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

STOP_GRACE_S = 10.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 10.0)  # a component that keeps dying at its start waits longer each time
STEADY_S = 30.0  # one that ran this long starts again after the shortest wait


def how(returncode: int) -> str:
    """Popen's returncode in words: -N is the signal N that ended the process."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return f"killed by {name} ({-returncode})"
    return f"exited with status {returncode}"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Keeper:
    def __init__(self, state: Path, name: str, argv: list[str]) -> None:
        self.state, self.name, self.argv = state, name, argv
        self.child: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.kill_timer: threading.Timer | None = None
        self.stopping = False

    def say(self, text: str) -> None:
        line = f"[keeper {time.strftime('%Y-%m-%dT%H:%M:%S')}] {self.name}: {text}\n"
        with (self.state / f"{self.name}.log").open("a") as log:
            log.write(line)

    def send(self, sig: int) -> None:
        """Through the child's pidfd: never a process that took its pid after it was reaped."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except OSError:
                pass  # it has exited

    def stop(self, *_: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.terminate()

    def terminate(self) -> None:
        self.send(signal.SIGTERM)
        self.kill_timer = threading.Timer(STOP_GRACE_S, self.send, args=(signal.SIGKILL,))
        self.kill_timer.daemon = True
        self.kill_timer.start()

    def start(self) -> subprocess.Popen[bytes]:
        with (self.state / f"{self.name}.log").open("ab") as log:
            child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.pidfd = os.pidfd_open(child.pid)  # not reaped yet: this is the child
        write_atomically(self.state / f"{self.name}.pid", f"{child.pid}\n")
        return child

    def held(self) -> bool:
        return (self.state / f"{self.name}.hold").exists()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        write_atomically(self.state / f"{self.name}.keeper", f"{os.getpid()}\n")
        failures = 0
        while not self.stopping:
            started = time.monotonic()
            self.child = self.start()
            pid = self.child.pid
            if self.stopping:  # told to stop while it started
                self.terminate()
            rc = self.child.wait()  # PEP 475: a signal to the keeper does not end the wait
            lived = time.monotonic() - started
            if self.kill_timer is not None:
                self.kill_timer.cancel()
            fd, self.pidfd = self.pidfd, None
            if fd is not None:
                os.close(fd)
            if self.stopping:
                self.say(f"pid {pid} {how(rc)} (stopped)")
                break
            failures = 0 if lived >= STEADY_S else failures + 1
            delay = BACKOFF_S[min(max(failures - 1, 0), len(BACKOFF_S) - 1)]
            with (self.state / f"{self.name}.exits").open("a") as exits:
                exits.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {pid} {how(rc)} after {lived:.0f}s\n")
            self.say(f"pid {pid} {how(rc)} after {lived:.0f} s; starting it again in {delay:g} s")
            end = time.monotonic() + delay
            while not self.stopping and (time.monotonic() < end or self.held()):
                time.sleep(0.1)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: keeper.py STATE NAME -- COMMAND...", file=sys.stderr)
        return 2
    return Keeper(Path(argv[0]), argv[1], argv[3:]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
