"""Checkpoint on notice (issue 41), locally: `torchjob suspend` sends each replica SIGTERM and gives
it the template's terminationGracePeriodSeconds; ranks that ask `torchjob.report.stopping()` agree on
the step, rank 0 saves it, each exits 143; `resume` starts from that checkpoint and no step is lost.
For `python` replicas (a Master and a Worker) and for one torchrun replica of two workers (torchrun
passes the notice on). Real processes, real gloo.

The steps' pace is a file the ranks read every step: slowed to a second once each rank is 5 steps in,
so that training cannot end before the suspend lands however slow the machine (at 0.05 s throughout,
a loaded machine took longer to run `torchjob suspend` than the 3 s the job had left, and the job was
suspended after its last step, with nothing saved), and sped up for the steps after the resume."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.docs import blocks
from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, state_of, write_job

pytestmark = pytest.mark.e2e
STEPS = 60
FIRST_S, SLOW_S, LAST_S = 0.2, 1.0, 0.02  # the steps' sleep: at first, while the notice is on its way, after
PAGE, TEST = "how-to/preemption.md", "test_suspend_saves_on_notice_and_resume_loses_no_step"


def set_pace(tmp_path: Path, seconds: float) -> None:
    """Each step's sleep from the next step on (written whole: a rank never reads half a file)."""
    (tmp_path / "pace.tmp").write_text(str(seconds))
    os.replace(tmp_path / "pace.tmp", tmp_path / "pace")


def trace(tmp_path: Path, rank: int) -> list[str]:
    path = tmp_path / f"trace-{rank}"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_suspend_saves_on_notice_and_resume_loses_no_step(torchjob: Torchjob, tmp_path: Path,
                                                          launcher: str) -> None:
    ckpt = tmp_path / "ckpt.json"
    set_pace(tmp_path, FIRST_S)
    args = [str(PROGRAMS / "save_on_notice.py"), str(ckpt), str(tmp_path / "trace"), str(STEPS), str(tmp_path / "pace")]
    if launcher == "python":
        data = job_data("notice", workers=1, command=["python", *args])
    else:
        data = job_data("notice", workers=0, nproc_per_node="2", command=["torchrun", *args])
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = 60  # what a SIGKILL would cut short
    run = torchjob.popen("run", str(write_job(tmp_path / "notice.yaml", data)))
    try:
        said = suspend_and_resume(torchjob, tmp_path, run, launcher)
    finally:
        if run.poll() is None:
            run.kill()
    if launcher == "torchrun":  # docs/how-to/preemption.md shows this run's lines (numbers aside), and its code
        (code,) = blocks.tested(PAGE, TEST, "python")
        assert code in (PROGRAMS / "save_on_notice.py").read_text()
        (shown,) = blocks.tested(PAGE, TEST, "text")
        printed = re.sub(r"\d+", "N", said)
        for line in shown.splitlines():
            assert "..." in line or re.sub(r"\d+", "N", line) in printed, (line, said)


def suspend_and_resume(torchjob: Torchjob, tmp_path: Path, run: subprocess.Popen[str], launcher: str) -> str:
    """Suspend the running job once each rank finished 5 steps, check the save, resume it until it
    succeeds; what `torchjob run` said."""
    ckpt = tmp_path / "ckpt.json"
    end = time.monotonic() + 90
    while not all(sum(ln.startswith("step") for ln in trace(tmp_path, r)) >= 5 for r in (0, 1)):
        assert time.monotonic() < end and run.poll() is None, (trace(tmp_path, 0), run.poll())
        time.sleep(0.1)
    set_pace(tmp_path, SLOW_S)  # the 55 steps left outlast the suspend on the slowest machine
    asked = time.monotonic()
    torchjob("suspend", "notice", check=True)
    desc = torchjob.wait_for("notice", lambda d: state_of(d) == "Suspended" and all(
        a["exit_code"] is not None for a in d["attempts"]), timeout=60)
    stopped_s = time.monotonic() - asked

    saved = json.loads(ckpt.read_text())["step"]
    for rank in (0, 1):
        lines = trace(tmp_path, rank)
        last = max(int(ln.split()[1]) for ln in lines if ln.startswith("step"))
        assert lines[-1] == f"saved {saved}" and last == saved, lines  # the step it was at, no later one
    assert 5 <= saved < STEPS and stopped_s < 30, (saved, stopped_s)  # at the notice, not the grace's SIGKILL
    if launcher == "python":  # each replica's own exit: 143, what a process stopped by SIGTERM gives
        assert [a["exit_code"] for a in desc["attempts"]] == [143, 143], desc["attempts"]
    else:  # torchrun itself exits 1 (its SignalException) after its workers' 143: still torchjob's stop
        assert [(a["exit_code"], a["reason"]) for a in desc["attempts"]] == [(1, "Stopped")], desc["attempts"]

    set_pace(tmp_path, LAST_S)
    torchjob("resume", "notice", check=True)
    torchjob.wait_for("notice", lambda d: state_of(d) == "Succeeded", timeout=120)
    for rank in (0, 1):
        lines = trace(tmp_path, rank)
        resumed = lines[lines.index(f"saved {saved}") + 1:]
        assert resumed[0] == f"start {saved}" and resumed[1] == f"step {saved + 1}", lines  # steps lost: 0
        assert resumed[-1] == f"done {STEPS} {float(sum(2 * s for s in range(1, STEPS + 1)))}", lines
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, out + err
    return out + err
