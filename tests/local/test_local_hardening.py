"""The local runtime against a job document that means harm (issue 19, findings 11 and 12): a uid
copied from another job, and state other users could read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.jobs import job_data
from tests.local.conftest import Torchjob, job_processes, write_job
from torchjob.local.launch import LocalOptions
from torchjob.local.local_runtime import LocalRuntime
from torchjob.local.store import Store


def test_every_run_has_its_own_uid_whatever_the_document_says(tmp_path: Path) -> None:
    job = job_data("mine", workers=0, uid="the-uid-of-another-job", command=["true"])
    from torchjob.api.load import job_from_data

    plan = LocalRuntime(LocalOptions(), Store(tmp_path / "home")).dryrun(job_from_data(job))
    uid = plan.job.metadata.uid
    assert uid and uid != "the-uid-of-another-job"
    assert {s.env["TORCHJOB_JOB_UID"] for s in plan.specs} == {uid}


def test_a_job_that_copies_another_jobs_uid_does_not_kill_its_processes_when_it_ends(
        torchjob: Torchjob, tmp_path: Path) -> None:
    victim_uid = "0b7e5b0e-0000-4000-8000-000000000001"  # a running local job's, as `describe` shows it
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, "TORCHJOB_JOB_UID": victim_uid})
    try:
        time.sleep(0.2)
        assert victim.pid in job_processes(victim_uid)
        doc = write_job(tmp_path / "copy.yaml", job_data("copycat", workers=0, uid=victim_uid,
                                                         command=["python", "-c", "pass"]))
        torchjob("run", str(doc), check=True)
        time.sleep(0.5)
        assert victim.poll() is None, "the copycat's end killed another job's process"
    finally:
        victim.kill()
        victim.wait()
