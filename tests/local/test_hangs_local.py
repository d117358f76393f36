"""A hang without any report (issue 42), on real processes with real torch.distributed (gloo): a job
that never calls `torchjob.report` trains for longer than its deadline (a sleep at one line in each
step: not a hang), then its rank 1 blocks in a `recv` nobody answers while rank 0 waits for it in
`all_reduce` (tests/programs/hang_collective.py, with --steps). It is stopped as hung (runPolicy.hangDeadlineSeconds)
no earlier than the deadline and within the documented bound after its ranks stopped moving, and its
root cause names both functions and lines; nothing is left running."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import IO

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, job_processes, write_job
from torchjob.core.policies import hangs

pytestmark = pytest.mark.e2e
PROGRAM = PROGRAMS / "hang_collective.py"
DEADLINE = 2
STEPS = 30  # 0.1 s each and an all-reduce: over 3 s of training, longer than the deadline


def line_of(mark: str) -> int:
    return next(i for i, text in enumerate(PROGRAM.read_text().splitlines(), 1) if mark in text)


RECV = f"wait_for_peer (hang_collective.py:{line_of('HANG-RECV')})"
ALL_REDUCE = f"step (hang_collective.py:{line_of('HANG-ALL-REDUCE')})"


def test_a_collective_hung_without_reports_is_a_stall_with_the_stacks(torchjob: Torchjob, tmp_path: Path) -> None:
    command = ["python", str(PROGRAM), "--steps", str(STEPS)]
    path = write_job(tmp_path / "hang.yaml", job_data("hang", workers=1, command=command,
                                                      run_policy={"hangDeadlineSeconds": DEADLINE}))
    proc = torchjob.popen("run", "--grace-period", "2", str(path))
    seen: dict[str, float] = {}
    lines: list[str] = []

    def read(stream: IO[str]) -> None:  # when each line came: the ranks' "ready" (then they hang), the verdict
        for line in stream:
            lines.append(line)
            now = time.monotonic()
            for key in ("] ready 0", "] ready 1", "the job is hung"):
                if key in line:
                    seen.setdefault(key, now)

    readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in (proc.stdout, proc.stderr)]
    for r in readers:
        r.start()
    try:
        assert proc.wait(timeout=120) == 1, "".join(lines)
    finally:
        proc.kill()
    for r in readers:
        r.join(5)
    text = "".join(lines)
    assert {"] ready 0", "] ready 1", "the job is hung"} <= set(seen), text
    # caught no earlier than the deadline after the last rank hung, and within the documented bound
    # (the move seen at the next sample, the verdict at a sample; 3 s more for the sample itself and a loaded machine)
    after = seen["the job is hung"] - max(seen["] ready 0"], seen["] ready 1"])
    assert DEADLINE <= after <= hangs.bound(DEADLINE) + 3, (after, text)

    desc = torchjob.describe("hang")
    failure = desc["status"]["failure"]
    assert failure["reason"] == "HangDeadlineExceeded", failure
    assert failure["message"].startswith(f"no rank moved for {DEADLINE}s (runPolicy.hangDeadlineSeconds"), failure
    assert f"where the ranks were: rank 0 in {ALL_REDUCE}; rank 1 in {RECV}" in failure["message"], failure
    stalled = [e for e in desc["events"] if e["reason"] == "Stalled"]
    assert len(stalled) == 1 and "no rank moved" in stalled[0]["message"], desc["events"]
    taken = [e for e in desc["events"] if e["reason"] == "StacksTaken"]
    assert len(taken) == 1 and "before stopping the hung job" in taken[0]["message"], desc["events"]
    # the full form kept with each attempt and shown in the job's log, library frames and all
    kept = next(torchjob.home.rglob("worker-0/attempt-0/stacks.txt")).read_text()
    assert f"    wait_for_peer ({PROGRAM}:{line_of('HANG-RECV')})" in kept, kept
    assert ". recv (" in kept and ". all_reduce (" in kept, kept
    assert "where the ranks were (torchjob stacks)" in text
    assert job_processes(desc["job"]["metadata"]["uid"]) == []
