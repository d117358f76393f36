"""The shared scenario table, run for real: one process per replica, real exits and signals. A lost
runner is the supervisor killed (SIGKILL) while the job runs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job
from tests.scenarios import SCENARIOS, Scenario

PLAYED = [s for s in SCENARIOS if s.plays_on("local")]


def lose_the_runner(sc: Scenario, proc: subprocess.Popen[str], torchjob: Torchjob, name: str) -> None:
    """Kill the supervisor `sc.runner_lost` seconds after every replica runs."""
    assert sc.runner_lost is not None
    torchjob.wait_for(name, lambda d: state_of(d) == "Running")
    time.sleep(sc.runner_lost[0])
    proc.kill()
    proc.wait()


@pytest.mark.e2e
@pytest.mark.parametrize("sc", PLAYED, ids=[s.name for s in PLAYED])
def test_scenario_with_real_processes(sc: Scenario, torchjob: Torchjob, tmp_path: Path) -> None:
    exits = tmp_path / "exits.json"
    exits.write_text(json.dumps({k: [list(a) for a in v] for k, v in sc.exits.items()}))
    reports = tmp_path / "reports.json"
    reports.write_text(json.dumps({k: list(v) for k, v in sc.reports.items()}))
    state = tmp_path / "attempts"
    state.mkdir()
    job = sc.job(["python", str(PROGRAMS / "behave.py"), str(exits), str(state), str(reports)])
    path = write_job(tmp_path / "job.yaml", job.model_dump(mode="json", exclude_none=True))

    if sc.runner_lost is not None:
        popen = torchjob.popen("run", "-q", "--grace-period", "5", str(path))
        lose_the_runner(sc, popen, torchjob, job.name)
        desc = torchjob.wait_for(job.name, lambda d: state_of(d) == sc.expect_state, timeout=30)
        stderr, code = "", 1
    else:
        proc = torchjob("run", "-q", "--grace-period", "5", str(path), timeout=120)
        desc = torchjob.describe(job.name)
        stderr, code = proc.stderr, proc.returncode
    status = desc["status"]
    assert state_of(desc) == sc.expect_state, (stderr, status)
    final = next(c for c in status["conditions"] if c["type"] == sc.expect_state)
    assert final["reason"] == sc.expect_reason, status
    assert status.get("restartCount", 0) == sc.expect_restarts, status
    if sc.expect_failed_replica is not None:
        assert status["failure"]["replica"] == sc.expect_failed_replica, status
    assert code == (0 if sc.expect_state == "Succeeded" else 1), stderr
    end = time.monotonic() + 15  # a lost supervisor's watchdog stops the replicas, a moment later
    while job_processes(desc["job"]["metadata"]["uid"]) and time.monotonic() < end:
        time.sleep(0.1)
    assert job_processes(desc["job"]["metadata"]["uid"]) == []
    if sc.runner_lost is not None:
        assert all(a["ended"] is not None for a in desc["attempts"]), desc["attempts"]
