"""A job's output as a user reads it (issue 31): each process's lines tagged with its rank on a real
terminal (a pty) and in `torchjob logs`, one rank followed with --ranks-filter, no torchrun
OMP_NUM_THREADS banner, a suspend that is one line (not torchrun's SignalException traceback), a
failure's traceback once, and the value's line of a function's job never shown. Real processes, real
torchrun."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.local.conftest import Torchjob, state_of

pytestmark = pytest.mark.e2e

SCRIPT = """\
import os, sys
print("hello from", os.environ["RANK"], "threads", os.environ.get("OMP_NUM_THREADS"))
print("part", end="", flush=True)
print(" rest")
print("on stderr", os.environ["RANK"], file=sys.stderr)
"""
SLEEPER = """\
import os, time
print("up", os.environ["RANK"], flush=True)
time.sleep(120)
"""


def on_a_terminal(torchjob: Torchjob, *args: str, cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """`torchjob ARGS` with stdout and stderr a real terminal (a pty), as a user runs it; what the
    terminal showed, colours removed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "torchjob", *args], env={**torchjob.env, "COLUMNS": "150"},
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, cwd=cwd)
    os.close(follower)
    chunks = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: every process that had it has exited
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(30)
    os.close(leader)
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")


def test_each_rank_is_tagged_on_a_terminal_and_in_logs(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(SCRIPT)
    code, screen = on_a_terminal(torchjob, "run", "-j", "1x2", "--name", "tags", "t.py", cwd=tmp_path)
    assert code == 0, screen
    for rank in (0, 1):
        assert f"[master-0] [rank{rank}]: hello from {rank} threads 1" in screen, screen
        assert f"[master-0] [rank{rank}]: part rest" in screen, screen  # a line written in two parts is one
        assert f"[master-0] [rank{rank}]: on stderr {rank}" in screen, screen
    assert "OMP_NUM_THREADS" not in screen and "*****" not in screen, screen  # torchrun's banner
    logged = torchjob("logs", "tags", check=True).stdout
    assert "[master-0] [rank1]: hello from 1 threads 1" in logged
    one = torchjob("logs", "tags", "--ranks-filter", "1", check=True).stdout
    assert "[rank1]: hello from 1" in one and "[rank0]" not in one and "master-0 started" in one
    mine = torchjob("logs", "tags", "--replica", "master-0", "--ranks-filter", "0", check=True).stdout
    assert mine.splitlines()[0] == "[rank0]: hello from 0 threads 1" and "[rank1]" not in mine, mine
    bad = torchjob("logs", "tags", "--ranks-filter", "one")
    assert bad.returncode == 2 and "--ranks-filter 'one' is not a list of ranks" in bad.stderr


def test_the_pages_rank_lines_are_what_a_run_prints(torchjob: Torchjob, tmp_path: Path) -> None:
    from tests.docs.blocks import tested

    (tmp_path / "e.py").write_text('print("epoch 1 loss 0.52")\n')
    proc = torchjob("run", "-j", "2x2", "--name", "page", "e.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (block,) = tested("guide/command-line.md", "tests/local/test_output_ranks.py::"
                      "test_the_pages_rank_lines_are_what_a_run_prints", "text")
    for line in block.splitlines():
        assert line in proc.stdout.splitlines(), (line, proc.stdout)


def test_run_follows_one_rank_and_keeps_every_line(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(SCRIPT)
    code, screen = on_a_terminal(torchjob, "run", "--nnodes", "2", "--nproc-per-node", "2", "--ranks-filter", "2",
                                 "--name", "follow", "t.py", cwd=tmp_path)
    assert code == 0, screen
    shown = sorted(set(re.findall(r"\[rank(\d)\]", screen)))
    assert shown == ["2"] and "[worker-0] [rank2]: hello from 2" in screen, screen
    logged = torchjob("logs", "follow", check=True).stdout
    assert sorted(set(re.findall(r"\[rank(\d)\]", logged))) == ["0", "1", "2", "3"]


def test_a_plain_replica_is_not_tagged_and_omp_is_the_users(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(SCRIPT)
    proc = torchjob("run", "-j", "1x2", "--name", "mine", "--env", "OMP_NUM_THREADS=3", "t.py", cwd=tmp_path)
    assert proc.returncode == 0 and "hello from 0 threads 3" in proc.stdout, proc.stdout + proc.stderr
    single = torchjob("run", "--name", "single", "t.py", cwd=tmp_path)
    assert "[master-0] hello from 0" in single.stdout and "[rank" not in single.stdout, single.stdout


def test_a_suspend_is_one_line(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SLEEPER)
    run = torchjob.popen("run", "-j", "1x2", "--name", "sus", str(tmp_path / "s.py"))
    try:
        torchjob.wait_for("sus", lambda d: "up 1" in torchjob("logs", "sus").stdout and "up 0" in
                          torchjob("logs", "sus").stdout, timeout=90)
        torchjob("suspend", "sus", check=True)
        torchjob.wait_for("sus", lambda d: state_of(d) == "Suspended", timeout=90)
        torchjob("delete", "sus", check=True)
        out, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
    said = out + err
    assert "Traceback" not in said and "SignalException" not in said and "Sending process" not in said, said
    after_running = said.split("every replica is running\n", 1)[1]
    assert after_running.startswith("torchjob: job suspended: every replica is stopped\ntorchjob: job resumed"), said
    assert "exit code 1" not in said, said


FAILING = """\
import os
def step():
    print("step of", os.environ["RANK"], flush=True)
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch 42")
step()
"""


def test_a_failures_traceback_shows_once_on_a_terminal(torchjob: Torchjob, tmp_path: Path) -> None:
    """Streamed by its replica, the traceback is not repeated in the root cause under it: that names
    the error and where it was raised, and says where the traceback is. `describe` still quotes it."""
    (tmp_path / "f.py").write_text(FAILING)
    code, screen = on_a_terminal(torchjob, "run", "-j", "1x2", "--name", "once", "f.py", cwd=tmp_path)
    assert code == 1, screen
    assert screen.count("Traceback (most recent call last)") == 1, screen
    assert screen.count("ValueError: bad batch 42") == 2, screen  # the stream's line, and the root cause's
    assert "[master-0] [rank1]: ValueError: bad batch 42" in screen, screen
    cause = screen.split("Root cause (the failure that ended the job):", 1)[1]
    assert "  error     : ValueError: bad batch 42\n" in cause, cause
    assert f"  raised at : {tmp_path / 'f.py'}, line 5, in step\n" in cause, cause
    assert "  traceback : in the job's output above (`torchjob logs once` shows it again)" in cause, cause
    from tests.docs.blocks import tested

    (page,) = tested("tutorials/failures.md", "test_a_failures_traceback_shows_once_on_a_terminal", "text")
    assert page.replace("/home/me/f.py", str(tmp_path / "f.py")) in cause, (page, cause)  # the page's block, as run
    described = torchjob("describe", "once", check=True).stdout  # no stream there: the traceback quoted
    assert "Traceback (most recent call last)" in described and 'line 5, in step' in described, described


def test_a_traceback_the_ranks_filter_hid_is_shown_in_the_root_cause(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text(FAILING)
    code, screen = on_a_terminal(torchjob, "run", "-j", "1x2", "--local-ranks-filter", "0", "--name", "hid", "f.py",
                                 cwd=tmp_path)
    assert code == 1, screen
    assert "[master-0] [rank1]" not in screen and "[master-0] [rank0]: step of 0" in screen, screen
    assert screen.count("Traceback (most recent call last)") == 1, screen  # in the root cause only
    assert "    [rank1]: ValueError: bad batch 42" in screen.split("Root cause", 1)[1], screen
    quiet = torchjob("run", "-j", "1x2", "-q", "--name", "quiet", "f.py", cwd=tmp_path)  # -q: nothing streamed
    assert quiet.returncode == 1 and "Traceback (most recent call last)" in quiet.stderr, quiet.stderr
