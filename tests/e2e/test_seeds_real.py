"""The seed documents, each through `torchjob run --kube` on the real node: their pods really
start, find their master by DNS and train together. The images they name are local stand-ins
carrying code that does what theirs does (tests/e2e/images.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from tests.e2e.conftest import pods, torchjob, wait_for
from tests.kube.admitters import run_vc_scheduler

pytestmark = pytest.mark.kube
SEEDS = Path(__file__).resolve().parents[1] / "dialects" / "seeds"


@pytest.fixture(scope="module")
def volcano(node_kubeconfig: str, node: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Volcano's real scheduler (hack/volcano/build.sh) for the Volcano seeds: it admits their
    PodGroups and binds their pods to the real node."""
    with run_vc_scheduler(node_kubeconfig, node, tmp_path_factory.mktemp("volcano")):
        yield


def logs_of(kubeconfig: str, job: str, ns: str) -> str:
    out = torchjob(kubeconfig, "logs", job, "-n", ns)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_t9k_seed_runs_four_replicas_with_the_first_as_master(node_kubeconfig: str, ns: str) -> None:
    run = torchjob(node_kubeconfig, "run", str(SEEDS / "003-t9k.yaml"), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    assert logs_of(node_kubeconfig, "pytorch-example", ns).count("all-reduce ok: 10") == 4


def test_kubeflow_seed_runs_its_mnist_command(node_kubeconfig: str, ns: str, tmp_path: Path) -> None:
    # `imagePullPolicy: Always` asks the kubelet to pull, and nothing can be pulled here: the only
    # change to the document (a real cluster pulls Katib's image).
    doc = (SEEDS / "004-kubeflow-simple.yaml").read_text().replace("imagePullPolicy: Always",
                                                                   "imagePullPolicy: IfNotPresent")
    (tmp_path / "kf.yaml").write_text(doc)
    run = torchjob(node_kubeconfig, "run", str(tmp_path / "kf.yaml"), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    logs = logs_of(node_kubeconfig, "pytorch-simple-001", ns)
    assert "world size 3, master pytorch-simple-001-master-0.pytorch-simple-001:23456" in logs
    assert logs.count("epoch 1/1 loss") == 3, logs


def test_the_nccl_seed_on_a_node_without_gpus_says_why_it_waits(node_kubeconfig: str, node: Client,
                                                                 ns: str) -> None:
    # Seed 002 asks one nvidia.com/gpu per replica (NCCL); this node has none: the job must not
    # start, and the user must see why without reading the scheduler's mind.
    sub = torchjob(node_kubeconfig, "submit", str(SEEDS / "002-kubeflow-nccl.yaml"), "-n", ns)
    assert sub.returncode == 0, sub.stderr
    wait_for("its pods", lambda: len(pods(node, "pytorch-dist-mnist-nccl", ns)) == 2)

    def described() -> str | None:
        out = torchjob(node_kubeconfig, "describe", "pytorch-dist-mnist-nccl", "-n", ns).stdout
        return out if "Insufficient nvidia.com/gpu" in out else None

    assert "Unschedulable: 0/1 nodes are available" in wait_for("the reason in describe", described, timeout=60)


def test_volcano_seed_runs_its_image_entrypoint(node_kubeconfig: str, ns: str, volcano: None) -> None:
    # Seed 000: no command, the code is the image's (its entrypoint); Volcano gangs the 3 pods.
    run = torchjob(node_kubeconfig, "run", str(SEEDS / "000-volcano.yaml"), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    # The master ends after a barrier of all 3 ranks; with CompleteJob on its success the workers
    # may be stopped before `logs` reads them, so the master's line is the proof.
    logs = logs_of(node_kubeconfig, "pytorch-job", ns)
    assert "[master-0] rank 0/3 send/recv ok via pytorch-job-master-0.pytorch-job:23456" in logs, logs


def test_volcano_seed_with_its_script_in_a_configmap(node_kubeconfig: str, node: Client, ns: str,
                                                     volcano: None, tmp_path: Path) -> None:
    # Seed 001: the script comes from the ConfigMap `pytorch-demo-script` mounted at /workspace.
    # Each of its 3 replicas requests 1 CPU and this node has 2: the one change halves the
    # requests (the gang could never fit here, and Volcano would rightly keep it Pending).
    script = (Path(__file__).resolve().parents[1] / "programs" / "ddp_step.py").read_text()
    node.create(ConfigMap(metadata=ObjectMeta(name="pytorch-demo-script", namespace=ns),
                          data={"pytorch-demo.py": script}))
    doc = (SEEDS / "001-volcano-cm.yaml").read_text().replace('cpu: "1"', 'cpu: "500m"')
    (tmp_path / "vc.yaml").write_text(doc)
    run = torchjob(node_kubeconfig, "run", str(tmp_path / "vc.yaml"), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    # An all-reduce summing to 6 needs all 3 ranks; the workers may be stopped (CompleteJob) before
    # `logs` reads them.
    assert "[master-0] rank 0/3 all-reduce ok: 6" in logs_of(node_kubeconfig, "pytorch-job-with-configmap", ns)
