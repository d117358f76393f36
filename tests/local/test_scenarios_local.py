"""The shared scenario table, run for real: one process per replica, real exits and signals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job
from tests.scenarios import SCENARIOS, Scenario


@pytest.mark.e2e
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_with_real_processes(sc: Scenario, torchjob: Torchjob, tmp_path: Path) -> None:
    exits = tmp_path / "exits.json"
    exits.write_text(json.dumps({k: [list(a) for a in v] for k, v in sc.exits.items()}))
    reports = tmp_path / "reports.json"
    reports.write_text(json.dumps({k: list(v) for k, v in sc.reports.items()}))
    state = tmp_path / "attempts"
    state.mkdir()
    job = sc.job(["python", str(PROGRAMS / "behave.py"), str(exits), str(state), str(reports)])
    path = write_job(tmp_path / "job.yaml", job.model_dump(mode="json", exclude_none=True))

    proc = torchjob("run", "-q", "--grace-period", "5", str(path), timeout=120)

    desc = torchjob.describe(job.name)
    status = desc["status"]
    assert state_of(desc) == sc.expect_state, (proc.stderr, status)
    final = next(c for c in status["conditions"] if c["type"] == sc.expect_state)
    assert final["reason"] == sc.expect_reason, status
    assert status.get("restartCount", 0) == sc.expect_restarts, status
    if sc.expect_failed_replica is not None:
        assert status["failure"]["replica"] == sc.expect_failed_replica, status
    assert proc.returncode == (0 if sc.expect_state == "Succeeded" else 1), proc.stderr
    assert job_processes(desc["job"]["metadata"]["uid"]) == []
