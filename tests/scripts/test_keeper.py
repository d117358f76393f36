"""The dev cluster's keeper (hack/devcluster/keeper.py) keeps a component running as a kubelet keeps
a static pod: one that exits, by a signal or by itself, is logged with how it ended and started
again; a hold file keeps it down; SIGTERM to the keeper stops both. Quick: a stand-in component."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs import blocks
from tests.scripts.devcluster import SCRIPT
from torchjob.local.supervisor import pids

KEEPER = SCRIPT.parents[1] / "hack" / "devcluster" / "keeper.py"


class Kept:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.keeper = subprocess.Popen(
            [sys.executable, str(KEEPER), str(state), "comp", "--", sys.executable, "-c",
             "import sys, time; print('up', flush=True); time.sleep(60)", f"--data-dir={state}/comp"],
            start_new_session=True, stdin=subprocess.DEVNULL)

    def pid(self, other_than: int | None = None, timeout: float = 20) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                pid = int((self.state / "comp.pid").read_text())
            except (OSError, ValueError):
                pid = 0
            if pid and pid != other_than and pids.alive(pid, pids.started(pid)):
                return pid
            time.sleep(0.05)
        raise AssertionError(f"no new comp process within {timeout}s; log:\n{self.log()}")

    def wait_up(self, times: int) -> None:
        """Until its output, in its log, shows it started `times` times."""
        end = time.monotonic() + 20
        while self.log().count("up\n") < times and time.monotonic() < end:
            time.sleep(0.05)
        assert self.log().count("up\n") == times, self.log()

    def kill(self, pid: int) -> None:
        assert pids.send(pid, signal.SIGKILL, lambda p: f"--data-dir={self.state}/comp" in pids.cmdline(p))

    def exits(self) -> list[str]:
        path = self.state / "comp.exits"
        return path.read_text().splitlines() if path.exists() else []

    def log(self) -> str:
        path = self.state / "comp.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Kept]:
    k = Kept(tmp_path)
    yield k
    if k.keeper.poll() is None:
        k.keeper.kill()
        k.keeper.wait()
    for pid in pids.all_pids():  # a component the keeper left (it was killed): this test's only
        pids.send(pid, signal.SIGKILL, lambda p: f"--data-dir={tmp_path}/comp" in pids.cmdline(p))


def test_a_killed_component_is_logged_and_started_again(kept: Kept) -> None:
    first = kept.pid()
    assert (kept.state / "comp.keeper").read_text().strip() == str(kept.keeper.pid)
    kept.wait_up(1)
    kept.kill(first)
    second = kept.pid(other_than=first)
    assert len(kept.exits()) == 1 and f"pid {first} killed by SIGKILL (9)" in kept.exits()[0], kept.exits()
    assert f"pid {first} killed by SIGKILL (9)" in kept.log()
    kept.wait_up(2)  # the new one's output, in the same log
    shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d pid \d+ killed by SIGKILL \(9\) after \d+s$")
    shown = blocks.tested("how-to/dev-cluster.md", "test_a_killed_component_is_logged_and_started_again")[0].strip()
    assert shape.match(kept.exits()[0]) and shape.match(shown), (kept.exits(), shown)  # the docs show a real line
    kept.kill(second)
    third = kept.pid(other_than=second)
    assert third not in (first, second) and len(kept.exits()) == 2


def test_a_hold_keeps_it_down_until_removed(kept: Kept) -> None:
    first = kept.pid()
    (kept.state / "comp.hold").touch()
    kept.kill(first)
    time.sleep(2.5)  # past the keeper's first wait (1 s): held, nothing starts
    assert int((kept.state / "comp.pid").read_text()) == first and not pids.alive(first, pids.started(first))
    (kept.state / "comp.hold").unlink()
    kept.pid(other_than=first, timeout=5)


def test_sigterm_to_the_keeper_stops_the_component_and_the_keeper(kept: Kept) -> None:
    pid = kept.pid()
    kept.keeper.send_signal(signal.SIGTERM)
    assert kept.keeper.wait(timeout=20) == 0
    assert not pids.alive(pid, pids.started(pid))
    assert kept.exits() == [], "a stop asked for is not an exit to count"
    assert "(stopped)" in kept.log()
