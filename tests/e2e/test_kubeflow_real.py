"""Kubeflow's clients, code unchanged, against torchjob serving the PyTorchJob API on the real node:
`kubectl` and the Kubeflow SDK create seed 004 as the seed's own workflow does, its pods run real
torch, and deleting the job takes its pods and Service with it (kube-controller-manager's garbage
collector follows their owner reference to the PyTorchJob)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Service

from tests.e2e.conftest import pods, status_of, torchjob, wait_for
from tests.e2e.images import TESTS_IMAGE
from tests.kube.test_kubeflow_api import kubectl, state
from tests.kube.test_kubeflow_sdk import client, sdk_job

SEED = Path(__file__).resolve().parents[1] / "dialects" / "seeds" / "004-kubeflow-simple.yaml"


def seed(name: str, ns: str) -> dict[str, Any]:
    # `imagePullPolicy: Always` asks the kubelet to pull, and nothing can be pulled here: the only
    # change to the document (a real cluster pulls Katib's image).
    data: dict[str, Any] = yaml.safe_load(SEED.read_text().replace("imagePullPolicy: Always",
                                                                    "imagePullPolicy: IfNotPresent"))
    data["metadata"] = {"name": name, "namespace": ns}
    return data


def gone(node: Client, name: str, ns: str) -> bool:
    try:
        node.get(Service, name, namespace=ns)
    except ApiError:
        return not pods(node, name, ns)
    return False


def test_kubectl_runs_the_seed_and_delete_takes_its_pods(node_kubeconfig: str, node: Client, ns: str,
                                                         tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(seed("kf-mnist", ns)))
    assert "created" in kubectl(node_kubeconfig, "apply", "-f", str(tmp_path / "job.yaml"))
    wait_for("Succeeded in `kubectl get pytorchjobs`",
             lambda: state(node_kubeconfig, "kf-mnist", ns) == "Succeeded", timeout=240, every=1)
    logs = kubectl(node_kubeconfig, "logs", "kf-mnist-master-0", "-n", ns)
    assert "world size 3, master kf-mnist-master-0.kf-mnist:23456" in logs and "epoch 1/1 loss" in logs
    assert "Succeeded" in kubectl(node_kubeconfig, "describe", "pytorchjob", "kf-mnist", "-n", ns)
    kubectl(node_kubeconfig, "delete", "pytorchjob", "kf-mnist", "-n", ns)
    wait_for("its pods and Service collected", lambda: gone(node, "kf-mnist", ns), timeout=120)


def test_the_kubeflow_sdk_creates_waits_reads_logs_and_deletes(node_kubeconfig: str, node: Client,
                                                                ns: str) -> None:
    training = pytest.importorskip("kubeflow.training")
    del training
    sdk = client(node_kubeconfig, ns)
    data = seed("sdk-mnist", ns)
    data["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}  # the SDK's model requires one
    sdk.create_job(job=sdk_job(data))
    sdk.wait_for_job_conditions("sdk-mnist", expected_conditions={"Running", "Succeeded"}, wait_timeout=240,
                                polling_interval=1)
    done = sdk.wait_for_job_conditions("sdk-mnist", wait_timeout=240, polling_interval=1)
    assert sdk.is_job_succeeded(job=done)
    assert sdk.get_job_pod_names("sdk-mnist", is_master=True) == ["sdk-mnist-master-0"]
    logs, _ = sdk.get_job_logs("sdk-mnist")
    assert "epoch 1/1 loss" in logs["sdk-mnist-master-0"]
    sdk.delete_job("sdk-mnist")
    wait_for("its pods and Service collected", lambda: gone(node, "sdk-mnist", ns), timeout=120)


# Kubeflow Trainer v2: a TrainJob naming the upstream torch-distributed runtime (known without a
# runtime document), run through a TorchJob with Trainer's PET_* contract.
TRAINJOB = f"""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: tj-v2
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    image: {TESTS_IMAGE}
    numNodes: 2
    numProcPerNode: 2
    command: [torchrun, /opt/tests/ddp_step.py]
"""


def test_a_trainjob_runs_as_real_pods_through_run_kube(node_kubeconfig: str, node: Client, ns: str,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "trainjob.yaml"
    path.write_text(TRAINJOB)
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    assert status_of(node, "tj-v2", ns)["state"] == "Succeeded"
    logs = torchjob(node_kubeconfig, "logs", "tj-v2", "-n", ns).stdout
    assert logs.count("all-reduce ok: 10") == 4, logs  # 2 nodes x 2 processes: ranks 0..3, +1 each, sum 10
