"""A job across two real nodes: `scripts/dev-cluster.sh up --real-nodes 2` (two kubelets, each with its
own containerd and pod /24, on one control plane), and a 1+3 gloo DDP TorchJob whose ranks the
scheduler spreads over both, rendezvousing by the headless Service's names through the one CoreDNS
and training over the pods' routes between the two bridges. Then a node drained under a job that
spans both: a Kubeflow PyTorchJob (kubectl, torchjob serving Kubeflow's API) whose drained rank saves
on notice, made again on the other node, resuming with no step lost (docs/how-to/preemption.md). And
warm spares across both: a rank killed on the second node restarts in place in its pod there. A
Trainer v2 TrainJob through the Kubeflow SDK (`CustomTrainer(func, num_nodes=2)`) with a node pod on
each machine. Last, a node lost for good under a job across both (its kubelet, containerd and
containers killed): its pods force-deleted, made again on the node left, the job resumed from its
checkpoint (node 1 started again after, for a module kept up by hand).

Its own cluster (its own group in tests/conftest.py's SHARED_CLUSTER): a state dir and two /24s of
its own beside the worker's one-node cluster."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod

from tests.docs import blocks
from tests.e2e.conftest import INIT_IMAGE, STATE, pods, status_of, torchjob, wait_for
from tests.e2e.daemons import kill_node, start_daemon
from tests.e2e.images import PROGRAMS, STANDINS, TESTS_IMAGE
from tests.e2e.test_inplace_real import attempts, job_file, kill_trainer, ns_pid, pod_log, training_process
from tests.jobs import job_data
from tests.kube.conftest import ENABLED, REPO, Operator, ensure_usable, wait_established
from tests.kube.test_kubeflow_api import state
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.install import apply, kubeflow_crd
from torchjob.kube.objects.install.crd import CRD_NAME, crd
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_JOB
from torchjob.kube.objects.labels.kubeflow import LABEL_JOB_NAME
from torchjob.kube.objects.labels.trainjob import COMPLETION_INDEX, JOBSET_NAME, REPLICATED_JOB
from torchjob.kube.served import trainer_objects
from torchjob.local.supervisor import pids

pytestmark = pytest.mark.kube

# Beside the worker's one-node cluster (tests/conftest.py gives worker n 10.250.n.0/24): 10.246.2n
# and 10.246.2n+1 for its two nodes.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
STATE2 = Path(os.environ.get("TORCHJOB_E2E_TWO_NODES_DIR", f"{STATE}-two-nodes"))
SUBNETS = os.environ.get("TORCHJOB_E2E_TWO_NODES_SUBNETS", f"10.246.{2 * _WORKER}.0/24 10.246.{2 * _WORKER + 1}.0/24")
NODES = ("real-node-0", "real-node-1")
# The operator's --force-delete-after for this module (torchjob's default: 60): no shorter than the
# node controller's node-monitor-grace-period (50 s, which the dev cluster keeps), so that a lost
# node is NotReady and tainted by the time its pods are force-deleted and made again elsewhere.
FORCE_DELETE_AFTER_S = 50


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
        trainer = trainer_objects.crds()  # Trainer v2's TrainJob and runtimes, served by the operator
        apply([crd(), kubeflow_crd.crd(), *trainer], path)
        for name in (CRD_NAME, kubeflow_crd.CRD_NAME, *(c["metadata"]["name"] for c in trainer)):
            wait_established(Client(config=KubeConfig.from_file(path)), name)
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
    op = Operator(node_kubeconfig, log, ("--no-leader-elect", "--init-image", INIT_IMAGE, "--kubeflow-api", "on",
                                           "--force-delete-after", str(FORCE_DELETE_AFTER_S)),
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


@pytest.mark.timeout(300)
def test_the_sdk_trains_a_trainjob_with_a_node_on_each_real_node(node_kubeconfig: str, node: Client, ns: str) -> None:
    """The Kubeflow SDK (code unchanged) against torchjob serving Trainer v2's TrainJob:
    `CustomTrainer(func, num_nodes=2)` on a TrainingRuntime whose node template spreads a TrainJob's
    node pods over the hosts (matchLabelKeys: each TrainJob's own pods), so node-0 and node-1 land on
    different machines, rendezvous by PET_MASTER_ADDR across them, all-reduce over gloo and complete."""
    from tests.e2e.test_trainjob_real import runtime, sdk, trainer

    rt = runtime(ns, "torch-spread")
    node_pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node_pod["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {REPLICATED_JOB: "node"}}, "matchLabelKeys": [JOBSET_NAME]}]
    apply([rt], node_kubeconfig)
    client = sdk(node_kubeconfig, ns)
    t0 = time.monotonic()
    name = client.train(runtime="torch-spread", trainer=trainer.CustomTrainer(
        func=all_reduce_across, image=TESTS_IMAGE, num_nodes=2, resources_per_node={"cpu": 1}))
    job = client.wait_for_job_status(name, status={"Complete"}, timeout=240, polling_interval=1)
    assert {s.name: s.status for s in job.steps} == {"node-0": "Succeeded", "node-1": "Succeeded"}, job.steps
    found = {p.metadata.labels[COMPLETION_INDEX]: p for p in node.list(Pod, namespace=ns, labels={JOBSET_NAME: name})}
    placed = {rank: p.spec.nodeName for rank, p in found.items()}
    assert sorted(placed.values()) == sorted(NODES), placed  # a node pod on each machine
    subnet_of = dict(zip(NODES, (s.rsplit(".", 1)[0] + "." for s in SUBNETS.split()), strict=True))
    for rank in (0, 1):
        said = "".join(client.get_job_logs(name, step=f"node-{rank}"))
        me, peer = found[str(rank)].status.podIP, found[str(1 - rank)].status.podIP
        assert me.startswith(subnet_of[placed[str(rank)]]), (rank, me, placed)
        # 2 nodes x 1 process: ranks 0 and 1 add 1 and 2, the peer's traffic from the other node's /24
        assert f"rank {rank} of 2 sum 3 at {me}, peer at {peer}" in said, said
    print(f"TrainJob of 2 nodes through the SDK: Complete in {time.monotonic() - t0:.1f}s; placed {placed}")


def all_reduce_across() -> None:
    """Shipped by the SDK into each node's command and run there by torchrun: an all-reduce over gloo,
    and the pod addresses of both ranks (gathered over the same group)."""
    import socket

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    ips: list[str] = [""] * world
    dist.all_gather_object(ips, socket.gethostbyname(socket.gethostname()))
    print(f"rank {rank} of {world} sum {int(t.item())} at {ips[rank]}, peer at {ips[1 - rank]}", flush=True)
    dist.destroy_process_group()


def kubectl(kubeconfig: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(devcluster("bin").stdout.strip()) / "kubectl"), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


# tests/programs/save_on_notice.py: every rank stops at the step the first one told stopped at, rank 0
# saves it; each rank's trace says "start S", "step K", "saved K" and at last "done N SUM". The steps'
# sleep is a file the ranks read every step: slow while the drain is on its way, fast after it.
NOTICE_STEPS, NOTICE_GRACE_S = 60, 60
FIRST_S, SLOW_S, LAST_S = 0.2, 1.0, 0.02
PAGE = "how-to/preemption.md"
DRAIN = "test_a_kubeflow_pytorchjob_across_both_nodes_drained_saves_on_notice_and_loses_no_step"


def set_pace(data_dir: Path, seconds: float) -> None:
    (data_dir / "pace.tmp").write_text(str(seconds))
    os.replace(data_dir / "pace.tmp", data_dir / "pace")  # a rank never reads half a file


def notice_job(tmp_path: Path, name: str, ns: str) -> tuple[Path, Path]:
    """A Kubeflow PyTorchJob (1 master + 1 worker) of save_on_notice.py, one rank per node; its
    checkpoint, traces and pace in a host directory both nodes' pods mount (the two nodes share this
    machine: what a volume of the cluster's shared storage would be)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    set_pace(data_dir, FIRST_S)
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": NOTICE_GRACE_S,  # what a SIGKILL would cut short
        "containers": [{
            "name": "pytorch", "image": TESTS_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["python", "/opt/notice/save_on_notice.py", "/data/ckpt.json", "/data/trace",
                        str(NOTICE_STEPS), "/data/pace"],
            "env": [{"name": "PYTHONPATH", "value": "/opt/tests"}],  # the image's copy of torchjob/report.py
            "volumeMounts": [{"name": "prog", "mountPath": "/opt/notice", "readOnly": True},
                             {"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "prog", "hostPath": {"path": str(PROGRAMS), "type": "Directory"}},
                    {"name": "data", "hostPath": {"path": str(data_dir), "type": "Directory"}}]}
    (spread,) = blocks.tested(PAGE, DRAIN, "yaml")  # one rank per node, as docs/how-to/preemption.md spreads them
    pod.update(yaml.safe_load(spread.replace("job-name: drain", f"job-name: {name}")))
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns},
           "spec": {"runPolicy": {"backoffLimit": 3},
                    "pytorchReplicaSpecs": {
                        kind: {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": pod}}
                        for kind in ("Master", "Worker")}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, data_dir


def one_rank(text: str) -> str:
    return re.sub(r"\b(master|worker)-0\b", "RANK-0", text)


def trace(data_dir: Path, rank: int) -> list[str]:
    path = data_dir / f"trace-{rank}"
    return path.read_text().splitlines() if path.exists() else []


def steps_of(lines: list[str]) -> int:
    return sum(ln.startswith("step") for ln in lines)


def nodes_of(node: Client, job: str, ns: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.nodeName for p in node.list(Pod, namespace=ns, labels={LABEL_JOB_NAME: job})}


@pytest.mark.timeout(600)
def test_a_kubeflow_pytorchjob_across_both_nodes_drained_saves_on_notice_and_loses_no_step(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """Kubeflow's client (kubectl, a PyTorchJob) against torchjob serving its API: the master and the
    worker on different nodes, then `kubectl drain real-node-1`. Its rank gets the notice (the
    eviction's SIGTERM, then the pod's grace), every rank stops at the same step and rank 0 saves it;
    the job's pods are made again, both on real-node-0, and resume from that step: no step lost."""
    path, data_dir = notice_job(tmp_path, "drain", ns)
    applied = kubectl(node_kubeconfig, "apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    wait_for("each rank 5 steps in", lambda: all(steps_of(trace(data_dir, r)) >= 5 for r in (0, 1)),
             timeout=240, every=0.2)
    set_pace(data_dir, SLOW_S)  # the 55 steps left outlast the drain on the slowest machine
    first = nodes_of(node, "drain", ns)
    assert sorted(first.values()) == sorted(NODES), first  # a rank on each node, rendezvoused across them
    (command,) = blocks.tested(PAGE, DRAIN, "bash")
    words = shlex.split(command)
    assert words[:3] == ["kubectl", "drain", NODES[1]], words
    t0 = time.monotonic()
    try:
        drained = kubectl(node_kubeconfig, *words[1:], "--timeout", "120s", timeout=180)
        drain_s = time.monotonic() - t0
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert "evicting pod" in drained.stdout + drained.stderr, drained.stdout + drained.stderr
        set_pace(data_dir, LAST_S)
        wait_for("the job to end", lambda: state(node_kubeconfig, "drain", ns) in ("Succeeded", "Failed"),
                 timeout=240, every=0.5)
        ended_s = time.monotonic() - t0
    finally:
        kubectl(node_kubeconfig, "uncordon", NODES[1])
    described = kubectl(node_kubeconfig, "describe", "pytorchjob", "drain", "-n", ns).stdout
    assert state(node_kubeconfig, "drain", ns) == "Succeeded", described
    saved = json.loads((data_dir / "ckpt.json").read_text())["step"]
    for rank in (0, 1):
        lines = trace(data_dir, rank)
        assert [ln for ln in lines if ln.startswith("saved")] == [f"saved {saved}"], lines  # one notice, one save
        at = lines.index(f"saved {saved}")
        assert lines[at - 1] == f"step {saved}", lines  # the step it was at when told, no later one
        assert lines[at + 1:at + 3] == [f"start {saved}", f"step {saved + 1}"], lines  # steps lost: 0
        assert lines[-1] == f"done {NOTICE_STEPS} {float(sum(2 * s for s in range(1, NOTICE_STEPS + 1)))}", lines
    assert 5 <= saved < NOTICE_STEPS, saved
    again = nodes_of(node, "drain", ns)
    assert set(again.values()) == {NODES[0]}, again
    # what happened is on the PyTorchJob, where Kubeflow's clients read it: the page's lines, whichever
    # rank the scheduler had put on the drained node
    (shown,) = blocks.tested(PAGE, DRAIN, "text")
    for line in shown.splitlines():
        head, _, message = (one_rank(" ".join(part.split())) for part in line.partition("..."))
        assert re.search(re.escape(head) + " .* " + re.escape(message), one_rank(re.sub(r"[ \t]+", " ", described))), (
            line, described)
    print(f"drained {NODES[1]} in {drain_s:.1f}s (the notice saved step {saved}, no step lost); the job succeeded "
          f"{ended_s:.1f}s after the drain began; placed {first}, then {again}")


def node_sock(name: str) -> Path:
    """The node's containerd socket, as scripts/real-node.sh lays out node i's state (realnode, realnode-1)."""
    i = NODES.index(name)
    return STATE2 / f"realnode{f'-{i}' if i else ''}" / "containerd" / "containerd.sock"


@pytest.mark.timeout(300)
def test_warm_spares_restart_a_rank_in_place_on_the_second_node(node_kubeconfig: str, node: Client, ns: str,
                                                                 tmp_path: Path) -> None:
    """runPolicy.warmSpares across both nodes (docs/explanation/faults.md, a restart in place): the master
    on real-node-0, the worker on real-node-1, its trainer SIGKILLed there through real-node-1's own
    containerd. Both ranks restart in place, each in its pod on its node as the spare the pod had warmed
    (the entry point reached the operator from either node), resume after the checkpoint and succeed."""
    t0 = time.monotonic()
    path, data = job_file(tmp_path, "sp", spares=True)
    job = yaml.safe_load(path.read_text())
    placed = {"Master": NODES[0], "Worker": NODES[1]}
    for kind, rspec in job["spec"]["pytorchReplicaSpecs"].items():
        rspec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": placed[kind]}
    path.write_text(yaml.safe_dump(job))
    assert torchjob(node_kubeconfig, "submit", str(path), "-n", ns).returncode == 0
    ranks = {"sp-master-0": (0, node_sock(NODES[0])), "sp-worker-0": (1, node_sock(NODES[1]))}
    wait_for("both ranks training", lambda: all(
        any(s and s[-1] >= 5 for _, s in attempts(pod_log(node, p, ns))[-1:]) for p in ranks), timeout=150, every=0.5)
    before = {p.metadata.name: (p.metadata.uid, p.spec.nodeName) for p in pods(node, "sp", ns)}
    assert {n: at for n, (_, at) in before.items()} == {"sp-master-0": NODES[0], "sp-worker-0": NODES[1]}, before
    t_training = time.monotonic() - t0
    uid = str(node.get(TorchJobRes, "sp", namespace=ns).metadata.uid)
    spares: dict[str, int] = {}

    def warm() -> bool:  # each pod's spare started and waiting, each seen through its own node's containerd
        for pod, (rank, sock) in ranks.items():
            _, spare = training_process(node, pod, ns, uid, rank, sock)
            if spare is None or not pids.spare_waiting(spare) or (inner := ns_pid(spare)) is None:
                return False
            spares[pod] = inner
        return True

    wait_for("the warm spares on both nodes", warm, timeout=90, every=0.5)
    t_warm = time.monotonic() - t0
    killed = kill_trainer(node, "sp-worker-0", ns, uid, 1, ranks["sp-worker-0"][1])
    wait_for("training resumed in place on both nodes", lambda: all(
        len(runs := attempts(pod_log(node, p, ns))) == 2 and len(runs[1][1]) >= 3 for p in ranks),
        timeout=120, every=0.5)
    t_resumed = time.monotonic() - t0
    (data / "stop").write_text("")
    status = wait_for("the job's end", lambda: (s := status_of(node, "sp", ns)).get("state") in (
        "Succeeded", "Failed") and not any(r.get("active") for r in s.get("replicaStatuses", {}).values())
        and s, timeout=90, every=0.5)
    t_ended = time.monotonic() - t0
    assert status["state"] == "Succeeded" and status["restartCount"] == 1, status
    after = {p.metadata.name: p for p in pods(node, "sp", ns)}
    # the same two pods, each still on its node, at attempt 1 in place, their containers never restarted
    assert {n: (p.metadata.uid, p.spec.nodeName) for n, p in after.items()} == before, (before, after.keys())
    for name, pod in after.items():
        assert pod.metadata.annotations[ANNOTATION_ATTEMPT] == "1", (name, pod.metadata.annotations)
        assert pod.metadata.annotations[inplace.ANNOTATION_IN_PLACE] == "true", name
        cs = next(c for c in pod.status.containerStatuses if c.name == "pytorch")
        assert cs.restartCount == 0 and cs.state.terminated and cs.state.terminated.exitCode == 0, (name, cs)
    logs = {p: pod_log(node, p, ns) for p in ranks}
    checkpoint = attempts(logs["sp-master-0"])[0][1][-1]  # the last step rank 0 finished before the kill
    for name, log in logs.items():
        (_, first), (second_pid, second) = attempts(log)
        assert second_pid == spares[name], (name, second_pid, spares, log)  # the pod's spare, on its node
        assert first and second[0] == checkpoint + 1, (name, first, second)
        assert second == list(range(second[0], second[0] + len(second))), (name, second)
    assert attempts(logs["sp-worker-0"])[0][0] == killed  # the process killed on real-node-1 was the trainer
    print(f"warm spares on two nodes: in place on {NODES[1]} and {NODES[0]}, training at {t_training:.1f}s, "
          f"spares warm at {t_warm:.1f}s, resumed at {t_resumed:.1f}s, ended at {t_ended:.1f}s")


ELASTIC = "test_an_elastic_job_across_both_nodes_goes_on_at_one_when_drained_and_grows_back_to_two"
REGROWN = "e2e.torchjob.dev/regrown"  # read by the pod's env when its container starts


def pdb(ns: str, min_available: int) -> dict[str, Any]:
    """docs/how-to/preemption.md's PodDisruptionBudget over the elastic job's pods, in `ns`."""
    (page,) = blocks.tested(PAGE, ELASTIC, "yaml")
    doc: dict[str, Any] = yaml.safe_load(page)
    assert doc["spec"]["selector"]["matchLabels"] == {LABEL_JOB: "el"}, doc
    doc["metadata"]["namespace"] = ns
    doc["spec"]["minAvailable"] = min_available
    return doc


@pytest.mark.timeout(420)
def test_an_elastic_job_across_both_nodes_goes_on_at_one_when_drained_and_grows_back_to_two(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """An elastic TorchJob (torchrun, `nnodes 1:2`, c10d) with a worker on each node (a required pod
    anti-affinity: never two of its pods on one host) and a PodDisruptionBudget. With `minAvailable: 2`
    `kubectl drain` of worker-1's node is refused, the pod untouched; with `minAvailable: 1` the drain
    evicts it, worker-0's agent restarts its worker in a rendezvous of one and trains on alone, while the
    pod made again waits for a node (the job's WaitingForNode); `kubectl uncordon` lets it on its node
    again, it joins, and the two train as one world again until the job succeeds."""
    from tests.e2e.test_real_pods import conditions, ended, job_file, pod_log

    t0 = time.monotonic()
    data = job_data("el", master=False, workers=2, restart_policy="OnFailure", nproc_per_node=1,
                    # 400 steps of 0.25 s a round (cut short by each change of the world); 8 in the round
                    # the pod made again joins (tests/e2e/programs/elastic.py: POD_ATTEMPT not 0)
                    command=("torchrun", "/opt/tests/elastic.py", "400", "0.25", "8"),
                    elastic={"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d", "maxRestarts": 3,
                             "rdzvConf": [{"key": "last_call_timeout", "value": "2"}]})
    pod_spec = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    # a deletion is no failure: the pod made again has the same attempt; the test marks it while it waits
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": {REGROWN: "0"}}
    marked = {"fieldRef": {"fieldPath": f"metadata.annotations['{REGROWN}']"}}
    pod_spec["containers"][0]["env"] = [{"name": "POD_ATTEMPT", "valueFrom": marked}]
    pod_spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {LABEL_JOB: "el"}}}]}}
    apply([pdb(ns, 2)], node_kubeconfig)  # every rank kept: no eviction
    assert torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns).returncode == 0

    def logs() -> str:
        return "\n".join(pod_log(node, f"el-worker-{i}", ns) for i in range(2))

    def survivor_since(mark: int) -> str:  # worker-0's log from a point on (a pod's log only grows)
        return pod_log(node, "el-worker-0", ns)[mark:]

    wait_for("a world of 2", lambda: re.search(r"round \d+ world 2 step 2\n", logs()), timeout=180, every=0.5)
    t_two = time.monotonic() - t0
    first = {p.metadata.name: (p.metadata.uid, p.spec.nodeName) for p in pods(node, "el", ns)}
    assert sorted(at for _, at in first.values()) == sorted(NODES), first
    # worker-0's agent holds the c10d store (the rendezvous host): the node drained is worker-1's
    drained = first["el-worker-1"][1]
    try:
        refused = kubectl(node_kubeconfig, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data",
                          "--timeout", "2s", timeout=60)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        (said,) = blocks.tested(PAGE, ELASTIC, "text")  # the page's words of kubectl drain
        assert said.strip().replace("NAMESPACE", ns) in refused.stderr, refused.stderr
        assert node.get(Pod, "el-worker-1", namespace=ns).metadata.uid == first["el-worker-1"][0]
        apply([pdb(ns, 1)], node_kubeconfig)  # the page's: one rank may go
        t_drain, mark = time.monotonic(), len(pod_log(node, "el-worker-0", ns))
        evicted = kubectl(node_kubeconfig, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data",
                          "--timeout", "120s", timeout=180)
        assert evicted.returncode == 0, evicted.stdout + evicted.stderr
        assert "evicting pod" in evicted.stdout + evicted.stderr, evicted.stdout + evicted.stderr
        # worker-0 trains on alone, while the pod made again for worker-1 waits for a node
        wait_for("a world of 1", lambda: re.search(r"world 1 step 1\n", survivor_since(mark)), timeout=120, every=0.5)
        t_alone = time.monotonic() - t_drain
        waiting = wait_for("the job waiting for a node", lambda: next(
            (c for c in status_of(node, "el", ns).get("conditions", [])
             if c["type"] == "Scheduled" and c["reason"] == "WaitingForNode"), None), timeout=60, every=0.5)
        assert waiting["message"].startswith("worker-1 waits for a node: 0/2 nodes are available"), waiting
        pending = node.get(Pod, "el-worker-1", namespace=ns)
        assert pending.metadata.uid != first["el-worker-1"][0] and not pending.spec.nodeName, pending.spec.nodeName
        node.patch(Pod, "el-worker-1", {"metadata": {"annotations": {REGROWN: "1"}}}, namespace=ns)
    finally:
        kubectl(node_kubeconfig, "uncordon", drained)
    t_back = time.monotonic()
    # the pod goes on its node again, joins the rendezvous, and the two train as one world again
    wait_for("a world of 2 again", lambda: "world 2 step 0\n" in survivor_since(mark).partition("world 1 step 1\n")[2],
             timeout=180, every=0.5)
    t_grown = time.monotonic() - t_back
    status = wait_for("the job's end", lambda: ended(node, "el", ns), timeout=120, every=0.5)
    assert "Succeeded" in conditions(status), status
    again = {p.metadata.name: (p.metadata.uid, p.spec.nodeName) for p in pods(node, "el", ns)}
    assert again["el-worker-0"] == first["el-worker-0"], (first, again)  # the survivor's pod never made again
    assert again["el-worker-1"][1] == drained and again["el-worker-1"][0] != first["el-worker-1"][0], (first, again)
    out = pod_log(node, "el-worker-0", ns)
    worlds = [int(w) for w in re.findall(r"rank \d round \d+ world (\d) step 0\n", out)]
    assert worlds[-3:] == [2, 1, 2], out  # two nodes, one, two again
    assert re.search(r"world 2 done\n", out) and re.search(r"world 2 done\n", pod_log(node, "el-worker-1", ns))
    print(f"elastic across two nodes: world 2 at {t_two:.1f}s; drained {drained}, alone {t_alone:.1f}s after; "
          f"uncordoned, world 2 again {t_grown:.1f}s after; placed {first}, then {again}")


