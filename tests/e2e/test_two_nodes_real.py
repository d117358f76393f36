"""A job across two real nodes: `scripts/dev-cluster.sh up --real-nodes 2` (two kubelets, each with its
own containerd and pod /24, on one control plane), and a 1+3 gloo DDP TorchJob whose ranks the
scheduler spreads over both, rendezvousing by the headless Service's names through the one CoreDNS
and training over the pods' routes between the two bridges.

Its own cluster (its own group in tests/conftest.py's SHARED_CLUSTER): a state dir and two /24s of
its own beside the worker's one-node cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from tests.e2e.conftest import INIT_IMAGE, STATE, pods, torchjob
from tests.e2e.images import STANDINS, TESTS_IMAGE
from tests.jobs import job_data
from tests.kube.conftest import ENABLED, REPO, Operator, ensure_usable, wait_established
from torchjob.kube.objects.crd import CRD_NAME, crd
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.labels import LABEL_JOB

pytestmark = pytest.mark.kube

# Beside the worker's one-node cluster (tests/conftest.py gives worker n 10.250.n.0/24): 10.246.2n
# and 10.246.2n+1 for its two nodes.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
STATE2 = Path(os.environ.get("TORCHJOB_E2E_TWO_NODES_DIR", f"{STATE}-two-nodes"))
SUBNETS = os.environ.get("TORCHJOB_E2E_TWO_NODES_SUBNETS", f"10.246.{2 * _WORKER}.0/24 10.246.{2 * _WORKER + 1}.0/24")
NODES = ("real-node-0", "real-node-1")


def devcluster(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE2), "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNETS": SUBNETS}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def node_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not ENABLED:
        pytest.skip("the real-node tests need a dev cluster with kubelets: set TORCHJOB_KUBE_TESTS=1 (root)")
    if os.geteuid() != 0:
        pytest.skip("the real nodes (containerd, kubelets, bridges) need root")
    up = devcluster("up", "--real-nodes", "2")
    if up.returncode != 0:  # once more from scratch, as the one-node clusters' fixture does
        print(f"dev-cluster.sh up --real-nodes 2 failed, trying again:\n{up.stderr[-3000:]}")
        devcluster("down", timeout=300)
        up = devcluster("up", "--real-nodes", "2")
    if up.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh up --real-nodes 2 failed:\n{up.stderr[-6000:]}")
    path = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    started = "already up" not in up.stderr  # one kept up by hand stays up
    try:
        apply([crd()], path)
        wait_established(Client(config=KubeConfig.from_file(path)), CRD_NAME)
        spec = tmp_path_factory.mktemp("images") / "tests-image.json"
        spec.write_text(json.dumps([i for i in STANDINS if i["name"] == TESTS_IMAGE]))
        built = devcluster("image", str(spec), timeout=600)  # into both nodes' containerd
        if built.returncode != 0:
            raise RuntimeError(f"dev-cluster.sh image failed:\n{built.stderr[-4000:]}")
        yield path
    finally:
        if started:
            down = devcluster("down", timeout=300)
            print(down.stderr[-3000:])


@pytest.fixture(scope="module", autouse=True)
def usable_node(node_kubeconfig: str) -> None:
    ensure_usable({**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE2), "DEVCLUSTER_KWOK": "0",
                   "DEVCLUSTER_POD_SUBNETS": SUBNETS})


@pytest.fixture(scope="module")
def node(node_kubeconfig: str) -> Client:
    return Client(config=KubeConfig.from_file(node_kubeconfig), field_manager="torchjob-e2e")


@pytest.fixture(scope="module")
def node_operator(node_kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    # pods on either node reach the host at node 0's bridge address (a local address of the host)
    op = Operator(node_kubeconfig, log, ("--no-leader-elect", "--init-image", INIT_IMAGE),
                  progress_host=SUBNETS.split()[0].rsplit(".", 1)[0] + ".1")
    op.start()
    yield op
    op.stop()
    print(log.read_text()[-4000:])


@pytest.fixture
def ns(node: Client, node_operator: Operator) -> Iterator[str]:
    from uuid import uuid4

    name = f"e2e-{uuid4().hex[:8]}"
    node.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    node.delete(Namespace, name)


def test_both_nodes_are_ready_and_reported(node_kubeconfig: str) -> None:
    """What docs/how-to/dev-cluster.md shows: `kubectl get nodes` lists both Ready, each at its bridge's
    address; `status` and `check` report each node."""
    kubectl = Path(devcluster("bin").stdout.strip()) / "kubectl"
    out = subprocess.run([str(kubectl), "--kubeconfig", node_kubeconfig, "get", "nodes", "-o", "wide"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    for name, subnet in zip(NODES, SUBNETS.split(), strict=True):
        assert rows[name][1] == "Ready", out
        assert subnet.rsplit(".", 1)[0] + ".1" in rows[name], out  # INTERNAL-IP: the node's bridge address
    status = devcluster("status")
    assert status.returncode == 0, status.stderr
    for i, (name, subnet) in enumerate(zip(NODES, SUBNETS.split(), strict=True)):
        assert f"real node {name}: pods on {subnet}" in status.stderr, status.stderr
        assert f"kubelet{f'-{i}' if i else ''}: running" in status.stderr, status.stderr
    check = devcluster("check")
    assert check.returncode == 0, check.stderr
    assert f"(real: {' '.join(NODES)})" in check.stderr, check.stderr


def test_a_ddp_job_trains_with_its_ranks_on_both_nodes(node_kubeconfig: str, node: Client, ns: str,
                                                      tmp_path: Path) -> None:
    t0 = time.monotonic()
    data = job_data("span", workers=3, restart_policy="Never",
                    command=("python", "/opt/tests/examples/ddp/train.py", "--epochs", "3"))
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        pod_spec = rspec["template"]["spec"]
        pod_spec["containers"][0]["image"] = TESTS_IMAGE
        # the job's four pods two and two: every node holds ranks
        pod_spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {LABEL_JOB: "span"}}}]
    path = tmp_path / "span.yaml"
    path.write_text(yaml.safe_dump(data))
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "torchjob: job span succeeded" in run.stderr, run.stderr
    placed = {p.metadata.name: p.spec.nodeName for p in pods(node, "span", ns)}
    assert sorted(placed.values()) == sorted([*NODES, *NODES]), placed
    # each pod on its node's bridge: the ranks' gloo traffic crossed from one /24 to the other
    subnet_of = dict(zip(NODES, (s.rsplit(".", 1)[0] + "." for s in SUBNETS.split()), strict=True))
    for p in pods(node, "span", ns):
        assert p.status.podIP.startswith(subnet_of[p.spec.nodeName]), (p.metadata.name, p.status.podIP)
    logs = torchjob(node_kubeconfig, "logs", "span", "-n", ns)
    assert logs.returncode == 0, logs.stderr
    # the rendezvous by the headless Service's name, which CoreDNS answered on both nodes
    assert "world size 4, master span-master-0.span:23456" in logs.stdout, logs.stdout
    for rank in range(4):
        assert re.search(rf"rank {rank} epoch 3/3 loss \d", logs.stdout), logs.stdout
    print(f"two-node job: run --kube to succeeded in {time.monotonic() - t0:.1f}s; placed {placed}")
