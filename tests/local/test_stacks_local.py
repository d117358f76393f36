"""Where a stuck job's ranks are (issue 42), on real processes with real torch.distributed (gloo): the
last rank blocks in a `recv` nobody answers while the others wait for it in `all_reduce`
(tests/programs/hang_collective.py). `torchjob stacks` and `handle.stacks()` name the right function
and line for the right ranks; a stalled job's root cause, describe, event and log say where each rank
was; nothing is left running."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job

pytestmark = pytest.mark.e2e
PROGRAM = PROGRAMS / "hang_collective.py"


def line_of(mark: str) -> int:
    return next(i for i, text in enumerate(PROGRAM.read_text().splitlines(), 1) if mark in text)


RECV = f"wait_for_peer (hang_collective.py:{line_of('HANG-RECV')})"
ALL_REDUCE = f"step (hang_collective.py:{line_of('HANG-ALL-REDUCE')})"


def stacks_when_stuck(handle: Any, timeout: float = 60) -> dict[str, Any]:
    """`handle.stacks()` once every rank is in its collective (they start at their own pace)."""
    end = time.monotonic() + timeout
    data: dict[str, Any] = {}
    while time.monotonic() < end:
        data = handle.stacks()
        if "step (" in data["short"] and "wait_for_peer (" in data["short"]:
            return data
        time.sleep(0.3)
    raise AssertionError(f"the ranks never all reached their collective: {data}")


def test_stacks_name_each_ranks_function_and_line(torchjob: Torchjob, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    torchjob("submit", "-j", "1x3", "--name", "stuck", str(PROGRAM), check=True)
    monkeypatch.setenv("TORCHJOB_HOME", str(torchjob.home))
    import torchjob as api

    try:
        # the Python API's handle; then the command prints the same
        handle = next(h for h in api.list_jobs() if h.name == "stuck")
        data = stacks_when_stuck(handle)
        mains = [g for g in data["groups"] if g["mainThread"]]
        assert [g["ranks"] for g in mains] == [[0, 1], [2]], data
        waiting, receiving = mains
        assert waiting["summary"].startswith("ranks 0-1: all_reduce (torch/distributed/distributed_c10d.py:")
        assert f"<- {ALL_REDUCE} <- main (hang_collective.py:" in waiting["summary"], waiting["summary"]
        assert receiving["summary"].startswith("rank 2: recv (torch/distributed/distributed_c10d.py:")
        assert f"<- {RECV} <-" in receiving["summary"], receiving["summary"]
        users = [f for f in receiving["frames"] if f["user"]]
        assert users[0]["function"] == "wait_for_peer" and users[0]["file"] == str(PROGRAM), users
        # rank 2, alone in recv while the others wait for it, is named as the one that differs (issue 42's stragglers)
        assert data["short"] == f"ranks 0-1 in {ALL_REDUCE}; rank 2 in {RECV}; rank 2 differs from the rest (ranks 0-1)"
        assert data["differs"] == [[2]]
        assert data["missing"] == [] and data["seconds"] < 2.5, data

        text = torchjob("stacks", "stuck", check=True).stdout
        assert text.splitlines()[0].startswith("ranks 0-1: all_reduce (torch/distributed/"), text
        assert text.splitlines()[1].startswith("rank 2: recv (torch/distributed/"), text
        assert text.splitlines()[2] == "rank 2 differs from the rest (ranks 0-1): look there first", text
        assert "3 process(es) answered in" in text
        assert json.loads(torchjob("stacks", "stuck", "-o", "json", check=True).stdout)["short"] == data["short"]
        assert state_of(torchjob.describe("stuck")) == "Running"  # taking stacks stops nothing
    finally:
        uid = torchjob.describe("stuck")["job"]["metadata"]["uid"]
        torchjob("delete", "stuck", check=True)
    assert job_processes(uid) == []


def test_a_stalled_jobs_root_cause_says_where_each_rank_was(torchjob: Torchjob, tmp_path: Path) -> None:
    # a master and a worker (ranks 0 and 1); rank 0 reports one step, then both hang
    path = write_job(tmp_path / "stall.yaml", job_data("stall", workers=1, command=["python", str(PROGRAM), "--report"],
                                                       run_policy={"progressDeadlineSeconds": 2}))
    proc = torchjob("run", "--grace-period", "2", str(path), timeout=120)
    assert proc.returncode == 1, proc.stderr
    desc = torchjob.describe("stall")
    failure = desc["status"]["failure"]
    assert failure["reason"] == "ProgressDeadlineExceeded", failure
    where = f"where the ranks were: rank 0 in {ALL_REDUCE}; rank 1 in {RECV}"
    assert where in failure["message"], failure
    taken = [e for e in desc["events"] if e["reason"] == "StacksTaken"]
    assert len(taken) == 1 and f"rank 0 in {ALL_REDUCE}; rank 1 in {RECV}" in taken[0]["message"], desc["events"]
    assert where in torchjob("describe", "stall", check=True).stdout
    # the full form: kept with the quiet attempt, and in the job's log
    kept = next(torchjob.home.rglob("master-0/attempt-0/stacks.txt")).read_text()
    assert kept.startswith("rank 0 (main thread), most recent call first:\n"), kept
    assert f"    step ({PROGRAM}:{line_of('HANG-ALL-REDUCE')})" in kept, kept
    assert f"    wait_for_peer ({PROGRAM}:{line_of('HANG-RECV')})" in kept, kept
    logs = torchjob("logs", "stall", check=True).stdout
    assert "where the ranks were (torchjob stacks)" in logs and f"wait_for_peer ({PROGRAM}:" in logs
    assert job_processes(desc["job"]["metadata"]["uid"]) == []
    # an ended job has no process to ask: said, with where its stacks are kept
    ended = torchjob("stacks", "stall")
    assert ended.returncode == 2 and "job stall has ended (Failed): it has no process to take stacks from" in \
        ended.stderr and "torchjob describe stall" in ended.stderr, ended.stderr


def test_a_rank_whose_dataloader_worker_is_stuck_is_named_at_the_loop_that_waits_for_it(
        torchjob: Torchjob, tmp_path: Path) -> None:
    """Issue 42's DataLoader case: rank 1's DataLoader worker blocks in `__getitem__`, rank 1 waits for its batch and
    rank 0 for rank 1 in all_reduce. The stall's stacks name both ranks' lines: rank 1 in the loop that waits for
    the batch (the worker, a process the rank forked, registers no stacks of its own: not taken)."""
    program = PROGRAMS / "dataloader_stuck.py"

    def line(mark: str) -> int:
        return next(i for i, text in enumerate(program.read_text().splitlines(), 1) if mark in text)

    path = write_job(tmp_path / "loader.yaml", job_data("loader", workers=1, command=["python", str(program)],
                                                        run_policy={"progressDeadlineSeconds": 5}))
    proc = torchjob("run", "--grace-period", "2", str(path), timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failure = torchjob.describe("loader")["status"]["failure"]
    assert failure["reason"] == "ProgressDeadlineExceeded", failure
    where = (f"rank 0 in main (dataloader_stuck.py:{line('WAITS-IN-ALL-REDUCE')}); "
             f"rank 1 in main (dataloader_stuck.py:{line('WAITS-FOR-BATCH')})")
    assert where in failure["message"], failure
    kept = next(torchjob.home.rglob("master-0/attempt-0/stacks.txt")).read_text()  # the quiet one's: every rank's
    assert "_try_get_data (" in kept and f"    main ({program}:{line('WAITS-FOR-BATCH')})" in kept, kept
