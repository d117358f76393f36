"""Real pods on a real node: the dev cluster with a kubelet, containerd and CoreDNS
(`scripts/dev-cluster.sh up --real-node`), the operator as a process on the host, and jobs whose
containers run real torch. Nothing here plays the kubelet. Needs root; in CI these tests run, and
elsewhere TORCHJOB_KUBE_TESTS=1 runs them (the node's parts are built once per machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod

from tests.e2e.images import STANDINS
from tests.kube.conftest import ENABLED, REPO, Operator, ensure_usable, wait_established
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.install import apply, kubeflow_crd
from torchjob.kube.objects.install.crd import CRD_NAME, crd
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.served import trainer_objects

# A cluster already up there (`TORCHJOB_DEVCLUSTER_DIR=... dev-cluster.sh up --real-node`) is used
# as it is and left up: the inner loop of development.
STATE = Path(os.environ.get("TORCHJOB_E2E_DEVCLUSTER_DIR", "/tmp/torchjob-devcluster-e2e"))
SOCK = STATE / "realnode" / "containerd" / "containerd.sock"
# The host's address on the pods' bridge: the pod subnet's first (scripts/real-node.sh).
HOST = os.environ.get("DEVCLUSTER_POD_SUBNET", "10.250.0.0/24").rsplit(".", 1)[0] + ".1"
INIT_IMAGE = "localhost/torchjob-e2e:dev"  # has sh and netcat's `nc -z` (scripts/real-node.sh)


def devcluster(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_KWOK": "0"}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="package")
def node_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not ENABLED:
        pytest.skip("the real-node tests need a dev cluster with a kubelet: set TORCHJOB_KUBE_TESTS=1 (root; "
                    "scripts/dev-cluster.sh up --real-node builds its parts once per machine)")
    if os.geteuid() != 0:
        pytest.skip("the real node (containerd, kubelet, a bridge) needs root")
    up = devcluster("up", "--real-node")
    if up.returncode != 0:  # once more from scratch: a component dying at its start was seen once here
        print(f"dev-cluster.sh up --real-node failed, trying again:\n{up.stderr[-3000:]}")
        devcluster("down", timeout=300)
        up = devcluster("up", "--real-node")
    if up.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-6000:]}")
    path = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    started = "already up" not in up.stderr  # one kept up between runs (development) stays up
    try:
        # the Kubeflow APIs' (PyTorchJob; Trainer v2's TrainJob and runtimes) before the operator starts
        trainer = trainer_objects.crds()
        apply([crd(), kubeflow_crd.crd(), *trainer], path)
        for name in (CRD_NAME, kubeflow_crd.CRD_NAME, *(c["metadata"]["name"] for c in trainer)):
            wait_established(Client(config=KubeConfig.from_file(path)), name)
        spec = tmp_path_factory.mktemp("images") / "standins.json"
        spec.write_text(json.dumps(STANDINS))
        built = devcluster("image", str(spec), timeout=600)
        if built.returncode != 0:
            raise RuntimeError(f"dev-cluster.sh image failed:\n{built.stderr[-4000:]}")
        yield path
    finally:
        if started:
            down = devcluster("down", timeout=300)
            print(down.stderr[-3000:])


@pytest.fixture(scope="module", autouse=True)
def usable_node(node_kubeconfig: str) -> None:
    """The node's cluster checked (and repaired where its keepers can) before each module."""
    ensure_usable({**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_KWOK": "0"})


@pytest.fixture(scope="package")
def node(node_kubeconfig: str) -> Client:
    return Client(config=KubeConfig.from_file(node_kubeconfig), field_manager="torchjob-e2e")


@pytest.fixture(scope="package")
def node_operator(node_kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    # The pods report progress to the operator on the host, at the host's address on the pods' bridge.
    op = Operator(node_kubeconfig, log, ("--no-leader-elect", "--init-image", INIT_IMAGE, "--kubeflow-api", "on"),
                  progress_host=HOST)
    op.start()
    yield op
    op.stop()
    print(log.read_text()[-4000:])


@pytest.fixture
def ns(node: Client, node_operator: Operator) -> Iterator[str]:
    """A namespace of its own per test, deleted afterwards with everything in it."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    node.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    node.delete(Namespace, name)


def torchjob(kubeconfig: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The CLI against the real-node cluster (`--kube`)."""
    return subprocess.run([sys.executable, "-m", "torchjob", *args, "--kube", "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO)


def pods(node: Client, job: str, namespace: str) -> list[Pod]:
    return list(node.list(Pod, namespace=namespace, labels={LABEL_JOB: job}))


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120, every: float = 0.2) -> Any:
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = probe()
        except ApiError as e:
            last = e
        if last and not isinstance(last, ApiError):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")


def status_of(node: Client, job: str, namespace: str) -> dict[str, Any]:
    return dict(node.get(TorchJobRes, job, namespace=namespace).status or {})


def running_container(pod: Pod, container: str | None = None) -> str:
    """The containerd id of a running container of the pod ('' if none runs)."""
    for cs in (pod.status.containerStatuses or []) if pod.status else []:
        if (container is None or cs.name == container) and cs.state and cs.state.running and cs.containerID:
            return str(cs.containerID).removeprefix("containerd://")
    return ""


def kill_container(container_id: str, signal: str = "SIGKILL", sock: Path = SOCK) -> None:
    """Kill a container's process on the node (its containerd's socket), as the kernel's OOM killer or a
    crash would."""
    subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "tasks", "kill", "-s", signal, container_id],
                   check=True, capture_output=True, timeout=30)


def node_tasks() -> list[str]:
    """The containers that have a running task on the node (any pod's)."""
    out = subprocess.run(["ctr", "--address", str(SOCK), "-n", "k8s.io", "tasks", "ls"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.split() and line.split()[-1] == "RUNNING"]


