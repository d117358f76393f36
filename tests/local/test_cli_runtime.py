"""The runtime interface's agreements on the local runtime, with real processes: the plan rendered
is the plan run, readers write nothing, refusals are the shared ones, TTL clean-up is core's."""

from __future__ import annotations

import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data, make_job
from tests.local.conftest import Torchjob, job_processes, state_of, write_job
from torchjob.api.errors import UserError
from torchjob.api.status import ConditionType
from torchjob.local.local_runtime import LocalRuntime
from torchjob.local.start.launch import LocalOptions
from torchjob.local.start.prepare import supervisor_alive
from torchjob.local.store.store import Store
from torchjob.local.supervisor import pids

PRINT_PORT = ["python", "-c", "import os; print('port', os.environ['MASTER_PORT'], os.environ['PET_MASTER_PORT'] "
              "if 'PET_MASTER_PORT' in os.environ else '')"]
SLEEP = ["python", "-c", "import time; time.sleep(120)"]


def snapshot(home: Path) -> dict[str, list[Any]]:
    """Every row of the store: what a reader must leave as it found it."""
    db = sqlite3.connect(home / "state.db")
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ("jobs", "attempts", "events")}
    finally:
        db.close()


def test_the_plan_rendered_is_the_plan_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    rt = LocalRuntime(LocalOptions(), Store(tmp_path / "home"))
    plan = rt.dryrun(make_job("same", workers=1, command=PRINT_PORT))
    shown = {s.env["MASTER_PORT"] for s in plan.specs}
    assert shown == {str(plan.ports[0])}
    assert f"MASTER_PORT={plan.ports[0]}" in plan.text()
    view = rt.run(plan, quiet=True)
    assert view.status.is_true(ConditionType.SUCCEEDED), view.status
    for replica in ("master-0", "worker-0"):
        out = (tmp_path / "home" / "jobs" / "same" / "replicas" / replica / "attempt-0" / "output.log").read_text()
        assert out.split()[:2] == ["port", str(plan.ports[0])], out
    assert view.uid == plan.job.metadata.uid  # the job the plan rendered, not a new one


LINES = ["python", "-c", "print('\\n'.join(f'line {i}' for i in range(5000)), end='')"]


