"""A TrainJob of 2 nodes against the same job as a TorchJob, on the dev cluster's real node.

The same two replicas (torchrun, one process each, joining a gloo group, all-reducing and exiting:
tests/programs/ddp_step.py), measured in one run, alternating, REPEAT times each:

  1. a Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`, the torch-distributed
     runtime) served by torchjob's operator;
  2. the TorchJob the TrainJob dialect reads it as (`torchjob convert` of the same document),
     applied as a TorchJob.

Each from the create to every pod's training container Running, and to the job's end condition
(TrainJob `Complete`, TorchJob `Succeeded`), polled from this process every 50 ms. The operator is
one process on the host serving both kinds.

Usage: python bench/trainjob_real_node.py [--repeat 3] [--kubeconfig PATH] [--keep-cluster]
Without --kubeconfig it starts its own real-node cluster (root) in /tmp/torchjob-bench-trainjob on
the pod subnet 10.252.0.0/24, so it runs beside the tests', and stops it at the end.
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
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.e2e.images import STANDINS, TESTS_IMAGE  # noqa: E402

from torchjob.api.source import Document  # noqa: E402
from torchjob.dialects import trainjob as trainjob_dialect  # noqa: E402
from torchjob.kube.machinery import client as _kinds  # noqa: E402,F401 (registers Trainer's kinds for the codecs)
from torchjob.kube.objects.install import apply  # noqa: E402
from torchjob.kube.objects.install.crd import crd  # noqa: E402
from torchjob.kube.served import trainer_objects  # noqa: E402

CLUSTER_DIR = "/tmp/torchjob-bench-trainjob"
SUBNET = "10.252.0.0/24"
INIT_IMAGE = "localhost/torchjob-e2e:dev"
TorchJobG = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
TrainJobG = create_namespaced_resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")


def devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": CLUSTER_DIR, "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNET": SUBNET}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=3600)


def trainjob(ns: str) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"image": TESTS_IMAGE, "numNodes": 2, "numProcPerNode": 1,
                                 "command": ["torchrun", "/opt/tests/ddp_step.py"]}}}


def as_torchjob(data: dict[str, Any]) -> dict[str, Any]:
    """The TorchJob the dialect reads the TrainJob as (what `torchjob convert` writes)."""
    doc = Document(data, "bench", companions=[Document(trainer_objects.default_runtime(TESTS_IMAGE), "runtime")])
    out: dict[str, Any] = trainjob_dialect.read(doc).job.model_dump(mode="json", exclude_none=True,
                                                                  exclude={"status"})
    return out


def ended(status: dict[str, Any], kind: str) -> bool:
    want = "Complete" if kind == "TrainJob" else "Succeeded"
    return any(c.get("type") == want and c.get("status") == "True" for c in status.get("conditions") or [])


def run_one(kube: Client, kind: str) -> tuple[float, float]:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    data = trainjob(ns)
    res = TrainJobG if kind == "TrainJob" else TorchJobG
    body = data if kind == "TrainJob" else as_torchjob(data)
    t0 = time.monotonic()
    kube.create(res.from_dict(body))
    running = 0.0
    end = time.monotonic() + 240
    while time.monotonic() < end:
        pods = list(kube.list(Pod, namespace=ns))
        if not running and len(pods) == 2 and all(
                any(cs.state and (cs.state.running or cs.state.terminated) for cs in (p.status.containerStatuses or []))
                for p in pods if p.status):
            running = time.monotonic() - t0
        if ended(kube.get(res, "bench", namespace=ns).get("status") or {}, kind):
            done = time.monotonic() - t0
            kube.delete(Namespace, ns)
            return running or done, done
        time.sleep(0.05)
    raise SystemExit(f"{kind} did not end in 240 s in {ns}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kubeconfig")
    ap.add_argument("--keep-cluster", action="store_true")
    args = ap.parse_args()
    started = not args.kubeconfig
    if started:
        up = devcluster("up", "--real-node")
        if up.returncode != 0:
            raise SystemExit(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-4000:]}")
        args.kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
    operator = None
    results: dict[str, list[tuple[float, float]]] = {"TrainJob": [], "TorchJob": []}
    try:
        crds = [crd(), *trainer_objects.crds()]
        apply(crds, args.kubeconfig)
        kube = Client(config=KubeConfig.from_file(args.kubeconfig), field_manager="torchjob-bench")
        time.sleep(2)  # the CRDs served
        apply([trainer_objects.default_runtime(TESTS_IMAGE)], args.kubeconfig)
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = Path(tmpdir)
            if started:
                (tmp / "images.json").write_text(json.dumps(STANDINS))
                built = devcluster("image", str(tmp / "images.json"))
                if built.returncode != 0:
                    raise SystemExit(f"dev-cluster.sh image failed:\n{built.stderr[-4000:]}")
            operator = subprocess.Popen(
                [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", args.kubeconfig, "--no-leader-elect",
                 "--init-image", INIT_IMAGE, "--metrics-port", "0", "--health-port", "0"],
                stdout=subprocess.DEVNULL, stderr=open(tmp / "operator.log", "w"))  # noqa: SIM115
            run_one(kube, "TorchJob")  # a first pod start warms the node: not counted
            for _ in range(args.repeat):
                results["TrainJob"].append(run_one(kube, "TrainJob"))
                results["TorchJob"].append(run_one(kube, "TorchJob"))
    finally:
        if operator:
            operator.terminate()
            operator.wait(10)
        if started and not args.keep_cluster:
            devcluster("down")
    med = {k: [statistics.median(r[i] for r in v) for i in range(2)] for k, v in results.items()}
    print(f"2 nodes x 1 process (torchrun, gloo all-reduce, exit) on the real node; median of {args.repeat}, "
          "seconds from the create")
    print(f"  {'':34}{'every pod Running':>18}{'job ended':>12}")
    for kind, label in (("TrainJob", "TrainJob (Complete)"), ("TorchJob", "same job as TorchJob (Succeeded)")):
        print(f"  {label:34}{med[kind][0]:18.2f}{med[kind][1]:12.2f}")
    print(f"ratio TrainJob / TorchJob: Running {med['TrainJob'][0] / med['TorchJob'][0]:.2f}, "
          f"ended {med['TrainJob'][1] / med['TorchJob'][1]:.2f}")
    print(yaml.safe_dump({"runs": results}, default_flow_style=True).strip(), file=sys.stderr)


if __name__ == "__main__":
    main()
