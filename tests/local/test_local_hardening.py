"""The local runtime against a job document that means harm (issue 19, findings 11 and 12): a uid
copied from another job, and state other users could read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from tests.local.conftest import Torchjob, job_processes, write_job
from torchjob.local.local_runtime import LocalRuntime
from torchjob.local.start.launch import LocalOptions
from torchjob.local.store.store import Store


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


def modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root.parent)): oct(p.stat().st_mode & 0o777)
            for p in [root, *root.rglob("*")] if not p.is_symlink()}


def test_the_state_and_the_logs_are_the_users_alone(tmp_path: Path) -> None:
    home = tmp_path / "user"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHJOB_HOME"}
    env["HOME"] = str(home)
    doc = write_job(tmp_path / "job.yaml", job_data("private", workers=1, command=["python", "-c", "print('hi')"]))
    done = subprocess.run([sys.executable, "-m", "torchjob", "run", str(doc)], env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 0, done.stderr
    found = modes(home / ".torchjob")
    assert any(p.endswith("state.db") for p in found) and any(p.endswith(".log") for p in found), found
    loose = {p: m for p, m in found.items() if m != ("0o700" if (tmp_path / "user" / p).is_dir() else "0o600")}
    assert loose == {}


def test_a_torchjob_home_made_before_is_made_private_and_a_named_one_is_left_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TORCHJOB_HOME", raising=False)
    old = os.umask(0o022)
    try:
        default = tmp_path / ".torchjob"
        default.mkdir()  # as an earlier torchjob made it
        (default / "state.db").touch()
        Store().close()
        assert {p: m for p, m in modes(default).items() if not p.endswith(("-wal", "-shm"))} == {
            ".torchjob": "0o700", ".torchjob/state.db": "0o600", ".torchjob/jobs": "0o700"}
        named = tmp_path / "shared"  # TORCHJOB_HOME=/some/dir that exists: the user's choice, maybe shared
        named.mkdir()
        Store(named).close()
        assert modes(named) == {"shared": "0o755", "shared/state.db": "0o600", "shared/jobs": "0o700",
                                **{k: "0o600" for k in modes(named) if k.endswith(("-wal", "-shm"))}}
        fresh = tmp_path / "fresh" / "home"
        Store(fresh).close()
        assert oct(fresh.stat().st_mode & 0o777) == "0o700"
    finally:
        os.umask(old)


def test_a_second_store_in_one_process_never_opens_the_existing_database(tmp_path: Path, monkeypatch: Any) -> None:
    """Closing any descriptor of state.db drops every POSIX lock this process holds on it, the first
    Store's SQLite connection's too; so a Store opened on an existing database (the SDK and the
    dashboard open several) only tightens its mode, and still makes it private."""
    from torchjob.local.store import store as store_module

    first = store_module.Store(tmp_path)
    (tmp_path / "state.db").chmod(0o644)
    opened: list[Path] = []
    real = store_module.private_file
    monkeypatch.setattr(store_module, "private_file", lambda p: opened.append(p) or real(p))
    second = store_module.Store(tmp_path)
    assert opened == []
    assert (tmp_path / "state.db").stat().st_mode & 0o777 == 0o600
    assert second.all_jobs() == first.all_jobs() == []


def test_a_signal_sent_to_a_supervisor_just_started_waits_for_its_handler(tmp_path: Path) -> None:
    """`torchjob suspend` right after `submit` signals the detached supervisor (SIGUSR1) perhaps before it
    has installed its handler: it used to die of it (SIGUSR1's default action) and the job was lost."""
    import signal

    from torchjob.api.load import job_from_data
    from torchjob.local.start.prepare import supervisor_alive
    from torchjob.local.supervisor import pids

    store = Store(tmp_path / "home")
    runtime = LocalRuntime(LocalOptions(), store)
    runtime.schedule(runtime.dryrun(job_from_data(job_data("early", workers=0, command=["sleep", "30"]))))
    rec = store.get("early")
    assert rec is not None and rec.supervisor_pid
    assert pids.send(rec.supervisor_pid, signal.SIGUSR1, pids.started_at(rec.supervisor_start))  # at once: the
    try:  # interpreter is still starting
        time.sleep(3)
        assert supervisor_alive(rec)
        view = runtime.describe("early")
        assert "SupervisorLost" not in str(view)
    finally:
        runtime.delete("early")
