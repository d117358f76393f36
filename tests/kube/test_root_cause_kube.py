"""A job that fails on a cluster says what its script said, as it does locally: the failing
container's termination message (FallbackToLogsOnError: the end of its log, as the kubelet makes it)
ends the status's root cause, `run --kube` prints the FAILED block with its last lines, `describe
--kube` shows it, and the attempts table keeps each replica (the peers' pods stopped by the job's end
included). A real API server and the operator; the test plays the kubelet."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tests.jobs import job_data
from tests.kube.conftest import Operator, job_status, now_iso, set_pod, wait_job
from tests.kube.test_cli_kube import run_in_background, torchjob
from tests.kube.test_operator import wait_pods

pytestmark = pytest.mark.kube
# a script's own argument check, as examples/ddp/train.py has one
SCRIPT = ("import argparse\np = argparse.ArgumentParser(prog='train.py')\n"
          "p.add_argument('--epochs', type=int, default=1)\np.parse_args()\n")
ERROR = "train.py: error: argument --epochs: invalid int value: 'five'"


def kubelet_message(stderr: str) -> str:
    """What the kubelet makes a failed container's termination message with FallbackToLogsOnError and
    an empty termination log: the end of its log, at most 80 lines and 2048 bytes."""
    return "".join(stderr.splitlines(keepends=True)[-80:])[-2048:]


def test_run_and_describe_say_the_scripts_own_error(kubeconfig: str, kube: Client, namespace: str,
                                                    operator: Operator, tmp_path: Path) -> None:
    said = subprocess.run([sys.executable, "-c", SCRIPT, "--epochs", "five"], capture_output=True, text=True,
                          timeout=30)
    assert said.returncode == 2 and ERROR in said.stderr
    path = tmp_path / "job.yaml"
    data = job_data("rc", workers=1, command=["python", "train.py", "--epochs", "five"])
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    path.write_text(json.dumps(data))
    proc = run_in_background(kubeconfig, path, namespace)
    try:
        pods = wait_pods(kube, "rc", namespace, 2)
        for p in pods:
            assert p.spec.containers[0].terminationMessagePolicy == "FallbackToLogsOnError"
            set_pod(kube, p, "Running")
        wait_job(kube, "rc", namespace, lambda s: s.get("state") == "Running")
        worker = next(p for p in pods if p.metadata.name == "rc-worker-0")
        c = worker.spec.containers[0]
        terminated = {"exitCode": 2, "finishedAt": now_iso(), "reason": "Error",
                      "message": kubelet_message(said.stderr)}
        kube.patch(Pod.Status, worker.metadata.name, {"status": {"phase": "Failed", "containerStatuses": [
            {"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": terminated}}]}}, namespace=namespace, patch_type=PatchType.MERGE)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    # the status's root cause ends with the script's line, and so does the FAILED block's message
    failure = job_status(kube, "rc", namespace)["failure"]
    assert failure["message"] == f"worker-0 failed with exit code 2 (restartPolicy Never): {ERROR}"
    block = err[err.index("rc FAILED: ReplicaFailed"):]
    assert err.count("rc FAILED") == 1, err  # the block once
    assert "  replica   : worker-0 (attempt 0, node rank 1, pod rc-worker-0)" in block
    assert "  exit code : 2" in block
    # its log cannot be read here (no node): its termination message's lines are quoted
    assert f"  last 2 lines of its output:\n    usage: train.py [-h] [--epochs EPOCHS]\n    {ERROR}" in block
    described = torchjob(kubeconfig, "describe", "rc", "-n", namespace)
    assert described.returncode == 0, described.stderr
    assert f"    {ERROR}" in described.stdout and "rc FAILED: ReplicaFailed" in described.stdout
    # each replica in the attempts table: the master's pod, stopped by the job's end, is gone
    rows = {line.split()[0]: line for line in described.stdout.split("Attempts:")[1].split("Conditions:")[0]
            .splitlines()[2:] if line.strip()}
    assert sorted(rows) == ["master-0", "worker-0"], described.stdout
    assert rows["worker-0"].split()[1] == "0" and " 2 " in rows["worker-0"] and "Failed" in rows["worker-0"]
    assert "Running" not in rows["master-0"], rows


def test_ctrl_c_says_the_job_runs_on_and_an_image_that_cannot_be_pulled_ends_the_wait(
        kubeconfig: str, kube: Client, namespace: str, operator: Operator, tmp_path: Path) -> None:
    import signal

    from torchjob.api.errors import UserError
    from torchjob.kube.clientside.kube_runtime import follow
    from torchjob.kube.machinery.client import TorchJobRes

    path = tmp_path / "job.yaml"
    data = job_data("pull", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/no-such-image:1"
    path.write_text(json.dumps(data))
    proc = run_in_background(kubeconfig, path, namespace)
    try:
        pods = wait_pods(kube, "pull", namespace, 2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert f"error: interrupted: job pull still runs on the cluster (in {namespace})" in err, err
    assert "delete it: torchjob delete --kube pull" in err and "Traceback" not in err
    assert kube.get(TorchJobRes, "pull", namespace=namespace) is not None
    # the kubelet cannot pull the image: following the job ends after the bound, naming it and the fix
    why = 'failed to pull and unpack image "docker.io/example/no-such-image:1": not found'
    for p in pods:
        c = p.spec.containers[0]
        kube.patch(Pod.Status, p.metadata.name, {"status": {"phase": "Pending", "containerStatuses": [
            {"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "ErrImagePull", "message": why}}}]}},
            namespace=namespace, patch_type=PatchType.MERGE)
    said: list[str] = []
    with pytest.raises(UserError) as refused:
        follow(kube, "pull", namespace, said.append, poll_s=0.1, pull_bound_s=1.0)
    assert refused.value.message.startswith(
        f"job pull: master-0's image example/no-such-image:1 (container pytorch) cannot be pulled "
        f"(ErrImagePull: {why})")
    assert "scripts/dev-cluster.sh" in (refused.value.fix or "") and "torchjob delete --kube pull" in (
        refused.value.fix or "")
    assert "job pull created with 2 replicas" in said  # the events said on the way


def test_the_attempts_table_after_a_suspend_and_a_resume(kubeconfig: str, kube: Client, namespace: str,
                                                         operator: Operator) -> None:
    from tests.kube.test_operator import create

    create(kube, job_data("sr", workers=1), namespace)
    for p in wait_pods(kube, "sr", namespace, 2):
        set_pod(kube, p, "Running")
    wait_job(kube, "sr", namespace, lambda s: s.get("state") == "Running")
    assert torchjob(kubeconfig, "suspend", "sr", "-n", namespace).returncode == 0
    wait_job(kube, "sr", namespace, lambda s: s.get("state") == "Suspended")
    wait_pods(kube, "sr", namespace, 0)
    suspended = torchjob(kubeconfig, "describe", "sr", "-n", namespace).stdout
    # each replica's next attempt, which the resume starts (its pods are gone, not missing)
    for replica in ("master-0", "worker-0"):
        assert f"  {replica:<12}1        -" in suspended and "Suspended (starts when resumed)" in suspended, suspended
    assert torchjob(kubeconfig, "resume", "sr", "-n", namespace).returncode == 0
    pods = wait_pods(kube, "sr", namespace, 2)
    assert sorted(p.metadata.annotations["torchjob.dev/attempt"] for p in pods) == ["1", "1"]
    resumed = torchjob(kubeconfig, "describe", "sr", "-n", namespace).stdout
    assert "  master-0    1        sr-master-0" in resumed and "  worker-0    1        sr-worker-0" in resumed, resumed
    logs = torchjob(kubeconfig, "logs", "sr", "--replica", "worker-0", "--attempt", "0", "-n", namespace)
    assert logs.returncode == 2 and logs.stderr.startswith(
        "error: worker-0 has no attempt 0 on the cluster: its pod is gone, and its logs with it"), logs.stderr
    assert "its attempts there: 1 (torchjob logs --kube sr --replica worker-0 --attempt 1)" in logs.stderr


def test_a_peer_stopped_with_the_job_keeps_the_end_of_its_log(kubeconfig: str, kube: Client, namespace: str,
                                                             operator: Operator) -> None:
    """The job's end deletes the master's pod, and its log with it: the end of its log that the kubelet
    kept in its termination message (FallbackToLogsOnError) is kept in the job's status, and `logs
    --kube --replica master-0 --attempt 0` shows it, saying it is only that. The test plays the kubelet:
    a finalizer of its own holds the deleted pod until its container's last state is written."""
    from tests.kube.test_operator import create

    hold = "tests.torchjob.dev/kubelet"
    create(kube, job_data("kt", workers=1), namespace)
    pods = {p.metadata.name: p for p in wait_pods(kube, "kt", namespace, 2)}
    kube.patch(Pod, "kt-master-0", {"metadata": {"finalizers": [hold]}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    for p in pods.values():
        set_pod(kube, p, "Running")
    wait_job(kube, "kt", namespace, lambda s: s.get("state") == "Running")
    set_pod(kube, pods["kt-worker-0"], "Failed", exit_code=3)
    wait_job(kube, "kt", namespace, lambda s: s.get("state") == "Failed")
    deadline = time.monotonic() + 30
    while kube.get(Pod, "kt-master-0", namespace=namespace).metadata.deletionTimestamp is None:
        assert time.monotonic() < deadline, "the job's end did not delete the master's pod"
        time.sleep(0.1)
    said = "".join(f"epoch {i}: loss 0.{9 - i}\n" for i in range(3)) + "master-0: stopping on SIGTERM\n"
    c = pods["kt-master-0"].spec.containers[0]
    kube.patch(Pod.Status, "kt-master-0", {"status": {"phase": "Failed", "containerStatuses": [
        {"name": c.name, "image": c.image or "x", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": 143, "finishedAt": now_iso(), "reason": "Error", "message": said}}}]}},
        namespace=namespace, patch_type=PatchType.MERGE)
    kube.patch(Pod, "kt-master-0", {"metadata": {"finalizers": None}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    status = wait_job(kube, "kt", namespace, lambda s: any(t["replica"] == "master-0" for t in s.get("keptTails", [])))
    assert {"replica": "master-0", "attempt": 0, "exitCode": 143, "tail": said} in status["keptTails"]
    logs = torchjob(kubeconfig, "logs", "kt", "--replica", "master-0", "--attempt", "0", "-n", namespace)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [
        "[master-0] (attempt 0: its pod is gone; the end of its log as the kubelet kept it, exit code 143, "
        "not the whole log)", *(f"[master-0] {line}" for line in said.splitlines())], logs.stdout
    # without --attempt, the replica's newest kept one (no pod of it is left)
    assert torchjob(kubeconfig, "logs", "kt", "--replica", "master-0", "-n", namespace).stdout == logs.stdout
