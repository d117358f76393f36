"""Warm spares (runPolicy.warmSpares), end to end with real processes and real torch: a job behaves the
same with and without them (what the script sees, its exit code, its output, the root cause, torch's
error file), a SIGKILLed rank's next attempt is its spare (a process started before the kill), and
stopping or suspending the job leaves no spare behind."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job
from torchjob.local.spares.spare import ATTEMPT_ENV
from torchjob.local.spares.workers import TORCHRUN_WORKER_ENV
from torchjob.local.store.store import Store
from torchjob.local.supervisor import pids

pytestmark = pytest.mark.e2e
PROBE = PROGRAMS / "spare_probe.py"


def probe_job(out: Path, mode: str, spares: bool, workers: int = 0, backoff: int = 1) -> dict[str, Any]:
    data = job_data("probe", workers=workers, restart_policy="OnFailure", restart_scope=None,
                    command=["python", str(PROBE), "--flag", "value"],
                    run_policy={"backoffLimit": backoff, **({"warmSpares": True} if spares else {})})
    env = [{"name": "PROBE_OUT", "value": str(out)}, {"name": "PROBE_MODE", "value": mode}]
    if spares:
        env.append({"name": "PROBE_WAIT_SPARE", "value": "1"})
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["env"] = env
    return data


def view(out: Path, replica: str, attempt: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / f"{replica}-{attempt}.json").read_text())
    return data


def spare_pids(home: Path, job: str) -> dict[str, int]:
    """Each replica's last announced spare (the SpareReady events)."""
    found: dict[str, int] = {}
    store = Store(home)
    try:
        for e in store.events(job):
            if e.reason == "SpareReady":
                m = re.match(r"(\S+)'s warm spare is ready \(pid (\d+)", e.message)
                assert m, e.message
                found[m[1]] = int(m[2])
    finally:
        store.close()
    return found


def wait_for(what: str, probe: Any, timeout: float = 240) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def same_but(a: dict[str, Any], b: dict[str, Any], differ: set[str]) -> None:
    assert set(a) == set(b), set(a) ^ set(b)
    for k in a:
        if k not in differ:
            assert a[k] == b[k], (k, a[k], b[k])


def test_a_failing_script_fails_the_same_with_and_without_spares(tmp_path: Path) -> None:
    runs = {}
    for spares in (False, True):
        tag = "warm" if spares else "cold"
        out = tmp_path / f"{tag}-out"
        out.mkdir()
        tj = Torchjob(tmp_path / f"{tag}-home")
        tj.home.mkdir()
        job = write_job(tmp_path / f"{tag}.yaml", probe_job(out, "fail", spares))
        runs[tag] = (tj, out, tj("run", str(job), timeout=400))
    (cold_tj, cold_out, cold), (warm_tj, warm_out, warm) = runs["cold"], runs["warm"]

    # the second attempt of the job with spares was its spare: started before the first one failed
    spare = view(warm_out, "master-0", 1)
    failed_at = float((warm_out / "master-0-0.fails").read_text())  # seconds since boot, as "started"
    assert spare["started"] < failed_at, (spare["started"], failed_at)
    assert "from its warm spare" in warm.stdout + warm.stderr
    assert "from its warm spare" not in cold.stdout + cold.stderr

    # what the script saw: the same in a cold process and in the spare, but the attempt's own variables
    a0, a1 = view(warm_out, "master-0", 0), view(warm_out, "master-0", 1)
    same_but(a0, a1, {"env", "pid", "pgid", "started", "cmdline"})  # the kernel's command line: the launcher's
    same_but(a0["env"], a1["env"], set(ATTEMPT_ENV))
    assert any("torchjob_spare.py" in a for a in a1["cmdline"]) and a0["cmdline"][1:] == [str(PROBE), "--flag",
                                                                                            "value", ""]
    assert a1["pid"] == a1["pgid"]  # the spare's process leads its own group, as a replica's does
    assert a1["main"] and a1["names"] == a0["names"] and a1["argv"] == [str(PROBE), "--flag", "value"]
    # ... and the same as the job without spares saw, but the job's own values
    c1 = view(cold_out, "master-0", 1)
    same_but(c1, a1, {"env", "pid", "pgid", "started", "cmdline"})

    def env_norm(env: dict[str, str], home: Path, out: Path) -> dict[str, str]:
        return {k: v.replace(str(home), "HOME").replace(str(out), "OUT") for k, v in env.items()
                if k not in ("TORCHJOB_JOB_UID", "MASTER_PORT", "KUBEFLOW_TRAINER_SERVER_URL", "PROBE_WAIT_SPARE")}

    assert env_norm(c1["env"], cold_tj.home, cold_out) == env_norm(a1["env"], warm_tj.home, warm_out)

    # the same exit code, root cause and output (each attempt's log, torch's error file)
    assert cold.returncode == warm.returncode == 1, (cold.stderr[-2000:], warm.stderr[-2000:])

    def text_norm(text: str, tj: Torchjob) -> str:
        text = text.replace(str(tj.home), "HOME")
        text = re.sub(r"\d+(\.\d+)?s\b", "Ns", text)
        return re.sub(r"pid \d+", "pid N", text)

    def root_cause(text: str) -> list[str]:
        lines = text.splitlines()
        return [line for line in lines if "fails on purpose" in line or "root cause" in line.lower()]

    assert root_cause(text_norm(cold.stdout + cold.stderr, cold_tj)) == root_cause(
        text_norm(warm.stdout + warm.stderr, warm_tj)) != []
    for attempt in (0, 1):
        logs = []
        for tj in (cold_tj, warm_tj):
            d = tj.home / "jobs" / "probe" / "replicas" / "master-0" / f"attempt-{attempt}"
            logs.append((text_norm((d / "output.log").read_text(), tj),
                         json.loads((d / "error.json").read_text())["message"]["message"]))
        assert logs[0] == logs[1], logs
        assert "Traceback (most recent call last):" in logs[1][0] and "torchjob_spare" not in logs[1][0]
        assert "RuntimeError: master-0 fails on purpose" in logs[1][1]
    assert job_processes(warm_tj.describe("probe")["job"]["metadata"]["uid"]) == []


