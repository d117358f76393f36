"""Progress reports and stalls on the local runtime, with real torch.distributed (gloo) jobs."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job

pytestmark = pytest.mark.e2e
TRAIN = ["python", str(PROGRAMS / "ddp_progress.py")]


def progress_job(tmp_path: Path, name: str, args: list[str], policies: list[dict[str, str]] | None = None,
                 **kw: Any) -> Path:
    data = job_data(name, command=[*TRAIN, *args], workers=kw.pop("workers", 1), **kw)
    if policies:
        data["spec"]["policies"] = policies
    return write_job(tmp_path / f"{name}.yaml", data)


def test_a_torch_job_reports_through_the_helper(torchjob: Torchjob, tmp_path: Path) -> None:
    path = progress_job(tmp_path, "reports", ["--steps", "30", "--step-time", "0.1"])
    proc = torchjob("run", str(path))
    assert proc.returncode == 0, proc.stderr
    desc = torchjob.describe("reports")
    progress = desc["status"]["progress"]
    assert progress["percent"] == 100.0 and progress["step"] == 30 and progress["total"] == 30, progress
    assert progress["reporter"] in ("master-0", "worker-0")
    assert progress["rate"] > 1, progress  # about 10 steps a second
    assert [m["name"] for m in progress["metrics"]] == ["loss"] and float(progress["metrics"][0]["value"]) > 0
    assert not any(e["reason"] == "Stalled" for e in desc["events"])
    listed = torchjob("list", check=True).stdout
    assert "PROGRESS" in listed and "100%" in listed
    text = torchjob("describe", "reports", check=True).stdout
    assert "Progress:    100% · step 30/30 ·" in text and "steps/s" in text and "Metrics:     loss=" in text


def test_a_rank_hung_in_all_reduce_is_restarted_by_a_stalled_policy(torchjob: Torchjob, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    path = progress_job(tmp_path, "hung", ["--steps", "20", "--step-time", "0.1", "--hang-replica", "worker-0",
                                           "--hang-at", "5", "--once-dir", str(marks)],
                        # 8 s: a restarted attempt's first report (torch imported, the group joined) took
                        # more than 3 s with the suite on four workers beside it
                        run_policy={"progressDeadlineSeconds": 8, "backoffLimit": 2},
                        policies=[{"event": "Stalled", "action": "RestartJob"}])
    start = time.monotonic()
    proc = torchjob("run", "--grace-period", "5", str(path), timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 120
    assert "worker-0 hangs in all_reduce at step 5" in proc.stdout
    assert "sent no progress report for 8s (runPolicy.progressDeadlineSeconds)" in proc.stderr
    desc = torchjob.describe("hung")
    assert state_of(desc) == "Succeeded" and desc["status"]["restartCount"] == 1
    stalled = [e for e in desc["events"] if e["reason"] == "Stalled"]
    assert len(stalled) == 1, desc["events"]
    first = {a["replica"]: a for a in desc["attempts"] if a["attempt"] == 0}
    assert {r: a["reason"] for r, a in first.items()} == {"master-0": "Stopped", "worker-0": "Stopped"}
    assert desc["status"]["progress"]["step"] == 20
    assert job_processes(desc["job"]["metadata"]["uid"]) == []


def test_a_stall_without_a_policy_fails_the_job(torchjob: Torchjob, tmp_path: Path) -> None:
    path = progress_job(tmp_path, "stuck", ["--steps", "20", "--step-time", "0.1", "--hang-replica", "master-0",
                                            "--hang-at", "3"], run_policy={"progressDeadlineSeconds": 2})
    proc = torchjob("run", "--grace-period", "5", str(path), timeout=120)
    assert proc.returncode == 1
    status = torchjob.describe("stuck")["status"]
    assert status["failure"]["reason"] == "ProgressDeadlineExceeded", status
    assert status["failure"]["replica"] in ("master-0", "worker-0")
    assert "stuck FAILED: ProgressDeadlineExceeded" in proc.stderr


def test_the_kubeflow_sdk_reports_unchanged(torchjob: Torchjob, tmp_path: Path) -> None:
    pytest.importorskip("kubeflow.trainer")
    path = progress_job(tmp_path, "sdk", ["--steps", "10", "--step-time", "0.05", "--kubeflow"])
    proc = torchjob("run", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "[master-0] kubeflow update_trainjob_status sent at step 1" in proc.stdout
    progress = torchjob.describe("sdk")["status"]["progress"]
    # the SDK sends at most one update per 5 s: the first step's, and one more only on a machine so slow
    # that the 10 steps outlast 5 s: the last one sent is the job's progress
    last = int(re.findall(r"kubeflow update_trainjob_status sent at step (\d+)", proc.stdout)[-1])
    assert progress["percent"] == float(int(100 * last / 10)) and progress["etaSeconds"] == 0, progress
    assert {m["name"]: m["value"] for m in progress["metrics"]}["accuracy"] == str(0.5 + last / (2 * 10))
    assert progress["reporter"] == "master-0"


# --- bad reports -------------------------------------------------------------------------------

WAIT_ENV = ("import json, os, sys, time; "
            "json.dump({k: v for k, v in os.environ.items() if k.startswith('KUBEFLOW_')}, open(sys.argv[1], 'w')); "
            "time.sleep(120)")


def post(url: str, body: bytes, token: str | None, timeout: float = 5) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def waiting_job(torchjob: Torchjob, tmp_path: Path, name: str) -> dict[str, str]:
    env_file = tmp_path / f"{name}.env.json"
    path = write_job(tmp_path / f"{name}.yaml", job_data(name, workers=0, command=["python", "-c", WAIT_ENV,
                                                                                   str(env_file)]))
    torchjob("submit", str(path), check=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if env_file.exists() and env_file.stat().st_size:
            env: dict[str, str] = json.loads(env_file.read_text())
            return env
        time.sleep(0.1)
    raise AssertionError(f"{name} never started")


def test_bad_reports_are_refused_without_harm(torchjob: Torchjob, tmp_path: Path) -> None:
    a = waiting_job(torchjob, tmp_path, "victim")
    b = waiting_job(torchjob, tmp_path, "other")
    url = a["KUBEFLOW_TRAINER_SERVER_URL"]
    token = Path(a["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text()
    other_token = Path(b["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text()
    good = json.dumps({"step": 1, "total": 10}).encode()
    assert url.startswith("http://127.0.0.1:") and Path(a["KUBEFLOW_TRAINER_SERVER_CA_CERT"]).is_file()
    assert Path(a["KUBEFLOW_TRAINER_SERVER_TOKEN"]).stat().st_mode & 0o777 == 0o600

    code, body, _ = post(url, good, None)
    assert (code, body["reason"]) == (403, "Forbidden")
    code, _, _ = post(url, good, token[:-4] + "0000")  # forged signature
    assert code == 403
    code, _, _ = post(url, good, other_token)  # another job's token, on this job's endpoint
    assert code == 403
    code, _, _ = post(url.replace("/victim/", "/other/"), good, token)  # this job's token, another job's path
    assert code in (403, 404)
    code, body, _ = post(url, b"{not json", token)
    assert (code, body["reason"]) == (422, "Invalid") and "not JSON" in body["message"]
    code, body, _ = post(url, json.dumps({"trainerStatus": {"progressPercentage": 140}}).encode(), token)
    assert code == 422 and "trainerStatus.progressPercentage: must be between 0 and 100, got 140" in body["message"]
    code, body, _ = post(url, b"x" * (70 * 1024), token)
    assert code == 413
    # a flood: past the job's burst, the token bucket answers 429 with Retry-After
    flood = [post(url, json.dumps({"step": 5}).encode(), token) for _ in range(300)]
    codes = [c for c, _, _ in flood]
    assert 429 in codes and set(codes) <= {200, 429}, set(codes)
    assert all(int(h["Retry-After"]) >= 1 for c, _, h in flood if c == 429)
    # unharmed: the job runs, and once the bucket refills a good report is taken
    time.sleep(1.0)
    code, body, _ = post(url, json.dumps({"step": 7, "total": 10, "metrics": {"loss": 0.5}}).encode(), token)
    assert (code, body) == (200, {"step": 7, "total": 10, "percent": 70.0, "metrics": {"loss": "0.5"}})
    desc = torchjob.wait_for("victim", lambda d: (d["status"].get("progress") or {}).get("step") == 7)
    assert state_of(desc) == "Running"
    assert desc["status"]["progress"]["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert state_of(torchjob.describe("other")) == "Running" and "progress" not in torchjob.describe("other")["status"]
    for name in ("victim", "other"):
        torchjob("delete", name, check=True)


# --- the live bar ------------------------------------------------------------------------------

STEPS = ("import time; from torchjob.report import Reporter; r = Reporter(interval=0.1)\n"
         "for i in range(1, 31):\n"
         "    time.sleep(0.05); r.report(step=i, total=30, loss=1 / i); print('step', i, flush=True)\n")


def test_run_on_a_terminal_shows_a_live_bar_over_the_output(torchjob: Torchjob, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    path = write_job(tmp_path / "bar.yaml", job_data("bar", workers=0, command=["python", "-c", STEPS]))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "torchjob", "run", str(path)],
                            env={**torchjob.env, "COLUMNS": "120"}, stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=follower, cwd=str(PROGRAMS.parents[1]))
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: every process that had it has exited
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(30) == 0
    os.close(leader)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    lines = [line.strip() for line in re.split(r"[\r\n]+", screen)]
    assert "[master-0] step 30" in lines
    bars = [line for line in lines if line.startswith("bar ━")]
    assert len(bars) > 3, screen[-2000:]  # redrawn as the job goes
    assert "100% step 30/30 ·" in bars[-1] and "steps/s ETA 0s loss=0.0333" in bars[-1], bars[-1]
    assert lines.index("[master-0] step 30") < len(lines) - lines[::-1].index(bars[-1]) - 1  # the bar stays below
