"""A 1 + 3 DDP job on the dev cluster's real node, against the floor and a local run.

Three ways to run the same four replicas (each joins a gloo group, all-reduces and exits:
tests/programs/ddp_step.py), measured in one run, alternating, REPEAT times each:

  1. torchjob on Kubernetes: a TorchJob applied to the API server; the operator (a process on the
     host) makes the headless Service and the pods, the kubelet runs them;
  2. the floor: the very Service and four pods the operator would make (torchjob's own render
     code, wait-for-master init containers included), created directly by this client, so the
     difference is the operator's whole cost;
  3. torchjob locally: `torchjob run` of the same job as four processes.

For 1 and 2: from the first create to every pod's training container Running, and to every pod
Succeeded (for torchjob: to its `Succeeded` condition). For 3: from the command's start to its
end. Times are taken by polling the API server every 50 ms from this process.

Usage: python bench/real_node.py [--repeat 3] [--kubeconfig PATH] [--keep-cluster]
Without --kubeconfig it starts its own real-node cluster (root) in /tmp/torchjob-bench-realnode
on the pod subnet 10.251.0.0/24, so it runs beside the tests' (10.250.0.0/24), and stops it at
the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.e2e.images import STANDINS, TESTS_IMAGE  # noqa: E402
from tests.jobs import job_data  # noqa: E402

from torchjob.api.load import job_from_data  # noqa: E402
from torchjob.kube.objects.install import apply  # noqa: E402
from torchjob.kube.objects.install.crd import crd  # noqa: E402
from torchjob.kube.objects.workload import pods as render  # noqa: E402

CLUSTER_DIR = "/tmp/torchjob-bench-realnode"
SUBNET = "10.251.0.0/24"
INIT_IMAGE = "localhost/torchjob-e2e:dev"
TorchJobG = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
ServiceG = create_namespaced_resource("", "v1", "Service", "services")


def devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": CLUSTER_DIR, "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNET": SUBNET}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=3600)


def the_job(name: str, script: str) -> dict[str, Any]:
    data = job_data(name, workers=3, restart_policy="Never", command=("python", script))
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = TESTS_IMAGE
    return data


def training_running(pod: Any) -> bool:
    return any(cs.name == "pytorch" and cs.state and cs.state.running
               for cs in (pod.status.containerStatuses or []) if pod.status)


def training_exited(pod: Any) -> bool:
    return any(cs.name == "pytorch" and cs.state and cs.state.terminated
               for cs in (pod.status.containerStatuses or []) if pod.status)


def all_exited(pods: list[Any]) -> bool:
    return len(pods) == 4 and all(training_exited(p) for p in pods)


def watch_pods(kube: Client, ns: str, t0: float, done: Any, timeout: float = 180) -> tuple[float, float]:
    """Seconds from t0 until the 4 training containers run, and until `done()` holds."""
    running = 0.0
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pods = list(kube.list(Pod, namespace=ns))
        if not running and len(pods) == 4 and all(training_running(p) or training_exited(p) for p in pods):
            running = time.monotonic() - t0
        if done(pods):
            return running or time.monotonic() - t0, time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"no end in {timeout}s in {ns}: {[(p.metadata.name, p.status.phase) for p in pods]}")


def fresh_namespace(kube: Client) -> str:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    return ns


def with_operator(kube: Client) -> tuple[float, float, float]:
    ns = fresh_namespace(kube)
    data = the_job("bench", "/opt/tests/ddp_step.py")
    data["metadata"]["namespace"] = ns
    t0 = time.monotonic()
    kube.create(TorchJobG.from_dict(data))

    succeeded_at = 0.0

    def succeeded(pods: list[Any]) -> bool:
        nonlocal succeeded_at
        status = kube.get(TorchJobG, "bench", namespace=ns).get("status") or {}
        if not succeeded_at and any(c["type"] == "Succeeded" and c["status"] == "True"
                                    for c in status.get("conditions", [])):
            succeeded_at = time.monotonic() - t0
        return bool(succeeded_at) and all_exited(pods)

    running, exited = watch_pods(kube, ns, t0, succeeded)
    kube.delete(Namespace, ns)
    return running, exited, succeeded_at


def floor(kube: Client) -> tuple[float, ...]:
    ns = fresh_namespace(kube)
    data = the_job("bench", "/opt/tests/ddp_step.py")
    data["metadata"].update(namespace=ns, uid=str(uuid.uuid4()))
    objects = [o for o in render.manifests(job_from_data(data), init_image=INIT_IMAGE)
               if o["kind"] in ("Service", "Pod")]
    for o in objects:  # no owner: there is no TorchJob
        o["metadata"].pop("ownerReferences", None)
        o["metadata"]["namespace"] = ns
    t0 = time.monotonic()
    for o in objects:
        kube.create(ServiceG.from_dict(o) if o["kind"] == "Service" else Pod.from_dict(o))
    times = watch_pods(kube, ns, t0, all_exited)
    kube.delete(Namespace, ns)
    return times


def local(tmp: Path) -> float:
    data = the_job("bench-local", str(REPO / "tests" / "programs" / "ddp_step.py"))
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "TORCHJOB_HOME": str(tmp / "home")}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "torchjob", "run", "-q", str(path)], capture_output=True,
                         text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"local run failed: {out.stderr}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kubeconfig")
    ap.add_argument("--keep-cluster", action="store_true")
    args = ap.parse_args()

    started = not args.kubeconfig
    if started:
        t = time.monotonic()
        up = devcluster("up", "--real-node")
        if up.returncode != 0:
            raise SystemExit(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-4000:]}")
        args.kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
        print(f"real-node cluster up in {time.monotonic() - t:.0f}s", file=sys.stderr)
    operator = None
    try:
        apply([crd()], args.kubeconfig)
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = Path(tmpdir)
            (tmp / "images.json").write_text(json.dumps(STANDINS))
            if started:
                built = devcluster("image", str(tmp / "images.json"))
                if built.returncode != 0:
                    raise SystemExit(f"dev-cluster.sh image failed:\n{built.stderr[-4000:]}")
            kube = Client(config=KubeConfig.from_file(args.kubeconfig), field_manager="torchjob-bench")
            operator = subprocess.Popen(
                [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", args.kubeconfig, "--no-leader-elect",
                 "--init-image", INIT_IMAGE, "--metrics-port", "0", "--health-port", "0"],
                stdout=subprocess.DEVNULL, stderr=open(tmp / "operator.log", "w"))  # noqa: SIM115
            results: dict[str, list[tuple[float, ...]]] = {"torchjob": [], "floor": [], "local": []}
            floor(kube)  # a first pod start warms the node (image snapshots, page cache): not counted
            for _ in range(args.repeat):
                results["floor"].append(floor(kube))
                results["torchjob"].append(with_operator(kube))
                t = local(tmp)
                results["local"].append((t, t, t))
    except ApiError as e:
        raise SystemExit(f"API error: {e}")
    finally:
        if operator:
            operator.terminate()
            operator.wait(10)
        if started and not args.keep_cluster:
            devcluster("down")
    report(results, args.repeat)


def report(results: dict[str, list[tuple[float, ...]]], repeat: int) -> None:
    med = {k: [statistics.median(r[i] if i < len(r) else 0.0 for r in v) for i in range(3)] for k, v in results.items()}
    print(f"a 1+3 DDP job (join a gloo group, all-reduce, exit) on the real node; median of {repeat}, seconds "
          "from the first create")
    print(f"  {'':34}{'every pod Running':>18}{'every replica exited':>22}{'job Succeeded':>15}")
    print(f"  {'pods created directly (the floor)':34}{med['floor'][0]:18.2f}{med['floor'][1]:22.2f}{'-':>15}")
    print(f"  {'torchjob operator (TorchJob)':34}{med['torchjob'][0]:18.2f}{med['torchjob'][1]:22.2f}"
          f"{med['torchjob'][2]:15.2f}")
    print(f"  {'torchjob run, locally':34}{'-':>18}{med['local'][1]:22.2f}{'-':>15}")
    print("ratios (same run)")
    print(f"  torchjob / floor: every pod Running     {med['torchjob'][0] / med['floor'][0]:.2f}")
    print(f"  torchjob / floor: every replica exited  {med['torchjob'][1] / med['floor'][1]:.2f}")
    print(f"  local / torchjob on the node            {med['local'][1] / med['torchjob'][1]:.2f}")


if __name__ == "__main__":
    main()
