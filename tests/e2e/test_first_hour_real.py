"""A failure on the real node says what the script said, as it does locally: `run --kube` streams the
replicas' lines tagged with their replica, and its FAILED block, the status's root cause, `describe
--kube` and the failing replica's logs carry the script's own error line (the pods' termination
message falls back to the end of the log: the script has no torch error file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.e2e.conftest import status_of, torchjob
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
