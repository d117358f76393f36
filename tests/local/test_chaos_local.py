"""Faults of the machine around a local job (issue 22): a replica stopped by SIGSTOP (a hang), a
full disk where the logs go, a writer of the store killed mid-write, two commands on one job at
once. (The supervisor SIGKILLed mid-run: tests/local/test_torch_e2e.py and test_cli_runtime.py;
a replica SIGKILLed: the gang-restart rows of tests/scenarios.py, played here by
test_scenarios_local.py.) Real processes, a real tmpfs, real SQLite."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, REPO, Torchjob, job_processes, state_of, write_job
from torchjob.local.store.store import Store
from torchjob.local.supervisor import pids

pytestmark = pytest.mark.e2e
SLEEP = ["python", "-c", "import time; time.sleep(120)"]


def integrity(home: Path) -> str:
    db = sqlite3.connect(Store(home).path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def no_traceback(*procs: subprocess.CompletedProcess[str]) -> None:
    for p in procs:
        assert "Traceback" not in p.stderr, p.stderr


def test_a_sigstopped_replica_is_a_hang_that_the_stall_deadline_ends(torchjob: Torchjob, tmp_path: Path) -> None:
    data = job_data("frozen", workers=1, restart_policy="Never",
                    command=["python", str(PROGRAMS / "ddp_progress.py"), "--steps", "2000", "--step-time", "0.05"],
                    run_policy={"progressDeadlineSeconds": 3})
    proc = torchjob.popen("run", "--grace-period", "2", str(write_job(tmp_path / "frozen.yaml", data)))
    desc = torchjob.wait_for("frozen", lambda d: (d["status"].get("progress") or {}).get("step", 0) >= 5, timeout=120)
    worker = next(a["pid"] for a in desc["attempts"] if a["replica"] == "worker-0")
    job = pids.with_env(f"TORCHJOB_JOB_UID={desc['job']['metadata']['uid']}")
    # alive, holding its sockets, doing nothing: the master waits in all_reduce
    assert pids.send(worker, signal.SIGSTOP, job)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    assert time.monotonic() - stopped < 30  # the 3 s deadline, the 2 s grace, then SIGKILL (a stopped
    # process never acts on SIGTERM)
    status = torchjob.describe("frozen")["status"]
    assert status["failure"]["reason"] == "ProgressDeadlineExceeded", status
    assert job_processes(desc["job"]["metadata"]["uid"]) == []


def test_a_sigstopped_replica_without_reports_is_ended_by_the_jobs_deadline(torchjob: Torchjob,
                                                                          tmp_path: Path) -> None:
    data = job_data("still", workers=1, restart_policy="OnFailure", command=SLEEP,
                    run_policy={"activeDeadlineSeconds": 15})  # both replicas Running before it, at load 18 too
    proc = torchjob.popen("run", "--grace-period", "1", str(write_job(tmp_path / "still.yaml", data)))
    desc = torchjob.wait_for("still", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    job = pids.with_env(f"TORCHJOB_JOB_UID={desc['job']['metadata']['uid']}")
    for a in desc["attempts"]:
        assert pids.send(a["pid"], signal.SIGSTOP, job)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert torchjob.describe("still")["status"]["failure"]["reason"] == "DeadlineExceeded"
    assert job_processes(desc["job"]["metadata"]["uid"]) == []


@pytest.fixture
def small_disk(torchjob: Torchjob) -> Iterator[Path]:
    """A 256 KiB tmpfs where the jobs' logs go (TORCHJOB_HOME/jobs); the store stays beside it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the logs needs root")
    jobs = torchjob.home / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(jobs)], check=True)
    try:
        yield jobs
    finally:
        subprocess.run(["umount", "-l", str(jobs)], check=False)


