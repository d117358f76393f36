"""The local runtime end to end with real torch.distributed (gloo over loopback)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import job_data
from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of, write_job

pytestmark = pytest.mark.e2e
STEP = ["python", str(PROGRAMS / "ddp_step.py")]


def ddp_job(tmp_path: Path, name: str, args: list[str] = (), **kw: Any) -> Path:  # type: ignore[assignment]
    kw.setdefault("restart_policy", "Never")
    return write_job(tmp_path / f"{name}.yaml", job_data(name, command=[*STEP, *args], **kw))


def uid_of(torchjob: Torchjob, name: str) -> str:
    return str(torchjob.describe(name)["job"]["metadata"]["uid"])


def test_bundled_example_trains_and_succeeds(torchjob: Torchjob) -> None:
    proc = torchjob("run", "examples/ddp/job.yaml")
    assert proc.returncode == 0, proc.stderr
    for replica in ("master-0", "worker-0", "worker-1"):
        assert f"[{replica}] rank" in proc.stdout
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()
              if line.startswith("[master-0] rank 0 epoch")]
    assert len(losses) == 5 and losses[-1] < losses[0] / 10, losses
    assert "job ddp-example succeeded" in proc.stderr
    desc = torchjob.describe("ddp-example")
    assert state_of(desc) == "Succeeded"
    assert [a["exit_code"] for a in desc["attempts"]] == [0, 0, 0]


def test_failing_worker_tears_down_the_gang_waiting_in_init(torchjob: Torchjob, tmp_path: Path) -> None:
    # worker-1 exits before joining: master-0 and worker-0 would wait in init_process_group for
    # 30 minutes; the job must fail at once and leave no process behind.
    path = ddp_job(tmp_path, "gang", ["--fail-replica", "worker-1", "--fail-code", "3"], workers=2)
    start = time.monotonic()
    proc = torchjob("run", "--grace-period", "5", str(path))
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert took < 30, took
    assert "Root cause" in proc.stderr and "worker-1" in proc.stderr and "exit code : 3" in proc.stderr
    desc = torchjob.describe("gang")
    assert desc["status"]["failure"]["replica"] == "worker-1"
    assert desc["status"]["failure"]["exitCode"] == 3
    assert job_processes(desc["job"]["metadata"]["uid"]) == []


def test_exit_code_policy_retries_137_then_succeeds(torchjob: Torchjob, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    path = ddp_job(tmp_path, "retry", ["--fail-replica", "worker-0", "--fail-code", "137",
                                        "--fail-once-dir", str(marks)], workers=2, restart_policy="ExitCode",
                   run_policy={"backoffLimit": 2})
    proc = torchjob("run", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "1 restart" in proc.stderr
    desc = torchjob.describe("retry")
    assert desc["status"]["restartCount"] == 1
    w0 = [(a["attempt"], a["exit_code"]) for a in desc["attempts"] if a["replica"] == "worker-0"]
    assert w0 == [(0, 137), (1, 0)]


def test_exit_code_policy_fails_at_once_on_exit_1(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "perm", ["--fail-replica", "worker-0", "--fail-code", "1"], workers=1,
                   restart_policy="ExitCode", run_policy={"backoffLimit": 5})
    proc = torchjob("run", "--grace-period", "5", str(path))
    assert proc.returncode == 1
    status = torchjob.describe("perm")["status"]
    assert status["failure"]["reason"] == "NonRetryableExitCode"
    assert status.get("restartCount", 0) == 0


def test_on_failure_stops_at_backoff_limit(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "backoff", ["--fail-replica", "worker-0", "--fail-code", "2"], workers=1,
                   restart_policy="OnFailure", run_policy={"backoffLimit": 2})
    proc = torchjob("run", "--grace-period", "5", str(path))
    assert proc.returncode == 1
    desc = torchjob.describe("backoff")
    assert desc["status"]["failure"]["reason"] == "BackoffLimitExceeded"
    assert desc["status"]["restartCount"] == 2
    assert len([a for a in desc["attempts"] if a["replica"] == "worker-0"]) == 3


def test_active_deadline_fails_the_job_on_time(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "deadline", ["--sleep", "120"], workers=1, run_policy={"activeDeadlineSeconds": 4})
    start = time.monotonic()
    proc = torchjob("run", "--grace-period", "5", str(path))
    took = time.monotonic() - start
    assert proc.returncode == 1
    desc = torchjob.describe("deadline")
    assert desc["status"]["failure"]["reason"] == "DeadlineExceeded"
    assert took >= 4, took  # not before the deadline
    # On time: the replicas' own lives, from the first start to the last end, are the 4 s deadline and
    # at most the 5 s grace period, with room; not the CLI's and torch's start-up, which a loaded machine
    # stretches (12 s of the 20 this test allowed, at load 14 on two cores), nor the 120 s of the script
    lived = max(a["ended"] for a in desc["attempts"]) - min(a["started"] for a in desc["attempts"])
    print(f"replicas lived {lived:.1f}s; the run took {took:.1f}s")
    assert lived < 4 + 5 + 6, (lived, took)


def _start_and_wait_running(torchjob: Torchjob, path: Path, name: str) -> Any:
    proc = torchjob.popen("run", "--grace-period", "5", str(path))
    torchjob.wait_for(name, lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    return proc


def test_ctrl_c_stops_every_replica(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "ctrlc", ["--sleep", "120"], workers=1)
    proc = _start_and_wait_running(torchjob, path, "ctrlc")
    uid = uid_of(torchjob, "ctrlc")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "stopped by SIGINT" in err
    assert job_processes(uid) == []
    assert torchjob.describe("ctrlc")["status"]["failure"]["reason"] == "Terminated"


def test_sigkill_of_the_supervisor_leaves_no_replica(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "orphans", ["--sleep", "120"], workers=1)
    proc = _start_and_wait_running(torchjob, path, "orphans")
    uid = uid_of(torchjob, "orphans")
    assert len(job_processes(uid)) >= 2
    proc.kill()
    proc.wait()
    end = time.monotonic() + 15
    while job_processes(uid) and time.monotonic() < end:
        time.sleep(0.1)
    assert job_processes(uid) == []
    desc = torchjob.wait_for("orphans", lambda d: state_of(d) == "Failed", timeout=15)
    assert desc["status"]["failure"]["reason"] == "SupervisorLost"


def test_torchrun_mode_with_two_processes_per_node(torchjob: Torchjob, tmp_path: Path) -> None:
    path = write_job(tmp_path / "tr.yaml", job_data(
        "tr", workers=1, restart_policy="Never", nproc_per_node="2",
        command=["torchrun", str(PROGRAMS / "ddp_step.py")]))
    render = torchjob("render", str(path), "-o", "json", check=True)
    assert '"PET_NPROC_PER_NODE": "2"' in render.stdout and '"PET_NNODES": "2"' in render.stdout
    proc = torchjob("run", str(path))
    assert proc.returncode == 0, proc.stderr
    # 2 nodes x 2 processes, ranks 1..4 sum to 10 (two processes of a node share its output, so
    # their lines may interleave: count the messages, not the lines)
    assert proc.stdout.count("all-reduce ok: 10") == 4, proc.stdout
    for rank in range(4):
        assert f"rank {rank}/4 all-reduce ok" in proc.stdout


def test_record_traceback_is_the_root_cause(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "trace", ["--fail-replica", "worker-0", "--raise"], workers=1)
    proc = torchjob("run", "--grace-period", "5", str(path))
    assert proc.returncode == 1
    assert "RuntimeError: worker-0 could not load its shard" in proc.stdout  # streamed by the replica
    cause = proc.stderr[proc.stderr.index("Root cause"):]  # under it, the error and where, not the traceback again
    # the failure's message above it says the error: not a third time
    assert "RuntimeError: worker-0 could not load its shard" in proc.stderr.split("Root cause")[0]
    assert "RuntimeError" not in cause, cause
    assert "  raised at : " in cause and "traceback : in the job's output above" in cause, cause
    described = torchjob("describe", "trace", check=True).stdout
    assert "traceback (from torch's error file)" in described, described
    assert "RuntimeError: worker-0 could not load its shard" in described


ABORTS = """\
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} up", flush=True)
dist.barrier()
if dist.get_rank() == 0:  # as a C++ exception escaping a thread of torch's would
    sys.stderr.write("terminate called after throwing an instance of 'gloo::EnforceNotMet'\\n"
                     "  what():  [enforce fail at gloo/transport/tcp/address.cc:131] ...\\n")
    sys.stderr.flush()
    os.abort()