def test_a_sigkilled_rank_is_replaced_by_its_spare(torchjob: Torchjob, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = torchjob.popen("run", str(write_job(tmp_path / "k.yaml", probe_job(out, "wait", True, workers=1,
                                                                                 backoff=2))))
    try:
        ready = wait_for("both spares", lambda: len(spare_pids(torchjob.home, "probe")) == 2 and
                         (out / "worker-0-0.json").exists() and (out / "master-0-0.json").exists())
        assert ready
        spares = spare_pids(torchjob.home, "probe")
        victim = view(out, "worker-0", 0)["pid"]
        uid = torchjob.describe("probe")["job"]["metadata"]["uid"]
        killed_at = uptime()  # seconds since boot, as a process's start time in /proc
        assert pids.send(victim, signal.SIGKILL, pids.with_env(f"TORCHJOB_JOB_UID={uid}"))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    for replica in ("master-0", "worker-0"):  # the gang restarted, each replica from its spare
        new = view(out, replica, 1)
        assert new["pid"] == spares[replica] == new["pgid"]
        assert new["started"] < killed_at, (replica, new["started"], killed_at)
    attempts = {(a["replica"], a["attempt"]): a for a in torchjob.describe("probe")["attempts"]}
    assert attempts[("worker-0", 0)]["exit_code"] == 137 and attempts[("worker-0", 1)]["pid"] == spares["worker-0"]
    assert f"worker-0 started (pid {spares['worker-0']}, attempt 1, from its warm spare)" in stdout + stderr
    assert job_processes(uid) == []


def test_sigterm_and_suspend_leave_no_spare_behind(torchjob: Torchjob, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = write_job(tmp_path / "s.yaml", probe_job(out, "wait", True))
    # suspend: the replica and its spare stop; nothing of the job runs while it is suspended
    torchjob("submit", str(path), check=True)
    wait_for("the spare", lambda: spare_pids(torchjob.home, "probe"))
    uid = torchjob.describe("probe")["job"]["metadata"]["uid"]
    spare = spare_pids(torchjob.home, "probe")["master-0"]
    assert spare in job_processes(uid)
    torchjob("suspend", "probe", check=True)
    torchjob.wait_for("probe", lambda d: state_of(d) == "Suspended")
    wait_for("no process of the suspended job", lambda: job_processes(uid) == [], timeout=30)
    torchjob("delete", "probe", check=True)
    # SIGTERM to `torchjob run`: the job stops, and its spare with it
    (out / "master-0-0.json").unlink()
    proc = torchjob.popen("run", str(path))
    try:
        wait_for("the spare", lambda: spare_pids(torchjob.home, "probe") and (out / "master-0-0.json").exists())
        uid = torchjob.describe("probe")["job"]["metadata"]["uid"]
        assert spare_pids(torchjob.home, "probe")["master-0"] in job_processes(uid)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert job_processes(uid) == []


def test_a_torchrun_worker_started_again_by_its_agent_is_the_agents_spare(torchjob: Torchjob, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    data = job_data("probe", workers=1, master=False, restart_policy="Never", restart_scope=None,
                    command=["torchrun", str(PROBE), "--flag", "value"], nproc_per_node=2,
                    elastic={"minReplicas": 1, "maxReplicas": 1, "maxRestarts": 1}, run_policy={"warmSpares": True})
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PROBE_OUT", "value": str(out)}, {"name": "PROBE_MODE", "value": "die"}]
    run = torchjob("run", str(write_job(tmp_path / "t.yaml", data)), timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    killed_at = float((out / "killed").read_text())
    spares = json.loads((out / "worker-0-rank0-spares.json").read_text())
    assert len(spares) == 2
    for rank in (0, 1):  # torchrun started both workers again: each is one of its agent's spares
        old, new = view(out, f"worker-0-rank{rank}", 0), view(out, f"worker-0-rank{rank}", 1)
        assert new["pid"] in spares and new["pid"] == new["pgid"], (new["pid"], spares)
        assert new["started"] < killed_at, (new["started"], killed_at)
        same_but(old, new, {"env", "pid", "pgid", "started", "cmdline"})
        same_but(old["env"], new["env"], set(ATTEMPT_ENV | TORCHRUN_WORKER_ENV))
        assert new["env"]["TORCHELASTIC_RESTART_COUNT"] == "1" and new["argv"] == [str(PROBE), "--flag", "value"]
    # each worker's lines keep their rank's tag, in both attempts
    log = (torchjob.home / "jobs" / "probe" / "replicas" / "worker-0" / "attempt-0" / "output.log").read_text()
    for rank in (0, 1):
        assert log.count(f"[rank{rank}]: worker-0-rank{rank} says hello on stdout") == 2, log[-3000:]
        assert log.count(f"[rank{rank}]: worker-0-rank{rank} says hello on stderr") == 2, log[-3000:]
    assert job_processes(torchjob.describe("probe")["job"]["metadata"]["uid"]) == []


def test_a_restarted_torchrun_replicas_first_workers_are_spares_started_with_its_agent(torchjob: Torchjob,
                                                                                        tmp_path: Path) -> None:
    """A torchrun replica that failed as a whole (its agent: torchrun without restarts, a rank failed) comes back
    with its first workers started from spares its agent made at once, not cold after its rendezvous: an
    elastic job's lost agent (bench/recovery.py --local --elastic) waited for its workers' `import torch`."""
    out = tmp_path / "out"
    out.mkdir()
    data = job_data("probe", workers=1, master=False, restart_policy="OnFailure", restart_scope=None,
                    command=["torchrun", str(PROBE), "--flag", "value"], nproc_per_node=2,
                    run_policy={"warmSpares": True, "backoffLimit": 1})
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PROBE_OUT", "value": str(out)}, {"name": "PROBE_MODE", "value": "agent-fails"}]
    run = torchjob("run", str(write_job(tmp_path / "a.yaml", data)), timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (out / "agent-failed").exists()
    for rank in (0, 1):
        old, new = view(out, f"worker-0-rank{rank}", 0), view(out, f"worker-0-rank{rank}", 1)
        assert not any("torchjob_spare.py" in a for a in old["cmdline"]), old["cmdline"]  # a job's first: cold
        assert any("torchjob_spare.py" in a for a in new["cmdline"]), new["cmdline"]
        same_but(old, new, {"env", "pid", "pgid", "started", "cmdline"})
        same_but(old["env"], new["env"], set(ATTEMPT_ENV | TORCHRUN_WORKER_ENV))
    assert job_processes(torchjob.describe("probe")["job"]["metadata"]["uid"]) == []
