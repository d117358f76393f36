"""Issue 43, item 8: a rank that dies in its teardown after every rank reported its work complete
(as torch's gloo teardown aborts a process: SIGABRT, exit 134) does not make torchjob train again:
the master's success decides (core/round/reconcile.py, _died_after_done). Real processes, `torchjob run`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, state_of, write_job

pytestmark = pytest.mark.e2e


def test_a_worker_aborting_after_every_rank_reported_done_does_not_restart_the_job(
        torchjob: Torchjob, tmp_path: Path) -> None:
    sync = tmp_path / "reported"  # each replica's report landed: worker-0 aborts only once both have
    sync.mkdir()
    data = job_data("teardown", workers=1, restart_policy="OnFailure", restart_scope=None,
                    command=["python", str(PROGRAMS / "done_then_abort.py"), "--abort", "worker-0",
                             "--sync-dir", str(sync)],
                    run_policy={"backoffLimit": 3})
    proc = torchjob("run", str(write_job(tmp_path / "job.yaml", data)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    desc = torchjob.describe("teardown")
    assert state_of(desc) == "Succeeded" and desc["status"]["restartCount"] == 0, desc["status"]
    (warning,) = [e for e in desc["events"] if e["reason"] == "FailedAfterDone"]
    assert "worker-0 ended with exit code 134 (SIGABRT) after every rank reported its work complete" in \
        warning["message"]
    assert [a["attempt"] for a in desc["attempts"]] == [0, 0]  # trained once
