"""A node lost for good under a job that spans two real nodes: how long until the job trains again on
the node left, and how many steps it lost.

A 1 master + 1 worker TorchJob of bench/programs/steps.py (a gloo all-reduce per step; rank 0 saves
the step it finished after every step, and a new attempt resumes after it), one rank on each node
(a topology spread constraint), on a two-node dev cluster (`scripts/dev-cluster.sh up --real-nodes
2`). Once both ranks are 5 steps in, real-node-1 dies as a machine does: its kubelet and containerd
are SIGKILLed and held down, and so is every process of its containers (its containerd's shims and
their children). The bench then polls every second and prints when each thing happened, counted
from the kill: the node NotReady, each pod's deletion begun and its pods made again (and where), and
every rank past the last step logged at the kill; then the steps lost (that step minus the one the
new attempt resumed after) and the job's events (`torchjob describe`). Node 1 is started again at
the end.

torchjob's operator runs as a process on the host with its defaults (`--force-delete-after 60`; the
pods tolerate a lost node's taints 30 s), the pods' grace is --grace (5 s). docs/how-to/preemption.md
("A node lost without notice") has a run of it.

Usage: python bench/node_lost.py [--grace 5] [--force-delete-after 60]
It uses a two-node cluster already up in TORCHJOB_E2E_TWO_NODES_DIR (default
/tmp/torchjob-bench-two-nodes) or starts one there on TORCHJOB_E2E_TWO_NODES_SUBNETS (default
"10.253.0.0/24 10.253.1.0/24") and stops it at the end. Root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.e2e.daemons import kill_node, start_daemon  # noqa: E402
from tests.e2e.images import STANDINS, TESTS_IMAGE  # noqa: E402
from tests.jobs import job_data  # noqa: E402

from torchjob.kube.objects.install import apply  # noqa: E402
from torchjob.kube.objects.install.crd import crd  # noqa: E402
from torchjob.kube.objects.labels import LABEL_JOB  # noqa: E402

STATE = Path(os.environ.get("TORCHJOB_E2E_TWO_NODES_DIR", "/tmp/torchjob-bench-two-nodes"))
SUBNETS = os.environ.get("TORCHJOB_E2E_TWO_NODES_SUBNETS", "10.253.0.0/24 10.253.1.0/24")
LOST = "real-node-1"
STEP = re.compile(r"^@([\d.]+) rank \d+ step (\d+)$", re.M)


def devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNETS": SUBNETS}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=3600, stdin=subprocess.DEVNULL)


def torchjob(kubeconfig: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "torchjob", *args, "--kube", "--kubeconfig", kubeconfig],
                         capture_output=True, text=True, timeout=120, cwd=REPO, stdin=subprocess.DEVNULL)
    return out.stdout + out.stderr


def the_job(work: Path, grace: int) -> Path:
    job = job_data("lost", workers=1, restart_policy="OnFailure", restart_scope=None, run_policy={"backoffLimit": 6},
                   command=("python", "/opt/train/steps.py", "--steps", "100000", "--step-time", "0.2", "--dir",
                            "/data", "--stop-file", "/data/stop", "--timeout", "30"))
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        pod["terminationGracePeriodSeconds"] = grace
        c = pod["containers"][0]
        c["image"] = TESTS_IMAGE
        c["volumeMounts"] = [{"name": "train", "mountPath": "/opt/train", "readOnly": True},
                             {"name": "data", "mountPath": "/data"}]
        # the checkpoint on a directory both nodes mount: what the cluster's shared storage would be
        pod["volumes"] = [
            {"name": "train", "hostPath": {"path": str(REPO / "bench" / "programs"), "type": "Directory"}},
            {"name": "data", "hostPath": {"path": str(work / "data"), "type": "Directory"}}]
        pod["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": {LABEL_JOB: "lost"}}}]
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def steps(data: Path) -> dict[str, list[tuple[float, int]]]:
    return {f.name: [(float(m[1]), int(m[2])) for m in STEP.finditer(f.read_text())] for f in data.glob("rank-*.log")}


def ready(kube: Client, name: str) -> str:
    n = kube.get(Node, name)
    return next((c.status for c in (n.status.conditions or []) if c.type == "Ready"), "?") if n.status else "?"


def watch(kube: Client, ns: str, data: Path, killed: float, last: int) -> dict[str, float]:
    seen: dict[str, float] = {}

    def mark(what: str) -> None:
        if what not in seen:
            seen[what] = time.time() - killed
            print(f"{seen[what]:6.1f} s  {what}", flush=True)

    while time.time() - killed < 600:
        if ready(kube, LOST) != "True":
            mark(f"{LOST} NotReady")
        for p in kube.list(Pod, namespace=ns):
            uid = p.metadata.uid[:8]
            if p.metadata.deletionTimestamp:
                mark(f"pod {p.metadata.name} ({uid}, on {p.spec.nodeName}) being deleted")
            if p.status and p.status.phase == "Running":
                mark(f"pod {p.metadata.name} ({uid}) running on {p.spec.nodeName}")
        now = steps(data)
        if len(now) == 2 and all(s and s[-1][0] > killed and s[-1][1] > last + 1 for s in now.values()):
            mark(f"every rank past step {last + 1}")
            return seen
        time.sleep(1)
    raise SystemExit(f"the job did not train again within 600 s: {steps(data)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grace", type=int, default=5, help="the pods' terminationGracePeriodSeconds")
    parser.add_argument("--force-delete-after", type=int, default=60, help="the operator's flag")
    args = parser.parse_args()
    up = devcluster("up", "--real-nodes", "2")
    if up.returncode != 0:
        raise SystemExit(f"dev-cluster.sh up --real-nodes 2 failed:\n{up.stderr[-3000:]}")
    started = "already up" not in up.stderr
    kubeconfig = str(STATE / "kubeconfig")
    work = Path(tempfile.mkdtemp(prefix="node-lost-"))
    (work / "data").mkdir()
    (work / "images.json").write_text(json.dumps([i for i in STANDINS if i["name"] == TESTS_IMAGE]))
    op = None
    try:
        apply([crd()], kubeconfig)
        built = devcluster("image", str(work / "images.json"))
        if built.returncode != 0:
            raise SystemExit(f"dev-cluster.sh image failed:\n{built.stderr[-3000:]}")
        op = subprocess.Popen([sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig,
                               "--no-leader-elect", "--init-image", "localhost/torchjob-e2e:dev",
                               "--progress-port", "0", "--metrics-port", "0", "--health-port", "0",
                               "--force-delete-after", str(args.force_delete_after)],
                              stdout=(work / "operator.log").open("w"), stderr=subprocess.STDOUT, cwd=REPO)
        kube = Client(config=KubeConfig.from_file(kubeconfig), field_manager="bench")
        ns = f"lost-{uuid.uuid4().hex[:6]}"
        kube.create(Namespace(metadata=ObjectMeta(name=ns)))
        print(torchjob(kubeconfig, "submit", str(the_job(work, args.grace)), "-n", ns).strip())
        end = time.time() + 300
        while not (len(s := steps(work / "data")) == 2 and all(len(v) >= 5 for v in s.values())):
            if time.time() > end:
                raise SystemExit(f"the job did not start within 300 s (see {work})")
            time.sleep(0.5)
        print("placed:", {p.metadata.name: p.spec.nodeName for p in kube.list(Pod, namespace=ns)})
        killed = time.time()
        print(f"{LOST} killed ({kill_node(STATE, 1)} processes of its containers)")
        last = max(s[-1][1] for s in steps(work / "data").values())
        try:
            watch(kube, ns, work / "data", killed, last)
        finally:
            start_daemon(STATE, "containerd-1")
            start_daemon(STATE, "kubelet-1")
        log = (work / "data" / "rank-0.log").read_text()
        again = max(float(m[1]) for m in re.finditer(r"^@([\d.]+) rank 0 start ", log, re.M))  # the new attempt
        done = max(n for s in steps(work / "data").values() for t, n in s if t < again)  # by any rank before it
        resumed = min(n for t, n in steps(work / "data")["rank-0.log"] if t > again) - 1
        print(f"the last step done before the restart: {done}; resumed after step {resumed}: "
              f"steps lost {done - resumed}")
        (work / "data" / "stop").touch()
        time.sleep(5)
        print(torchjob(kubeconfig, "describe", "lost", "-n", ns)[-2000:])
        kube.delete(Namespace, ns)
    finally:
        if op is not None:
            op.terminate()
            op.wait(30)
        if started:
            devcluster("down")
    print(f"logs: {work}")


if __name__ == "__main__":
    main()
