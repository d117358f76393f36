"""A pid read from a record or a list can belong to a stranger minutes later (pids wrap fast here):
torchjob never signals one without checking it, at the moment of the signal, as its own. Each test
plays the reuse with a stranger that holds the very number torchjob kept, and fails on the code
that trusted the number."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.local.local_runtime import LocalRuntime
from torchjob.local.start.launch import LocalOptions
from torchjob.local.store.store import Store
from torchjob.local.supervisor import pids, watchdog
from torchjob.local.supervisor.sweep import sweep


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process of nobody's job, the leader of a session and a group of its own (as a dev cluster's
    kube-scheduler is): the number of a group torchjob once made could now be its."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def alive(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        return True
    return False


def test_the_watchdog_leaves_alone_a_group_number_that_is_a_strangers_now(
        stranger: subprocess.Popen[bytes]) -> None:
    """The supervisor told its watchdog of a replica's group; the replica ended long ago and the
    number now names a stranger's session. The supervisor dies: the stranger lives."""
    watchdog.watch([f"pg {stranger.pid}\n"], uid="no-such-job", grace_s=0.5)
    assert alive(stranger), "the watchdog signalled a group the job no longer had"


def test_the_watchdog_stops_the_jobs_own_groups() -> None:
    uid = "job-of-the-watchdog-test"
    env = {"TORCHJOB_JOB_UID": uid, "PATH": "/usr/bin:/bin"}
    replica = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True, env=env)
    try:
        watchdog.watch([f"pg {replica.pid}\n"], uid=uid, grace_s=5)
        assert replica.wait(timeout=10) == -signal.SIGTERM
    finally:
        if replica.poll() is None:
            replica.kill()
            replica.wait()


def test_sweep_kills_by_the_marker_only(stranger: subprocess.Popen[bytes]) -> None:
    uid = "job-of-the-sweep-test"
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                              env={"TORCHJOB_JOB_UID": uid})
    try:
        # Popen returns once the child's exec closed its pipe, a moment before the kernel sets up the
        # new program's environment: /proc/PID/environ can still read empty (seen under load).
        deadline = time.monotonic() + 10
        while not pids.environ_has(marked.pid, f"TORCHJOB_JOB_UID={uid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sweep(f"TORCHJOB_JOB_UID={uid}") == [marked.pid]
        assert marked.wait(timeout=10) == -signal.SIGKILL
        assert alive(stranger)
    finally:
        if marked.poll() is None:
            marked.kill()
            marked.wait()


def test_delete_does_not_signal_a_stranger_that_took_the_supervisors_pid(
        tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    """A job's record names a supervisor pid that a stranger has now (it started later): `delete` and
    `suspend` treat the supervisor as gone, and the stranger gets no SIGUSR1 (whose default kills)."""
    store = Store(tmp_path / "home")
    runtime = LocalRuntime(LocalOptions(), store)
    plan = runtime.dryrun(job_from_data(job_data("reused", workers=0, command=["sleep", "30"])))
    store.create_job(plan.job, plan.opts.to_json())
    start = pids.started(stranger.pid)
    assert start is not None
    store._db.execute("UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE name=?",
                      (stranger.pid, start - 1, "reused"))  # its pid, not its start: another process
    runtime.delete("reused")
    assert alive(stranger), "delete signalled the process that has the supervisor's old pid"
    assert store.get("reused") is None


def test_send_checks_the_process_it_signals(stranger: subprocess.Popen[bytes]) -> None:
    assert not pids.send(stranger.pid, signal.SIGKILL, pids.started_at((pids.started(stranger.pid) or 0) + 1))
    assert alive(stranger)
    assert pids.send(stranger.pid, signal.SIGKILL, pids.started_at(pids.started(stranger.pid)))
    assert stranger.wait(timeout=10) == -signal.SIGKILL


def test_a_spare_is_seen_waiting_once_it_blocks_reading_its_socket() -> None:
    """pids.spare_waiting, as the benches and the real-node test use it: the process reading the fd its
    TORCHJOB_SPARE_FD names (what a warm spare's launcher does), and not while it is still busy."""
    import socket

    ours, theirs = socket.socketpair()
    code = "import os, time; time.sleep(float(os.environ['BUSY_S'])); os.read(int(os.environ['TORCHJOB_SPARE_FD']), 1)"
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),),
                            env={"TORCHJOB_SPARE_FD": str(theirs.fileno()), "BUSY_S": "1"})
    theirs.close()
    try:
        assert not pids.spare_waiting(proc.pid)  # still "importing"
        end = time.monotonic() + 30
        while not pids.spare_waiting(proc.pid):
            assert time.monotonic() < end and proc.poll() is None
            time.sleep(0.05)
        ours.sendall(b"x")
        proc.wait(10)
        assert not pids.spare_waiting(proc.pid)
    finally:
        ours.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
