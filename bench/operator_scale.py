"""The operator at scale, on a real control plane (scripts/dev-cluster.sh: etcd, kube-apiserver,
kube-scheduler and KWOK fake nodes, so pods are scheduled and "run" without containers).

N jobs x 4 replicas (1 master + 3 workers) are created at once, and three (with --pytorchjobs,
four) things are measured in the same run, one after the other on the same cluster:

  1. the API server alone: the very pods the operator would create (rendered by torchjob's own
     render code) created directly by this client, 32 at a time: the ceiling any operator shares,
     for pod creation (pods/s) and for pods reaching Running (kube-scheduler's binding rate and
     KWOK's);
  2. `torchjob operator` (a process, like the kube tests run it) given N TorchJobs;
  3. with --pytorchjobs, `torchjob operator --kubeflow-api on` given the very N PyTorchJobs the
     Kubeflow peer gets, on torchjob's `pytorchjobs.kubeflow.org` CRD (`torchjob install
     --kubeflow-api`): torchjob serving Kubeflow's API;
  4. the Kubeflow training-operator v1.8.1 given N PyTorchJobs, when its binary is there
     (`bash hack/kubeflow/build.sh` builds it from the Go module proxy; --kubeflow build does
     it here), on Kubeflow's own CRD. It runs with the same number of workers
     (--controller-threads).

For each: the time until every pod exists (pods/s), until every pod is Running, until every job
is Running (by the operator's own status), the operator's memory (RSS once ready; peak = VmHWM),
its CPU time. Times are taken by a watch in this process, from the first create. Between phases
the operator is stopped and every object it made is deleted (grace period 0), so the next phase
starts from an empty namespace and free nodes.

Usage: python bench/operator_scale.py [--jobs 200] [--workers 4] [--kubeflow auto|build|no]
                                      [--pytorchjobs] [--kubeconfig PATH] [--keep-cluster]
                                      [--cluster-dir DIR]
Without --kubeconfig the bench starts its own cluster in /tmp/torchjob-bench-cluster or
--cluster-dir (never the tests' /tmp/torchjob-devcluster; every port is a free one) and stops it
at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from scale_measure import PodG, Result, clean, ensure, fmt, free_port, measure, ratio, run_operator, wait_served

try:  # the HTTP client lightkube uses (its own fork of httpx in lightkube >= 1.0)
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
CLUSTER_DIR = "/tmp/torchjob-bench-cluster"
NODES = 4
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
CONTAINER = {"name": "pytorch", "image": "example/trainer:1", "command": ["python", "train.py"]}

# Generic (dict) resources, as in scale_measure.py.
SecretG = create_namespaced_resource("", "v1", "Secret", "secrets")
NamespaceG = create_global_resource("", "v1", "Namespace", "namespaces")
NodeG = create_global_resource("", "v1", "Node", "nodes")
PyTorchJobRes = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")

KUBEFLOW_VERSION = "v1.8.1"
CACHE = Path(os.environ.get("TORCHJOB_CACHE", Path.home() / ".cache" / "torchjob"))
KUBEFLOW_DIR = CACHE / "kubeflow" / KUBEFLOW_VERSION
KUBEFLOW_BIN = KUBEFLOW_DIR / "bin" / "training-operator.v1"
KUBEFLOW_CRD = KUBEFLOW_DIR / "kubeflow.org_pytorchjobs.yaml"
# Fixed in training-operator v1.8.1 (pkg/cert/cert.go): where its cert rotator expects the webhook
# serving cert, mounted from a Secret in a real deployment; here this script plays the kubelet.
KUBEFLOW_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
KUBEFLOW_NS = "kubeflow"
KUBEFLOW_SECRET = "training-operator-webhook-cert"
TORCHJOB_PTJ = "torchjob-ptj"  # torchjob serving PyTorchJobs (--pytorchjobs)
COL = 14


# --------------------------------------------------------------------------------- objects


def torchjob(name: str, namespace: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"torchjob.dev/wait-for-master": "false"}},
                "spec": {"tolerations": [TOLERATION], "containers": [CONTAINER]}}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 3, "template": template}}}}


def pytorchjob(name: str, namespace: str) -> dict[str, Any]:
    template = {"spec": {"tolerations": [TOLERATION], "containers": [CONTAINER]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": 3, "restartPolicy": "Never", "template": template}}}}


def operator_pods(jobs: int, namespace: str) -> list[dict[str, Any]]:
    """The pods `torchjob operator` creates for these jobs, as its own render code makes them."""
    from torchjob.core.topology import replicas
    from torchjob.kube.objects import pods as kr
    from torchjob.kube.served.kinds import read_torchjob

    pods = []
    for i in range(jobs):
        job = read_torchjob(torchjob(f"j{i}", namespace))
        for rid in replicas(job):
            pod = kr.pod(job, rid, 0)
            pod["metadata"].pop("ownerReferences", None)  # no such job (and no uid to point to)
            pods.append(pod)
    return pods


def torchjob_running(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("state") == "Running")


def pytorchjob_running(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions)


async def kubeflow_certs(client: AsyncClient) -> None:
    """training-operator waits (up to ~17 min) for its webhook cert to appear as files: copy them
    from the Secret its cert rotator fills, as the kubelet's secret volume would."""
    end = time.monotonic() + 60
    while True:
        secret = await client.get(SecretG, KUBEFLOW_SECRET, namespace=KUBEFLOW_NS)
        data = secret.get("data") or {}
        if data.get("tls.crt") and data.get("tls.key"):
            break
        if time.monotonic() > end:
            raise RuntimeError(f"the training-operator did not fill the Secret {KUBEFLOW_NS}/{KUBEFLOW_SECRET}")
        await asyncio.sleep(0.2)
    KUBEFLOW_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for key in ("tls.crt", "tls.key", "ca.crt"):
        if data.get(key):
            (KUBEFLOW_CERT_DIR / key).write_bytes(base64.b64decode(data[key]))