dist.barrier()
"""


def test_a_rank_torchrun_saw_abort_is_named_with_its_own_last_words(torchjob: Torchjob, tmp_path: Path) -> None:
    """docs/tutorials/failures.md's torchrun block: a rank's own last lines, not torchrun's report."""
    from tests.docs.blocks import tested

    (tmp_path / "aborts.py").write_text(ABORTS)
    path = write_job(tmp_path / "ab.yaml", job_data("ab", workers=0, restart_policy="Never", nproc_per_node="2",
                                                    command=["torchrun", str(tmp_path / "aborts.py")]))
    proc = torchjob("run", str(path))
    assert proc.returncode == 1
    block = proc.stderr[proc.stderr.index("Root cause"):]
    assert "  torchrun's root cause: rank 0 (local_rank: 0): Signal 6 (SIGABRT) received by PID" in block, block
    own = block[block.index("lines of the ranks' own output (before torchrun's report):"):]
    assert "terminate called after throwing an instance of 'gloo::EnforceNotMet'" in own, block
    assert "rank 0 up" in own and "ChildFailedError" not in own and "Failures:" not in own, block
    (shown,) = tested("tutorials/failures.md", "test_a_rank_torchrun_saw_abort_is_named_with_its_own_last_words")
    printed = re.sub(r"\d+", "N", block)
    for line in shown.splitlines():  # the page's lines are this run's (numbers aside; "..." elides)
        if "..." not in line:
            assert re.sub(r"\d+", "N", line) in printed, (line, block)