def test_a_full_disk_where_logs_go_is_told_and_the_job_and_store_are_unharmed(torchjob: Torchjob, tmp_path: Path,
                                                                             small_disk: Path) -> None:
    # ~2 MB of output per replica into a 256 KiB disk: its log fills it; the replica must not block
    # on its pipe (the output still streams) and the job ends as its script does.
    chatty = ["python", "-c", "for i in range(20000): print('x' * 100, i)"]
    path = write_job(tmp_path / "full.yaml", job_data("full", workers=1, restart_policy="Never", command=chatty))
    run = torchjob("run", str(path), timeout=120)
    no_traceback(run)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "could not be written (No space left on device)" in run.stderr, run.stderr[-2000:]
    assert run.stdout.count(" 19999\n") == 2  # every line streamed, from both replicas
    desc = torchjob.describe("full")
    assert state_of(desc) == "Succeeded"
    assert any(e["reason"] == "LogNotWritten" for e in desc["events"]), desc["events"]
    assert integrity(torchjob.home) == "ok"
    no_traceback(torchjob("logs", "full", check=True))


WRITER = """
import sys, time
from pathlib import Path
from torchjob.local.store.store import Store
s = Store(Path(sys.argv[1]))
n = 0
while True:
    s.add_event("w", "Normal", "Chaos", str(n) + ":" + "m" * 2000)
    if n == 0:
        print("writing", flush=True)  # the test kills it only once it writes (its start-up is slow under load)
    n += 1
"""


def test_a_store_writer_killed_mid_write_leaves_sqlite_consistent(torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "w.yaml", job_data("w", workers=1, command=SLEEP))
    torchjob("submit", "--grace-period", "1", str(path), check=True)
    torchjob.wait_for("w", lambda d: state_of(d) == "Running")
    rng = random.Random(22)
    env = {**torchjob.env, "PYTHONPATH": str(REPO / "src")}
    for _ in range(12):  # SIGKILLed at a random moment of its writes, beside the job's own supervisor
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(torchjob.home)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        time.sleep(rng.random() * 0.5)
        writer.kill()
        writer.wait()
        writer.stdout.close()
    assert integrity(torchjob.home) == "ok"
    events = [e for e in torchjob.describe("w")["events"] if e["reason"] == "Chaos"]
    assert events and all(e["message"].endswith(":" + "m" * 2000) for e in events)  # whole rows, none torn
    assert state_of(torchjob.describe("w")) == "Running"  # the supervisor wrote on, unharmed
    no_traceback(torchjob("delete", "w", check=True))


def test_two_commands_on_one_job_at_once_end_in_one_consistent_state(torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "two.yaml", job_data("two", workers=1, command=SLEEP))
    torchjob("submit", "--grace-period", "1", str(path), check=True)
    desc = torchjob.wait_for("two", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    uid = desc["job"]["metadata"]["uid"]

    def both(*cmds: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
        procs = [torchjob.popen(*c) for c in cmds]
        outs = [p.communicate(timeout=60) for p in procs]
        return [subprocess.CompletedProcess(p.args, p.returncode, o, e) for p, (o, e) in zip(procs, outs, strict=True)]

    # Two suspends: the job is suspended once; the second is a no-op or a clear refusal.
    done = both(("suspend", "two"), ("suspend", "two"))
    no_traceback(*done)
    assert sorted(p.returncode for p in done) in ([0, 0], [0, 2]), [(p.returncode, p.stderr) for p in done]
    desc = torchjob.wait_for("two", lambda d: state_of(d) == "Suspended")
    # The supervisor records Suspended in the round that stops the replicas, before it signals them:
    # their end is waited for (bounded), not read at once
    end = time.monotonic() + 30
    while job_processes(uid) and time.monotonic() < end:
        time.sleep(0.1)
    assert job_processes(uid) == []
    # A resume and a delete at once: whichever wins, the job ends gone with nothing left running.
    done = both(("resume", "two"), ("delete", "two"))
    no_traceback(*done)
    assert all(p.returncode in (0, 2) for p in done), [(p.returncode, p.stderr) for p in done]
    end = time.monotonic() + 30
    while time.monotonic() < end and (job_processes(uid) or torchjob("describe", "two").returncode == 0):
        if torchjob("describe", "two").returncode == 0 and not job_processes(uid):
            torchjob("delete", "two")  # the resume won: its job is deleted now
        time.sleep(0.3)
    assert job_processes(uid) == []
    assert torchjob("describe", "two").returncode != 0
    assert integrity(torchjob.home) == "ok"