def test_logs_are_lines_and_a_tail_reads_only_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Runtime.logs` yields lines (the last one without its end too); `tail` starts near the end of the file."""
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    rt = LocalRuntime(LocalOptions(), Store(tmp_path / "home"))
    view = rt.run(rt.dryrun(make_job("lines", command=LINES)), quiet=True)
    assert view.status.is_true(ConditionType.SUCCEEDED), view.status
    own = list(rt.logs("lines", "master-0"))
    assert own == [f"line {i}" for i in range(5000)]
    assert list(rt.logs("lines", "master-0", tail=3)) == ["line 4997", "line 4998", "line 4999"]
    assert list(rt.logs("lines", "master-0", tail=10_000)) == own
    combined = list(rt.logs("lines"))
    assert "[master-0] line 4999" in combined and list(rt.logs("lines", tail=1)) == combined[-1:]
    with pytest.raises(UserError, match="no job named"):
        list(rt.logs("nope"))


def test_run_uses_the_port_it_rendered_even_when_another_would_be_picked(torchjob: Torchjob, tmp_path: Path) -> None:
    # Two renders pick two ports (a later run may pick new ones) ...
    path = write_job(tmp_path / "p.yaml", job_data("p", workers=1, command=PRINT_PORT))
    first = torchjob("render", str(path), check=True).stdout
    second = torchjob("render", str(path), check=True).stdout
    assert first != second
    # ... and within one `run` the port every replica gets is the one in its stored plan.
    proc = torchjob("run", str(path), check=True)
    ports = {line.split()[2] for line in proc.stdout.splitlines() if " port " in f" {line} "}
    assert len(ports) == 1, proc.stdout
    assert torchjob.describe("p")["job"]["metadata"]["uid"]
    assert ports == {str(Store(torchjob.home).get("p").options["ports"][0])}  # type: ignore[union-attr]


def test_describe_of_a_job_whose_supervisor_died_writes_nothing(torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "lost.yaml", job_data("lost", workers=1, command=SLEEP))
    torchjob("submit", "--grace-period", "2", str(path), check=True)
    desc = torchjob.wait_for("lost", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    uid = desc["job"]["metadata"]["uid"]
    supervisor = Store(torchjob.home).get("lost")
    assert supervisor is not None and supervisor.supervisor_pid
    assert pids.send(supervisor.supervisor_pid, signal.SIGKILL, pids.started_at(supervisor.supervisor_start))
    end = time.monotonic() + 20
    while job_processes(uid) and time.monotonic() < end:
        time.sleep(0.1)
    assert job_processes(uid) == []
    while supervisor_alive(supervisor) and time.monotonic() < end:  # until whoever reaps the daemon has
        time.sleep(0.1)
    assert not supervisor_alive(supervisor)
    before = snapshot(torchjob.home)

    seen = torchjob.describe("lost")
    assert seen["status"]["failure"]["reason"] == "SupervisorLost", seen["status"]
    assert {a["reason"] for a in seen["attempts"]} == {"SupervisorLost"}
    text = torchjob("describe", "lost", check=True).stdout
    assert "State:       Failed (SupervisorLost)" in text and "Supervisor:  -" in text
    assert "Failed" in torchjob("list", check=True).stdout
    torchjob("logs", "lost", check=True)
    assert snapshot(torchjob.home) == before  # read three ways; not one row written

    # A writing command records core's verdict (here one that is refused: the job has ended).
    refused = torchjob("suspend", "lost")
    assert refused.returncode == 2 and "job 'lost' has already failed" in refused.stderr
    rec = Store(torchjob.home).get("lost")
    assert rec is not None and rec.status.failure is not None and rec.status.failure.reason == "SupervisorLost"
    assert rec.supervisor_pid is None
    after = torchjob.describe("lost")
    assert after["status"]["failure"] == seen["status"]["failure"]
    assert [e["reason"] for e in after["events"]].count("SupervisorLost") == 1  # recorded once, shown once


def test_a_job_past_its_ttl_is_hidden_by_readers_and_removed_by_the_next_writer(
        torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "ttl.yaml", job_data("ttl", workers=0, command=["python", "-c", "pass"],
                                                   run_policy={"ttlSecondsAfterFinished": 4}))
    torchjob("run", str(path), check=True)
    # Read from the store, not by `describe`: on a busy machine the run's exit and a new process can
    # take longer than the TTL, and describe would (rightly) hide the job already.
    rec = Store(torchjob.home).get("ttl")
    assert rec is not None and rec.status.conditions
    ended = rec.status.completionTime
    assert ended is not None
    time.sleep(max(0.0, ended.timestamp() + 4.2 - time.time()))
    before = snapshot(torchjob.home)
    assert [row[0] for row in before["jobs"]] == ["ttl"]
    gone = torchjob("describe", "ttl")
    assert gone.returncode == 2 and "no job named 'ttl'" in gone.stderr
    assert torchjob("list", "-o", "json", check=True).stdout.strip() == "[]"
    assert snapshot(torchjob.home) == before  # core's DeleteJob is shown, not applied, by a reader
    missing = torchjob("delete", "other")  # a writer applies it, whatever it was asked
    assert missing.returncode == 2 and "no job named 'other'" in missing.stderr
    assert snapshot(torchjob.home)["jobs"] == []
    assert not (torchjob.home / "jobs" / "ttl").exists()


def test_refusals_are_the_shared_ones(torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "r.yaml", job_data("r", workers=0, command=SLEEP))
    torchjob("submit", "--grace-period", "2", str(path), check=True)
    torchjob.wait_for("r", lambda d: state_of(d) == "Running")
    running = torchjob("resume", "r")
    assert running.returncode == 2, running.stderr
    assert "error: job 'r' is not suspended" in running.stderr and "torchjob suspend r" in running.stderr
    # KIND/NAME as --kube takes it: every local job is a TorchJob, a cluster's kind is refused in words
    assert "Name:        r" in torchjob("describe", "tj/r", check=True).stdout
    other = torchjob("logs", "trainjob/r")
    assert other.returncode == 2 and "'trainjob/r': a TrainJob runs on a cluster only" in other.stderr, other.stderr
    assert "add --kube" in other.stderr and "Traceback" not in other.stderr
    torchjob("delete", "torchjob/r", check=True)
    for verb in ("describe", "logs", "delete", "suspend", "resume"):
        proc = torchjob(verb, "r")
        assert proc.returncode == 2 and "error: no job named 'r'" in proc.stderr, (verb, proc.stderr)

    done = write_job(tmp_path / "d.yaml", job_data("d", workers=0, command=["python", "-c", "pass"]))
    torchjob("run", str(done), check=True)
    for verb in ("suspend", "resume"):
        proc = torchjob(verb, "d")
        assert proc.returncode == 2
        assert proc.stderr == "error: job 'd' has already succeeded\n    fix: run it again instead\n", proc.stderr


def test_a_refused_suspend_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    rt = LocalRuntime(LocalOptions(), Store(tmp_path / "home"))
    view = rt.run(rt.dryrun(make_job("once", workers=0, command=[sys.executable, "-c", "pass"])), quiet=True)
    assert view.status.is_true(ConditionType.SUCCEEDED)
    before = snapshot(tmp_path / "home")
    with pytest.raises(UserError, match="has already succeeded"):
        rt.suspend("once")
    assert snapshot(tmp_path / "home") == before