SEED_001_LIKE = """
apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: cm-script
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: master
              image: pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
              command: [python, /workspace/ddp_step.py]
              env:
                - {name: PYTHONUNBUFFERED, value: "1"}
              volumeMounts:
                - {name: training-script, mountPath: /workspace}
          volumes:
            - name: training-script
              configMap: {name: pytorch-demo-script}
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: worker
              image: pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
              command: [python, /workspace/ddp_step.py]
              volumeMounts:
                - {name: training-script, mountPath: /workspace}
          volumes:
            - name: training-script
              configMap: {name: pytorch-demo-script}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting at /workspace needs root (or user namespaces)")
def test_configmap_mounted_script_runs_unchanged(torchjob: Torchjob, tmp_path: Path) -> None:
    existed = Path("/workspace").exists()
    path = tmp_path / "cm.yaml"
    path.write_text(SEED_001_LIKE)
    missing = torchjob("run", str(path))
    assert missing.returncode == 2 and "--configmap pytorch-demo-script=" in missing.stderr
    proc = torchjob("run", "--configmap", f"pytorch-demo-script={PROGRAMS / 'ddp_step.py'}", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 6") == 3
    assert Path("/workspace").exists() == existed  # the mount point it made is gone again


def test_submit_list_logs_suspend_resume_delete(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "bg", ["--sleep", "120"], workers=1)
    sub = torchjob("submit", "--grace-period", "5", str(path), check=True)
    assert "torchjob logs bg -f" in sub.stdout
    torchjob.wait_for("bg", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    uid = uid_of(torchjob, "bg")
    torchjob.wait_for("bg", lambda d: "all-reduce ok" in torchjob("logs", "bg").stdout)
    assert "bg" in torchjob("list", check=True).stdout
    assert "[worker-0] rank 1/2 all-reduce ok" in torchjob("logs", "bg").stdout
    assert "rank 0/2" in torchjob("logs", "bg", "--replica", "master-0").stdout

    torchjob("suspend", "bg", check=True)
    torchjob.wait_for("bg", lambda d: state_of(d) == "Suspended" and not job_processes(uid))
    torchjob("resume", "bg", check=True)
    desc = torchjob.wait_for("bg", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 4)
    assert {a["attempt"] for a in desc["attempts"]} == {0, 1}

    torchjob("delete", "bg", check=True)
    assert job_processes(uid) == []
    gone = torchjob("describe", "bg")
    assert gone.returncode == 2 and "no job named 'bg'" in gone.stderr


def test_gpu_request_beyond_the_machine_is_refused_before_start(torchjob: Torchjob, tmp_path: Path) -> None:
    data = job_data("gpus", workers=1, command=STEP)
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    path = write_job(tmp_path / "gpu.yaml", data)
    torchjob.env["CUDA_VISIBLE_DEVICES"] = "0"
    proc = torchjob("run", str(path))
    assert proc.returncode == 2
    assert "asks for 2 GPUs (master-0: 1, worker-0: 1) but this machine has 1" in proc.stderr
    assert torchjob("list", "-o", "json").stdout.strip() == "[]"
    torchjob.env["CUDA_VISIBLE_DEVICES"] = "0,1,2"
    render = torchjob("render", str(path), "-o", "json", check=True).stdout
    assert '"CUDA_VISIBLE_DEVICES": "0"' in render and '"CUDA_VISIBLE_DEVICES": "1"' in render


def test_bad_input_is_one_clear_message_and_starts_nothing(torchjob: Torchjob, tmp_path: Path) -> None:
    data = job_data("bad", workers=1, command=STEP)
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 2
    proc = torchjob("run", str(write_job(tmp_path / "bad.yaml", data)))
    assert proc.returncode == 2
    assert "unknown field 'replica'" in proc.stderr and ".yaml:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert torchjob("list", "-o", "json").stdout.strip() == "[]"
    missing = torchjob("run", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_two_local_jobs_get_ports_of_their_own(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "ports", [], workers=1)
    ports = set()
    for _ in range(2):
        out = torchjob("render", str(path), "-o", "json", check=True).stdout
        ports.add(next(line for line in out.splitlines() if '"MASTER_PORT"' in line))
    assert len(ports) == 2
    pinned = torchjob("render", "--document-ports", str(path), "-o", "json", check=True).stdout
    assert '"MASTER_PORT": "23456"' in pinned


def test_clean_pod_policy_all_and_ttl(torchjob: Torchjob, tmp_path: Path) -> None:
    path = ddp_job(tmp_path, "clean", [], workers=1, run_policy={"cleanPodPolicy": "All"})
    assert torchjob("run", str(path)).returncode == 0
    desc = torchjob.describe("clean")
    assert all(not Path(a["log"]).exists() for a in desc["attempts"]), desc["attempts"]
    assert "removed" in torchjob("logs", "clean", "--replica", "worker-0").stderr
    path = ddp_job(tmp_path, "ttl", [], workers=1, run_policy={"ttlSecondsAfterFinished": 0})
    assert torchjob("run", str(path)).returncode == 0
    assert torchjob("describe", "ttl").returncode == 2



def test_container_without_command_is_refused_locally(torchjob: Torchjob, tmp_path: Path) -> None:
    # Valid on a cluster (the image's entrypoint runs), but there is no image locally.
    data = job_data("noentry", workers=1, command=STEP)
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        c = spec["template"]["spec"]["containers"][0]
        del c["command"]
        c["args"] = ["--backend", "nccl"]
        c["image"] = "example/trainer:1"
    path = write_job(tmp_path / "noentry.yaml", data)
    assert torchjob("validate", str(path)).returncode == 0
    proc = torchjob("run", str(path))
    assert proc.returncode == 2
    assert "container 'pytorch' has no command" in proc.stderr and "example/trainer:1" in proc.stderr
    assert "Traceback" not in proc.stderr