async def use_pytorchjob_crd(client: AsyncClient, kubeconfig: str, crd: dict[str, Any]) -> None:
    """Install this `pytorchjobs.kubeflow.org` CRD (torchjob's or Kubeflow's, one replacing the
    other: server-side apply by the same manager), and wait until its objects are served by it."""
    from torchjob.kube.objects.install import apply

    await asyncio.to_thread(apply, [crd], kubeconfig)
    end = time.monotonic() + 60
    while True:
        got = await client.get(CustomResourceDefinition, crd["metadata"]["name"])
        conditions = (got.status.conditions if got.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            break
        if time.monotonic() > end:
            raise RuntimeError(f"CRD {crd['metadata']['name']} not established after 60 s")
        await asyncio.sleep(0.2)
    # The API server swaps a changed CRD's storage (schema, pruning) asynchronously.
    await asyncio.sleep(3)
    await wait_served(client, PyTorchJobRes)


async def main_async(args: argparse.Namespace, kubeconfig: str, kubeflow: bool) -> list[Result]:
    from torchjob.kube.machinery.client import TorchJobRes
    from torchjob.kube.objects.crd import crd
    from torchjob.kube.objects.install import apply
    from torchjob.kube.objects.kubeflow_crd import crd as torchjob_pytorchjob_crd

    await asyncio.to_thread(apply, [crd()], kubeconfig)
    # Long read timeout: deleting thousands of pods in one call takes more than lightkube's 10 s.
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench",
                         timeout=httpx.Timeout(120.0, connect=10.0))
    results: list[Result] = []
    try:
        await wait_served(client, TorchJobRes)
        stamp = int(time.time())
        n_pods = args.jobs * 4
        nodes = [n async for n in client.list(NodeG, labels={"type": "kwok"})]
        pods_room = sum(int(n["status"]["allocatable"].get("pods", 0)) for n in nodes)
        cpus = [str(n["status"]["allocatable"].get("cpu", "0")) for n in nodes]
        cpu_room = sum(float(c[:-1]) / 1000 if c.endswith("m") else float(c) for c in cpus)
        if pods_room < n_pods or cpu_room < n_pods * 0.05:
            raise RuntimeError(f"the fake nodes hold {pods_room} pods and {cpu_room} CPUs, {n_pods} pods and "
                               f"{n_pods * 0.05:.0f} CPUs needed: TORCHJOB_DEVCLUSTER_DIR={args.cluster_dir} "
                               "scripts/dev-cluster.sh down, and run again")

        async def direct(ns: str) -> Result:
            pods = [PodG.from_dict(p) for p in operator_pods(args.jobs, ns)]
            return await measure(client, "API server", ns, n_pods, pods, args.concurrency, args.timeout)

        def torchjob_cmd(port: int, kubeflow_api: str) -> list[str]:
            return [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig, "--no-leader-elect",
                    "--metrics-port", str(port), "--workers", str(args.workers), "--kubeflow-api", kubeflow_api]

        async def torchjob_op(ns: str) -> Result:
            port = free_port()
            return await run_operator(client, "torchjob", torchjob_cmd(port, "off"), dict(os.environ),
                                      f"http://127.0.0.1:{port}/readyz",
                                      Path(f"/tmp/torchjob-bench-operator-{stamp}.log"), ns,
                                      [TorchJobRes.from_dict(torchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                      TorchJobRes, torchjob_running, args)

        async def torchjob_pytorchjobs_op(ns: str) -> Result:
            await use_pytorchjob_crd(client, kubeconfig, torchjob_pytorchjob_crd())
            port = free_port()
            return await run_operator(client, TORCHJOB_PTJ, torchjob_cmd(port, "on"), dict(os.environ),
                                      f"http://127.0.0.1:{port}/readyz",
                                      Path(f"/tmp/torchjob-bench-operator-ptj-{stamp}.log"), ns,
                                      [PyTorchJobRes.from_dict(pytorchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                      PyTorchJobRes, pytorchjob_running, args)

        async def kubeflow_op(ns: str) -> Result:
            await use_pytorchjob_crd(client, kubeconfig, yaml.safe_load(KUBEFLOW_CRD.read_text()))
            await ensure(client, NamespaceG.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                                       "metadata": {"name": KUBEFLOW_NS}}))
            await ensure(client, SecretG.from_dict({"apiVersion": "v1", "kind": "Secret",
                                                    "metadata": {"name": KUBEFLOW_SECRET, "namespace": KUBEFLOW_NS}}))
            certs_were_there = KUBEFLOW_CERT_DIR.parent.exists()
            probe = free_port()
            cmd = [str(KUBEFLOW_BIN), "--kubeconfig", kubeconfig, "--enable-scheme=pytorchjob",
                   f"--controller-threads={args.workers}", f"--metrics-bind-address=127.0.0.1:{free_port()}",
                   f"--health-probe-bind-address=127.0.0.1:{probe}", f"--webhook-server-port={free_port()}"]
            try:
                return await run_operator(client, "kubeflow", cmd,
                                          {**os.environ, "MY_POD_NAMESPACE": KUBEFLOW_NS, "TMPDIR": "/tmp"},
                                          f"http://127.0.0.1:{probe}/readyz",
                                          Path(f"/tmp/torchjob-bench-kubeflow-{stamp}.log"), ns,
                                          [PyTorchJobRes.from_dict(pytorchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                          PyTorchJobRes, pytorchjob_running, args,
                                          while_starting=lambda: kubeflow_certs(client))
            finally:
                if not certs_were_there:
                    shutil.rmtree(KUBEFLOW_CERT_DIR.parent, ignore_errors=True)

        phases: list[tuple[str, str, Callable[[str], Any], Any]] = [
            ("API server", f"{n_pods} pods created directly", direct, None),
            ("torchjob", f"torchjob operator, {args.jobs} TorchJobs", torchjob_op, TorchJobRes),
        ]
        if args.pytorchjobs:
            phases.append((TORCHJOB_PTJ, f"torchjob operator --kubeflow-api on, {args.jobs} PyTorchJobs",
                           torchjob_pytorchjobs_op, PyTorchJobRes))
        if kubeflow:
            phases.append(("kubeflow", f"Kubeflow training-operator {KUBEFLOW_VERSION}, {args.jobs} PyTorchJobs",
                           kubeflow_op, PyTorchJobRes))
        for name, what, phase, job_res in phases:
            ns = f"bench-{name.split()[0].lower()}-{stamp}"
            await client.create(NamespaceG.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": ns}}))
            print(f"[bench] {what} ...", file=sys.stderr, flush=True)
            try:
                res = await phase(ns)
            except Exception as e:
                res = Result(name, n_pods, notes=[f"failed: {e}"])
            results.append(res)
            print(f"[bench]   {res.summary()}", file=sys.stderr, flush=True)
            try:  # the next phase starts from free nodes, and no operator caches these objects
                await clean(client, ns, job_res)
            except Exception as e:
                res.notes.append(f"cleaning {ns} failed: {e!r}")
    finally:
        await client.close()
    return results


# --------------------------------------------------------------------------------- report


def report(args: argparse.Namespace, results: list[Result], kubeflow_note: str) -> None:
    n_pods = args.jobs * 4
    print(f"\noperator at scale: {args.jobs} jobs x 4 replicas = {n_pods} pods; real kube-apiserver + kube-scheduler "
          f"+ KWOK ({NODES} fake nodes), {os.cpu_count()} cores; operators run with {args.workers} workers")
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("client's creates answered after (s)", lambda r: fmt(r.created_s)),
        ("every pod exists after (s)", lambda r: fmt(r.pods_s)),
        ("pods created per second", lambda r: fmt(r.pods_per_s, ".0f")),
        ("every pod Running after (s)", lambda r: fmt(r.pods_running_s)),
        ("every job Running after (s)", lambda r: fmt(r.jobs_running_s)),
        ("operator ready after start (s)", lambda r: fmt(r.ready_s)),
        ("operator RSS once ready (MB)", lambda r: fmt(r.rss_idle_mb, ".0f")),
        ("operator peak RSS (MB)", lambda r: fmt(r.rss_peak_mb, ".0f")),
        ("operator CPU until every pod exists (s)", lambda r: fmt(r.cpu_pods_s, ".1f")),
        ("operator CPU time, whole run (s)", lambda r: fmt(r.cpu_s, ".1f")),
    ]
    print(f"  {'':40}" + "".join(f"{r.name:>{COL}}" for r in results))
    for label, get in rows:
        print(f"  {label:40}" + "".join(f"{get(r):>{COL}}" for r in results))
    by = {r.name: r for r in results}
    api, tj, tjp, kf = by.get("API server"), by.get("torchjob"), by.get(TORCHJOB_PTJ), by.get("kubeflow")
    print("ratios (same run)")
    for op in (tj, tjp, kf):
        if op is not None and api is not None:
            print(f"  {op.name + ' pods/s / API server pods/s':56} {ratio(op.pods_per_s, api.pods_per_s)}")
            print(f"  {op.name + ' / API server: time to every pod Running':56} "
                  f"{ratio(op.pods_running_s, api.pods_running_s)}")
    for a, b in ((tj, kf), (tjp, kf), (tjp, tj)):
        if a is not None and b is not None:
            print(f"  {f'{a.name} / {b.name}: pods/s':56} {ratio(a.pods_per_s, b.pods_per_s)}")
            print(f"  {f'{a.name} / {b.name}: time to every job Running':56} "
                  f"{ratio(a.jobs_running_s, b.jobs_running_s)}")
            print(f"  {f'{a.name} / {b.name}: peak RSS':56} {ratio(a.rss_peak_mb, b.rss_peak_mb)}")
            print(f"  {f'{a.name} / {b.name}: CPU time':56} {ratio(a.cpu_s, b.cpu_s)}")
    if tj is not None:
        met = tj.pods_per_s is not None and api is not None and api.pods_per_s is not None and (
            tj.pods_per_s >= 100 or tj.pods_per_s >= api.pods_per_s)
        mem = f"{fmt(tj.rss_peak_mb, '.0f')} MB peak at {args.jobs} jobs"
        if args.jobs >= 1000 and tj.rss_peak_mb is not None:
            mem += ", met" if tj.rss_peak_mb < 150 else ", NOT met"
        print(f"targets: >= 100 pods/s or the API server's own rate: {'met' if met else 'NOT met'}; "
              f"< 150 MB at 1,000 jobs: {mem}")
    print(kubeflow_note)
    for r in results:
        for note in r.notes:
            print(f"  note ({r.name}): {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4, help="operator workers (both operators)")
    parser.add_argument("--concurrency", type=int, default=32, help="this client's creates in flight")
    parser.add_argument("--timeout", type=float, default=900, help="per phase, seconds")
    parser.add_argument("--kubeflow", choices=["auto", "build", "no"], default="auto",
                        help="auto: measure the Kubeflow training-operator when built; build: build it first")
    parser.add_argument("--pytorchjobs", action="store_true",
                        help="also measure torchjob serving the same PyTorchJobs as the Kubeflow peer "
                             "(--kubeflow-api on, torchjob's pytorchjobs.kubeflow.org CRD)")
    parser.add_argument("--kubeconfig", help="a cluster already up (with KWOK nodes, tainted kwok.x-k8s.io/node)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench's own cluster up")
    parser.add_argument("--cluster-dir", default=CLUSTER_DIR,
                        help=f"state dir of the bench's own cluster (default {CLUSTER_DIR})")
    args = parser.parse_args()

    if args.kubeflow == "build" and not KUBEFLOW_BIN.exists():
        subprocess.run(["bash", str(REPO / "hack" / "kubeflow" / "build.sh")], check=True, stdout=subprocess.DEVNULL)
    kubeflow = args.kubeflow != "no" and KUBEFLOW_BIN.exists() and KUBEFLOW_CRD.exists()
    if kubeflow:
        kubeflow_note = f"peer: Kubeflow training-operator {KUBEFLOW_VERSION} ({KUBEFLOW_BIN})"
    elif args.kubeflow == "no":
        kubeflow_note = "peer: the Kubeflow training-operator was not measured (--kubeflow no)"
    else:
        kubeflow_note = (f"peer: the Kubeflow training-operator was not measured: no {KUBEFLOW_BIN} "
                         "(bash hack/kubeflow/build.sh, or --kubeflow build)")

    kubeconfig = args.kubeconfig
    started = not kubeconfig
    # A cluster of its own (never the tests'), with room for every pod on the fake nodes: Kubeflow's
    # workers have an init container requesting 50m CPU and 10Mi, so room for that too.
    per_node = math.ceil(args.jobs * 4 / NODES) + 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVCLUSTER_")}
    env |= {"TORCHJOB_DEVCLUSTER_DIR": args.cluster_dir, "DEVCLUSTER_NODES": str(NODES),
            "DEVCLUSTER_NODE_PODS": str(max(110, per_node)), "DEVCLUSTER_NODE_CPU": str(max(32, per_node)),
            "DEVCLUSTER_NODE_MEMORY": f"{max(256, per_node)}Gi"}
    if started:
        out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "up"], capture_output=True,
                             text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"dev-cluster.sh up failed:\n{out.stderr[-3000:]}")
        kubeconfig = out.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    assert kubeconfig
    try:
        results = asyncio.run(main_async(args, kubeconfig, kubeflow))
    finally:
        if started and not args.keep_cluster:
            subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "down"], capture_output=True, env=env)
    report(args, results, kubeflow_note)


if __name__ == "__main__":
    main()
