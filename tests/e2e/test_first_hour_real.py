"""A failure on the real node says what the script said, as it does locally: `run --kube` streams the
replicas' lines tagged with their replica, and its FAILED block, the status's root cause, `describe
--kube` and the failing replica's logs carry the script's own error line (the pods' termination
message falls back to the end of the log: the script has no torch error file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.e2e.conftest import pods, status_of, torchjob, wait_for
from tests.e2e.test_real_pods import job_file
from tests.jobs import job_data

pytestmark = pytest.mark.kube
ERROR = "train.py: error: argument --epochs: invalid int value: 'five'"


def test_a_scripts_own_error_is_streamed_and_is_the_root_cause(node_kubeconfig: str, node: Client, ns: str,
                                                              tmp_path: Path) -> None:
    data = job_data("badargs", workers=1, restart_policy="Never",
                    command=("python", "/opt/tests/examples/ddp/train.py", "--epochs", "five"))
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns, timeout=180)
    assert run.returncode == 1, run.stdout + run.stderr
    # the master fails at once (its workers wait for its port): its lines as they came, tagged
    assert f"[master-0] {ERROR}" in run.stdout.splitlines(), run.stdout
    block = run.stderr[run.stderr.index("badargs FAILED: ReplicaFailed"):]
    assert "  replica   : master-0 (attempt 0, node rank 0, pod badargs-master-0)" in block, run.stderr
    assert f"    {ERROR}" in block.splitlines(), block
    failure = status_of(node, "badargs", ns)["failure"]
    assert failure["message"] == f"master-0 failed with exit code 2 (restartPolicy Never): {ERROR}"
    described = torchjob(node_kubeconfig, "describe", "badargs", "-n", ns)
    assert f"    {ERROR}" in described.stdout.splitlines(), described.stdout
    logs = torchjob(node_kubeconfig, "logs", "badargs", "--replica", "master-0", "--attempt", "0", "-n", ns)
    assert f"[master-0] {ERROR}" in logs.stdout.splitlines(), logs.stdout + logs.stderr


def test_example_images_give_the_node_the_docs_image_names(node_kubeconfig: str, node: Client, ns: str,
                                                           tmp_path: Path) -> None:
    """`scripts/dev-cluster.sh example-images` (docs/how-to/dev-cluster.md): busybox:1.36, the operator's
    default wait-for-master init image, runs as a stand-in with sh and `nc -z` (nothing is pulled)."""
    from tests.e2e.conftest import devcluster

    loaded = devcluster("example-images", timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    data = job_data("busy", workers=1, restart_policy="Never", command=("python", "/opt/tests/ddp_step.py"))
    data["spec"]["waitForMaster"] = {"image": "busybox:1.36"}
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    worker = node.get(Pod, "busy-worker-0", namespace=ns)
    assert [c.image for c in worker.spec.initContainers] == ["busybox:1.36"]


MASTER = """import os, signal, socket, sys, time
def stop(*_):
    print('master-0: stopping on SIGTERM', flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)  # PID 1 has no default handler: it would wait for the grace's SIGKILL
print('master-0: epoch 1 of 9', flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('', int(os.environ['MASTER_PORT'])))
s.listen()
print('master-0: waiting for its worker', flush=True)
time.sleep(600)
"""
WORKER = "print('worker-0: starting', flush=True)\nraise ValueError('the script says no')\n"


def test_a_traceback_is_streamed_once_and_the_peer_stopped_keeps_its_last_lines(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """The worker's traceback, streamed by `run --kube`, is not quoted again in full by the root cause
    (its error and where it was raised, and where to read it again); the master, stopped by the job's
    end (SIGTERM: 143), has its pod deleted, and `logs --kube --replica master-0 --attempt 0` still
    shows the end of its log, as the kubelet kept it in the pod's termination message."""
    data = job_data("tb", workers=1, restart_policy="Never", command=("python", "-c", WORKER))
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"] = [
        "python", "-c", MASTER]
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns, timeout=180)
    assert run.returncode == 1, run.stdout + run.stderr
    said = run.stdout + run.stderr
    assert "[worker-0] Traceback (most recent call last):" in run.stdout.splitlines(), said
    assert said.count("Traceback (most recent call last)") == 1, said  # streamed; the block says it in brief
    block = run.stderr[run.stderr.index("tb FAILED: ReplicaFailed"):]
    assert "  traceback : in the job's output above (`torchjob logs --kube tb --replica worker-0 --attempt 0` " \
           "shows it again)" in block.splitlines(), block
    assert "ValueError: the script says no" in block, block
    # the worker's failed pod stays (its log is there); the master's, stopped, goes
    wait_for("the master's pod gone", lambda: all(p.metadata.name != "tb-master-0" for p in pods(node, "tb", ns))
             or None, timeout=60)
    logs = torchjob(node_kubeconfig, "logs", "tb", "--replica", "master-0", "--attempt", "0", "-n", ns)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [
        "[master-0] (attempt 0: its pod is gone; the end of its log as the kubelet kept it, exit code 143, "
        "not the whole log)", "[master-0] master-0: epoch 1 of 9", "[master-0] master-0: waiting for its worker",
        "[master-0] master-0: stopping on SIGTERM"], logs.stdout
