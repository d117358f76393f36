"""torchjob serving Kubeflow's `kubeflow.org/v1` PyTorchJob API, driven by kubectl as a user of the
training-operator drives it (`apply -f`, `get pytorchjobs`, `describe`, `delete`). A real API server
and the operator as a process; the test plays the kubelet (real pods run in tests/e2e)."""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import Client

from tests.jobs import job_data
from tests.kube.conftest import REPO, Operator, set_pod
from tests.kube.test_kubeflow_crd import PyTorchJobRes, pytorchjobs, seed  # noqa: F401 (the fixture)
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels import kubeflow as kfl

KUBECTL = Path(subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "bin"], capture_output=True,
                              text=True, check=True).stdout.strip()) / "kubectl"


def kubectl(kubeconfig: str, *args: str, check: bool = True) -> str:
    out = subprocess.run([str(KUBECTL), "--kubeconfig", kubeconfig, *args], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    if check:
        assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


@pytest.fixture
def kubeflow_operator(pytorchjobs: Client, kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:  # noqa: F811
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect", "--kubeflow-api", "on"))
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


def state(kubeconfig: str, name: str, namespace: str) -> str:
    """The State column of `kubectl get pytorchjobs`."""
    lines = kubectl(kubeconfig, "get", "pytorchjobs", "-n", namespace).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "AGE"], lines
    row = next((line.split() for line in lines[1:] if line.split()[0] == name), [name, "", ""])
    return row[1] if len(row) == 3 else ""


def wait_state(kubeconfig: str, name: str, namespace: str, want: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if state(kubeconfig, name, namespace) == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never {want}: {kubectl(kubeconfig, 'get', 'pytorchjobs', '-n', namespace)}")


def test_kubectl_apply_get_describe_and_delete_a_seed_pytorchjob(
        kube: Client, kubeconfig: str, namespace: str, kubeflow_operator: Operator, tmp_path: Path) -> None:
    data = seed("mnist")
    data["metadata"]["namespace"] = namespace
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    assert "pytorchjob.kubeflow.org/mnist created" in kubectl(kubeconfig, "apply", "-f", str(tmp_path / "job.yaml"))
    pods = {p.metadata.name: p for p in wait_pods(kube, "mnist", namespace, 3)}
    uid = kube.get(PyTorchJobRes, "mnist", namespace=namespace).metadata.uid
    master = pods["mnist-master-0"]
    # Kubeflow's labels (its tools select pods by them) and owner: the PyTorchJob itself.
    assert {k: v for k, v in master.metadata.labels.items() if k.startswith("training.kubeflow.org/")} == \
        kfl.pod_labels("mnist", "Master", 0, True)
    assert [(o.kind, o.uid) for o in master.metadata.ownerReferences] == [("PyTorchJob", uid)]
    env = {e.name: e.value for e in pods["mnist-worker-1"].spec.containers[0].env if e.value is not None}
    assert env["MASTER_ADDR"] == "mnist-master-0.mnist" and env["RANK"] == "2" and env["WORLD_SIZE"] == "3"
    wait_state(kubeconfig, "mnist", namespace, "Created")
    for p in pods.values():
        set_pod(kube, p, "Running")
    wait_state(kubeconfig, "mnist", namespace, "Running")
    set_pod(kube, master, "Succeeded", 0)
    wait_state(kubeconfig, "mnist", namespace, "Succeeded")
    status = kube.get(PyTorchJobRes, "mnist", namespace=namespace).status
    assert [c["reason"] for c in status["conditions"]] == ["PyTorchJobCreated", "PyTorchJobRunning",
                                                           "PyTorchJobSucceeded"]
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1 and status["completionTime"]
    described = kubectl(kubeconfig, "describe", "pytorchjob", "mnist", "-n", namespace)
    assert "Events:" in described and "Succeeded" in described and "torchjob-operator" in described
    assert 'pytorchjob.kubeflow.org "mnist" deleted' in kubectl(kubeconfig, "delete", "pytorchjob", "mnist",
                                                                 "-n", namespace)
    # Its pods and Service go with it: the garbage collector follows their owner reference (it runs
    # in kube-controller-manager, on the real-node cluster: tests/e2e deletes one there).
    assert all(o.uid == uid for p in pods_of(kube, "mnist", namespace) for o in p.metadata.ownerReferences)


def test_a_pytorchjob_managed_by_multikueue_is_left_alone(
        kube: Client, kubeconfig: str, namespace: str, kubeflow_operator: Operator) -> None:
    data = seed("elsewhere")
    data["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue"}
    kube.create(PyTorchJobRes.from_dict({**copy.deepcopy(data), "metadata": {"name": "elsewhere",
                                                                            "namespace": namespace}}))
    before = kubeflow_operator.reconciles()
    kube.create(PyTorchJobRes.from_dict({**seed("here"), "metadata": {"name": "here", "namespace": namespace}}))
    wait_pods(kube, "here", namespace, 3)  # the one torchjob manages is served...
    kubeflow_operator.wait_idle(before)
    assert pods_of(kube, "elsewhere", namespace) == []  # ...the one Kueue's MultiKueue manages is not
    assert not kube.get(PyTorchJobRes, "elsewhere", namespace=namespace).status


def test_an_operator_told_off_serves_no_pytorchjob(
        kube: Client, kubeconfig: str, namespace: str, pytorchjobs: Client, tmp_path: Path) -> None:  # noqa: F811
    op = Operator(kubeconfig, tmp_path / "operator.log", ("--no-leader-elect", "--kubeflow-api", "off"))
    op.start()
    try:
        before = op.reconciles()
        kube.create(PyTorchJobRes.from_dict({**seed("off"), "metadata": {"name": "off", "namespace": namespace}}))
        create(kube, job_data("on", workers=1), namespace)  # a TorchJob: served, so the operator looked
        wait_pods(kube, "on", namespace, 2)
        op.wait_idle(before)
        assert pods_of(kube, "off", namespace) == []
        assert "Kubeflow's PyTorchJob API: not served (--kubeflow-api=off)" in op.log.read_text()
    finally:
        op.stop()


def run_operator_once(kubeconfig: str, tmp_path: Path, *args: str) -> str:
    """The operator's log line on the Kubeflow API, with these flags."""
    op = Operator(kubeconfig, tmp_path / f"operator-{len(list(tmp_path.iterdir()))}.log", ("--no-leader-elect", *args))
    op.start()
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            line = next((ln for ln in op.log.read_text().splitlines() if "Kubeflow's PyTorchJob API" in ln), None)
            if line:
                return line
            time.sleep(0.1)
        raise AssertionError(op.log.read_text())
    finally:
        op.stop()


def test_auto_serves_the_api_when_its_crd_is_torchjobs(
        kubeconfig: str, pytorchjobs: Client, tmp_path: Path) -> None:  # noqa: F811
    assert "served (--kubeflow-api=auto)" in run_operator_once(kubeconfig, tmp_path)


def test_a_pytorchjob_named_like_a_torchjob_says_whose_names_it_waits_for(
        kube: Client, kubeconfig: str, namespace: str, kubeflow_operator: Operator) -> None:
    from lightkube.resources.core_v1 import Event, Pod, Service

    create(kube, job_data("twin", workers=1), namespace)
    wait_pods(kube, "twin", namespace, 2)
    kube.create(PyTorchJobRes.from_dict({**seed("twin"), "metadata": {"name": "twin", "namespace": namespace}}))

    def said() -> list[str]:
        return [e.message or "" for e in kube.list(Event, namespace=namespace)
                if e.involvedObject.kind == "PyTorchJob" and e.reason == "ReconcileError"]

    end = time.monotonic() + 30
    while not said() and time.monotonic() < end:
        time.sleep(0.2)
    assert said() and "Service twin exists and belongs to TorchJob twin" in said()[0], said()
    assert "delete or rename one of them" in said()[0]
    assert len(pods_of(kube, "twin", namespace)) == 2  # the TorchJob's, untouched
    # The TorchJob goes (its pods and Service with it, as the garbage collector would): the PyTorchJob starts.
    kube.delete(TorchJobRes, "twin", namespace=namespace)
    for p in pods_of(kube, "twin", namespace):
        kube.delete(Pod, p.metadata.name, namespace=namespace, grace_period=0)
    kube.delete(Service, "twin", namespace=namespace)
    pods = wait_pods(kube, "twin", namespace, 3, timeout=90)
    assert all(o.kind == "PyTorchJob" for p in pods for o in p.metadata.ownerReferences)


def test_torchjob_describe_shows_a_pytorchjob_it_serves(
        kube: Client, kubeconfig: str, namespace: str, kubeflow_operator: Operator) -> None:
    import subprocess
    import sys

    data = seed("desc")
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["restartPolicy"] = "Never"  # a failed worker fails the job
    kube.create(PyTorchJobRes.from_dict({**data, "metadata": {"name": "desc", "namespace": namespace}}))
    pods = {p.metadata.name: p for p in wait_pods(kube, "desc", namespace, 3)}
    for p in pods.values():
        set_pod(kube, p, "Running")
    set_pod(kube, pods["desc-worker-1"], "Failed", 3)
    wait_state(kubeconfig, "desc", namespace, "Failed")
    out = subprocess.run([sys.executable, "-m", "torchjob", "describe", "desc", "-n", namespace, "--kube",
                          "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # torchjob's view of it: the state, the root cause, each replica's attempt and the events
    assert "Failed" in out.stdout and "worker-1" in out.stdout and "exit code 3" in out.stdout, out.stdout
    assert "desc-worker-1" in out.stdout and "Events:" in out.stdout, out.stdout  # the others were stopped
    missing = subprocess.run([sys.executable, "-m", "torchjob", "describe", "nothing", "-n", namespace, "--kube",
                              "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr, missing.stderr
