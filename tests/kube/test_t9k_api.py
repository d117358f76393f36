"""torchjob serving T9k's `batch.tensorstack.dev/v1beta1` PyTorchTrainingJob, driven by kubectl as a
T9k user drives it (`apply -f` of the seed's document, `get pytorchtrainingjobs`): a real API server
with the CRD `torchjob install --t9k-api` makes, the operator as a process; the test plays the
kubelet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, set_pod, wait_established
from tests.kube.test_kubeflow_api import kubectl
from torchjob.kube.machinery.client import T9kPyTorchTrainingJobRes
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.served import t9k_objects

SEED = Path(__file__).resolve().parents[1] / "dialects" / "seeds" / "003-t9k.yaml"


@pytest.fixture
def t9k_operator(kube: Client, kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:
    apply([t9k_objects.crd()], kubeconfig)
    wait_established(kube, t9k_objects.CRD_NAME)
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect",))
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


def status(kube: Client, name: str, namespace: str) -> dict[str, Any]:
    return dict(kube.get(T9kPyTorchTrainingJobRes, name, namespace=namespace).status or {})


def wait_phase(kube: Client, name: str, namespace: str, phase: str, timeout: float = 60,
               counted: dict[str, int] | None = None) -> dict[str, Any]:
    """The status once its phase is `phase` and, with `counted`, its aggregate says so too (the phase can
    be written a round before the operator has seen every pod)."""
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        last = status(kube, name, namespace)
        if last.get("phase") == phase and all((last.get("aggregate") or {}).get(k) == v
                                              for k, v in (counted or {}).items()):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{name} never {phase}: {last}")


def pods(kube: Client, name: str, namespace: str, n: int, timeout: float = 120) -> list[Any]:
    """The job's n pods (not being deleted), once there: the bound is wide because the suite's shared API
    server may be slow under the suite's load (0 of 4 pods after 30 s in one CI run; alone: 2 s)."""
    end = time.monotonic() + timeout
    found: list[Any] = []
    while time.monotonic() < end:
        found = [p for p in kube.list(Pod, namespace=namespace, labels={LABEL_JOB: name})
                 if not p.metadata.deletionTimestamp]
        if len(found) == n:
            return found
        time.sleep(0.1)
    raise AssertionError(f"expected {n} pods of {name}, got {len(found)}")


def test_kubectl_apply_of_the_seed_runs_with_t9ks_status_and_columns(
        kube: Client, kubeconfig: str, namespace: str, t9k_operator: Operator, tmp_path: Path) -> None:
    data = yaml.safe_load(SEED.read_text())
    data["metadata"]["namespace"] = namespace
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    out = kubectl(kubeconfig, "apply", "-f", str(tmp_path / "job.yaml"))
    assert "pytorchtrainingjob.batch.tensorstack.dev/pytorch-example created" in out
    found = pods(kube, "pytorch-example", namespace, 4)
    uid = kube.get(T9kPyTorchTrainingJobRes, "pytorch-example", namespace=namespace).metadata.uid
    assert {(o.kind, o.uid) for p in found for o in p.metadata.ownerReferences} == {("PyTorchTrainingJob", uid)}
    wait_phase(kube, "pytorch-example", namespace, "Pending", counted={"pending": 4})
    for p in found:
        set_pod(kube, p, "Running")
    running = wait_phase(kube, "pytorch-example", namespace, "Running", counted={"running": 4})
    assert running["aggregate"] == {"creating": 0, "pending": 0, "running": 4, "succeeded": 0, "failed": 0,
                                    "unknown": 0, "deleted": 0}
    assert {t["type"] for t in running["tasks"]} == {"master", "worker"} and running["backoffCount"] == 0
    lines = kubectl(kubeconfig, "get", "pytorchtrainingjobs", "-n", namespace).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "AGE"] and lines[1].split()[:2] == ["pytorch-example", "Running"]
    for p in found:
        set_pod(kube, p, "Succeeded", 0)
    done = wait_phase(kube, "pytorch-example", namespace, "Succeeded")
    succeeded = next(c for c in done["conditions"] if c["type"] == "Succeeded")
    assert succeeded["status"] == "True" and succeeded["lastTransitionTime"]


def test_a_document_the_dialect_refuses_fails_naming_the_field(
        kube: Client, kubeconfig: str, namespace: str, t9k_operator: Operator, tmp_path: Path) -> None:
    data = yaml.safe_load(SEED.read_text())
    data["metadata"] = {"name": "bad", "namespace": namespace}
    data["spec"]["replicaSpecs"][0]["replicas"] = "four"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    kubectl(kubeconfig, "apply", "-f", str(tmp_path / "job.yaml"))
    failed = wait_phase(kube, "bad", namespace, "Failed")
    assert "replicas" in failed["conditions"][-1]["message"], failed
    assert list(kube.list(Pod, namespace=namespace)) == []


def test_the_docs_pytorchtrainingjob_runs(kube: Client, kubeconfig: str, namespace: str, t9k_operator: Operator,
                                          tmp_path: Path) -> None:
    from tests.docs.blocks import tested

    (text,) = tested("tutorials/coming-from/t9k-cluster.md", "test_the_docs_pytorchtrainingjob_runs")
    assert yaml.safe_load(text) == yaml.safe_load(SEED.read_text())  # the seed's document, unchanged
    (tmp_path / "job.yaml").write_text(text)
    kubectl(kubeconfig, "apply", "-n", namespace, "-f", str(tmp_path / "job.yaml"))
    for p in pods(kube, "pytorch-example", namespace, 4):
        set_pod(kube, p, "Running")
    wait_phase(kube, "pytorch-example", namespace, "Running")