def rank_steps(data: Path) -> dict[int, tuple[list[float], list[tuple[float, int]]]]:
    """bench/programs/steps.py's lines in the job's shared directory: each rank's attempts' start times
    and the (time, step) of each step it did."""
    found = {}
    for f in data.glob("rank-*.log"):
        text = f.read_text()
        found[int(f.stem.removeprefix("rank-"))] = ([float(m[1]) for m in STARTED.finditer(text)],
                                                    [(float(m[1]), int(m[2])) for m in LOGGED.finditer(text)])
    return found


LOGGED = re.compile(r"^@([\d.]+) rank \d+ step (\d+)$", re.M)
STARTED = re.compile(r"^@([\d.]+) rank \d+ start ", re.M)


def node_ready(node: Client, name: str) -> str:
    n = node.get(Node, name)
    return next((c.status for c in (n.status.conditions or []) if c.type == "Ready"), "?") if n.status else "?"


# Last in the module: node 1 is dead for a minute (started again once the job's pods are on node 0).
@pytest.mark.timeout(420)
def test_a_job_across_both_nodes_whose_second_node_is_lost_for_good_resumes_on_the_first(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """A 1+1 TorchJob of bench/programs/steps.py (rank 0 checkpoints every step), one rank on each node;
    then real-node-1 dies as a machine does: its kubelet and containerd SIGKILLed and held down, every
    process of its containers killed. The rank left fails in its all-reduce, the operator restarts the
    gang; no kubelet confirms the end of node 1's pod, so the operator force-deletes it
    --force-delete-after (FORCE_DELETE_AFTER_S) past its grace, by which time the node controller has
    marked the node NotReady and tainted it (node-monitor-grace-period, Kubernetes' 50 s, which the dev
    cluster keeps); both pods are made again on real-node-0 and resume after the checkpoint."""
    path, data = job_file(tmp_path, "gone", spares=False)
    job = yaml.safe_load(path.read_text())
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        pod_spec = rspec["template"]["spec"]
        pod_spec["terminationGracePeriodSeconds"] = 1
        pod_spec["topologySpreadConstraints"] = [{  # a rank on each node; a tainted node is no domain
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": {LABEL_JOB: "gone"}}}]
    path.write_text(yaml.safe_dump(job))
    t0 = time.monotonic()
    assert torchjob(node_kubeconfig, "submit", str(path), "-n", ns).returncode == 0
    wait_for("both ranks 5 steps in", lambda: len(s := rank_steps(data)) == 2 and all(
        len(steps) >= 5 for _, steps in s.values()), timeout=180, every=0.5)
    t_training = time.monotonic() - t0
    before = {p.metadata.name: (p.metadata.uid, p.spec.nodeName) for p in pods(node, "gone", ns)}
    assert sorted(at for _, at in before.values()) == sorted(NODES), before
    lost = next(name for name, (_, at) in before.items() if at == NODES[1])
    killed = time.time()
    assert kill_node(STATE2, 1) > 0  # its containers' processes: the shims and the ranks under them
    seen: dict[str, float] = {}
    try:
        def replaced() -> bool:
            if "NotReady" not in seen and node_ready(node, NODES[1]) != "True":
                seen["NotReady"] = time.time() - killed
            now = {p.metadata.name: (p.metadata.uid, p.spec.nodeName) for p in pods(node, "gone", ns)}
            return (set(now) == set(before) and not {u for u, _ in now.values()} & {u for u, _ in before.values()}
                    and all(now.values()) and all(at for _, at in now.values()))

        wait_for("the job's pods made again", replaced, timeout=150, every=1)
        seen["made again"] = time.time() - killed
    finally:
        start_daemon(STATE2, "containerd-1")  # node 1 back for the next run of the module; its pods are gone
        start_daemon(STATE2, "kubelet-1")
    again = {p.metadata.name: p.spec.nodeName for p in pods(node, "gone", ns)}
    assert set(again.values()) == {NODES[0]}, again  # on the node left, not back onto the dead one
    forced = [e for e in node.list(Event, namespace=ns) if e.reason == "ForceDeleted"]
    assert any(f"pod {lost} on node {NODES[1]} was still terminating {FORCE_DELETE_AFTER_S} s past" in (e.message or "")
               for e in forced), [e.message for e in forced]

    def new_steps(rank: int) -> list[int]:  # the steps of the attempt that started after the kill
        starts, steps = rank_steps(data)[rank]
        return [n for t, n in steps if t > starts[-1]] if starts[-1] > killed else []

    wait_for("every rank 3 steps into the new attempt", lambda: all(len(new_steps(r)) >= 3 for r in (0, 1)),
             timeout=180, every=0.5)
    seen["trained again"] = time.time() - killed
    (data / "stop").write_text("")
    status = wait_for("the job's end", lambda: (s := status_of(node, "gone", ns)).get("state") in (
        "Succeeded", "Failed") and s, timeout=90, every=0.5)
    assert status["state"] == "Succeeded", status
    resumed = {r: new_steps(r)[0] - 1 for r in (0, 1)}  # the step each resumed after: the checkpoint's
    ends = {r: rank_steps(data)[r] for r in (0, 1)}
    done = {r: [n for t, n in ends[r][1] if t < min(s for s in ends[r][0] if s > killed)] for r in (0, 1)}
    assert resumed[0] == resumed[1] >= 5, (resumed, ends)  # from the checkpoint, not from the start
    # rank 0 saves a step before it logs it: the checkpoint is its last step logged, or the next one
    assert resumed[0] - done[0][-1] in (0, 1), (resumed, done)
    lost = max(d[-1] for d in done.values()) - resumed[0]
    assert 0 <= lost <= 1, (lost, resumed, done)  # a step a rank did that rank 0 had not saved, at most
    wait_for(f"{NODES[1]} Ready again", lambda: node_ready(node, NODES[1]) == "True", timeout=90, every=1)
    print(f"node lost across two nodes: training at {t_training:.1f}s; {NODES[1]} killed, then "
          + ", ".join(f"{what} {s:.1f}s" for what, s in seen.items())
          + f"; steps lost {lost}; placed {before}, then {again}")
