"""The operator at scale, on a real control plane (scripts/dev-cluster.sh: etcd, kube-apiserver,
kube-scheduler and KWOK fake nodes, so pods are scheduled and "run" without containers).

N jobs x 4 replicas (1 master + 3 workers) are created at once, and three things are measured in
the same run, one after the other on the same cluster:

  1. the API server alone: the very pods the operator would create (rendered by torchjob's own
     render code) created directly by this client, 32 at a time: the ceiling any operator shares,
     for pod creation (pods/s) and for pods reaching Running (kube-scheduler's binding rate and
     KWOK's);
  2. `torchjob operator` (a process, like the kube tests run it) given N TorchJobs;
  3. the Kubeflow training-operator v1.8.1 given N PyTorchJobs, when its binary is there
     (`bash hack/kubeflow/build.sh` builds it from the Go module proxy; --kubeflow build does
     it here). It runs with the same number of workers (--controller-threads).

For each: the time until every pod exists (pods/s), until every pod is Running, until every job
is Running (by the operator's own status), the operator's memory (RSS once ready; peak = VmHWM),
its CPU time. Times are taken by a watch in this process, from the first create. Between phases
the operator is stopped and every object it made is deleted (grace period 0), so the next phase
starts from an empty namespace and free nodes.

Usage: python bench/operator_scale.py [--jobs 200] [--workers 4] [--kubeflow auto|build|no]
                                      [--kubeconfig PATH] [--keep-cluster]
Without --kubeconfig the bench starts its own cluster in /tmp/torchjob-bench-cluster (never the
tests' /tmp/torchjob-devcluster; every port is a free one) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

try:  # the HTTP client lightkube uses (its own fork of httpx in lightkube >= 1.0)
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
CLUSTER_DIR = "/tmp/torchjob-bench-cluster"
NODES = 4
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
CONTAINER = {"name": "pytorch", "image": "example/trainer:1", "command": ["python", "train.py"]}

# Generic (dict) resources: this client parses nothing it does not need, so that it takes as
# little as possible of the 2 cores the control plane and the operator share with it.
PodG = create_namespaced_resource("", "v1", "Pod", "pods")
ServiceG = create_namespaced_resource("", "v1", "Service", "services")
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
    from torchjob.kube import render as kr
    from torchjob.kube.controller import job_of

    pods = []
    for i in range(jobs):
        job = job_of(torchjob(f"j{i}", namespace))
        for rid in replicas(job):
            pod = kr.pod(job, rid, 0)
            pod["metadata"].pop("ownerReferences", None)  # no such job (and no uid to point to)
            pods.append(pod)
    return pods


def pod_running(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("phase") == "Running")


def torchjob_running(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("state") == "Running")


def pytorchjob_running(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions)


# --------------------------------------------------------------------------------- measuring


class Tracker:
    """Watches one kind in one namespace; the time (perf_counter) each object was first seen and
    first `done`."""

    def __init__(self, client: AsyncClient, res: Any, namespace: str, want: int,
                 done: Callable[[dict[str, Any]], bool]) -> None:
        self.client, self.res, self.namespace, self.want, self.is_done = client, res, namespace, want, done
        self.seen: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.all_seen, self.all_done = asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    async def start(self) -> None:
        it = self.client.list(self.res, namespace=self.namespace)
        _ = [o async for o in it]
        self.task = asyncio.create_task(self._watch(it.resourceVersion))

    async def _watch(self, rv: str) -> None:
        try:
            async for event, obj in self.client.watch(self.res, namespace=self.namespace, resource_version=rv):
                now = time.perf_counter()
                if event == "DELETED":
                    continue
                name = obj["metadata"]["name"]
                self.seen.setdefault(name, now)
                if name not in self.done and self.is_done(obj):
                    self.done[name] = now
                if len(self.seen) >= self.want:
                    self.all_seen.set()
                if len(self.done) >= self.want:
                    self.all_done.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # reported with the results
            self.error = e

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def last_seen(self, t0: float) -> float | None:
        return max(self.seen.values()) - t0 if len(self.seen) >= self.want else None

    def last_done(self, t0: float) -> float | None:
        return max(self.done.values()) - t0 if len(self.done) >= self.want else None


@dataclass
class Result:
    name: str
    pods: int
    created_s: float = math.nan  # the client's creates, all answered
    pods_s: float | None = None  # every pod exists
    pods_running_s: float | None = None  # every pod Running (scheduled, "run" by KWOK)
    jobs_running_s: float | None = None  # every job Running, by the operator's status
    ready_s: float | None = None  # operator: start to ready
    rss_idle_mb: float | None = None
    rss_peak_mb: float | None = None
    cpu_s: float | None = None
    cpu_pods_s: float | None = None  # operator CPU time until every pod exists
    notes: list[str] = field(default_factory=list)

    @property
    def pods_per_s(self) -> float | None:
        return self.pods / self.pods_s if self.pods_s else None

    def summary(self) -> str:
        return (f"{self.name}: every pod after {fmt(self.pods_s)} s ({fmt(self.pods_per_s, '.0f')}/s), Running after "
                f"{fmt(self.pods_running_s)} s, jobs Running after {fmt(self.jobs_running_s)} s, peak RSS "
                f"{fmt(self.rss_peak_mb, '.0f')} MB" + "".join(f"; {n}" for n in self.notes))


class Proc:
    """/proc numbers of one process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_sampled = 0.0

    def status_kb(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
        return 0.0

    def rss_mb(self) -> float:
        return self.status_kb("VmRSS") / 1024

    def hwm_mb(self) -> float:
        return max(self.status_kb("VmHWM") / 1024, self.peak_sampled)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    async def sample(self) -> None:
        while True:
            try:
                self.peak_sampled = max(self.peak_sampled, self.rss_mb())
            except OSError:
                return
            await asyncio.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


async def create_all(client: AsyncClient, objs: list[Any], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(o: Any) -> None:
        async with sem:
            await client.create(o)

    await asyncio.gather(*(one(o) for o in objs))


async def ensure(client: AsyncClient, obj: Any) -> None:
    try:
        await client.create(obj)
    except ApiError as e:
        if e.status.code != 409:
            raise


async def wait_served(client: AsyncClient, res: Any, timeout: float = 60) -> None:
    """Until a list of `res` answers. The first request to a new CRD's resource gets 429
    "storage is (re)initializing" (or 404 before the CRD is served); `torchjob operator` does not
    retry its first list (Informer.run), and then waits forever, never ready, so this script makes
    that first request itself."""
    end = time.monotonic() + timeout
    while True:
        try:
            _ = [o async for o in client.list(res, namespace="*")]
            return
        except Exception:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


async def clean(client: AsyncClient, namespace: str, job_res: Any | None) -> None:
    """Delete what a phase made (the operator is stopped first): jobs, pods (grace 0), services."""
    if job_res is not None:
        await client.deletecollection(job_res, namespace=namespace)
    await client.deletecollection(PodG, namespace=namespace, grace_period=0)
    services = [s async for s in client.list(ServiceG, namespace=namespace)]
    sem = asyncio.Semaphore(32)

    async def delete(name: str) -> None:
        async with sem:
            await client.delete(ServiceG, name, namespace=namespace)

    await asyncio.gather(*(delete(s["metadata"]["name"]) for s in services))
    end = time.monotonic() + 120
    while [p async for p in client.list(PodG, namespace=namespace)]:
        if time.monotonic() > end:
            raise RuntimeError(f"pods of {namespace} still there after 120 s")
        await asyncio.sleep(0.5)


# --------------------------------------------------------------------------------- phases


async def measure(client: AsyncClient, name: str, namespace: str, n_pods: int, objs: list[Any],
                  concurrency: int, timeout: float, jobs: Tracker | None = None, proc: Proc | None = None) -> Result:
    """Create `objs` at once; wait until every pod (and job) is Running or the timeout."""
    res = Result(name, n_pods)
    pods = Tracker(client, PodG, namespace, n_pods, pod_running)
    await pods.start()
    if jobs is not None:
        await jobs.start()

    async def cpu_when_all_pods() -> None:
        await pods.all_seen.wait()
        if proc is not None:
            res.cpu_pods_s = proc.cpu_s()

    marker = asyncio.create_task(cpu_when_all_pods())
    t0 = time.perf_counter()
    await create_all(client, objs, concurrency)
    res.created_s = time.perf_counter() - t0
    waits = [pods.all_seen.wait(), pods.all_done.wait(), *([jobs.all_done.wait()] if jobs else [])]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout)
    except asyncio.TimeoutError:
        res.notes.append(f"after {timeout:.0f} s: {len(pods.seen)}/{n_pods} pods exist, {len(pods.done)} Running"
                         + (f", {len(jobs.done)}/{jobs.want} jobs Running" if jobs else ""))
    marker.cancel()
    for t in (pods, jobs):
        if t is not None:
            t.stop()
            if t.error is not None:
                res.notes.append(f"the watch of {t.res.__name__} failed: {t.error!r}")
    res.pods_s, res.pods_running_s = pods.last_seen(t0), pods.last_done(t0)
    res.jobs_running_s = jobs.last_done(t0) if jobs else None
    return res


async def run_operator(client: AsyncClient, name: str, cmd: list[str], env: dict[str, str], ready_url: str,
                       log_path: Path, namespace: str, jobs: list[Any], job_res: Any,
                       job_done: Callable[[dict[str, Any]], bool], args: argparse.Namespace,
                       while_starting: Callable[[], Any] | None = None) -> Result:
    n_pods = len(jobs) * 4
    with log_path.open("wb") as log:
        t_start = time.perf_counter()
        op = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
        proc = Proc(op.pid)
        sampler = asyncio.create_task(proc.sample())
        try:
            helper = asyncio.create_task(while_starting()) if while_starting else None
            end = time.monotonic() + 120
            while not await asyncio.to_thread(http_ok, ready_url):
                if helper is not None and helper.done() and helper.exception() is not None:
                    raise RuntimeError(f"{name} not ready: {helper.exception()}")
                if op.poll() is not None or time.monotonic() > end:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    why = f"exited {op.returncode}" if op.poll() is not None else "not ready after 120 s"
                    raise RuntimeError(f"{name} {why}; {log_path}:\n{tail}")
                await asyncio.sleep(0.2)
            ready_s = time.perf_counter() - t_start
            if helper is not None:
                await helper
            await asyncio.sleep(1)
            idle = proc.rss_mb()
            tracker = Tracker(client, job_res, namespace, len(jobs), job_done)
            cpu0 = proc.cpu_s()
            res = await measure(client, name, namespace, n_pods, jobs, args.concurrency, args.timeout, tracker, proc)
            if res.cpu_pods_s is not None:
                res.cpu_pods_s -= cpu0
            res.ready_s, res.rss_idle_mb = ready_s, idle
            res.rss_peak_mb, res.cpu_s = proc.hwm_mb(), proc.cpu_s()
            if op.poll() is not None:
                res.notes.append(f"{name} exited {op.returncode} during the run; see {log_path}")
            return res
        finally:
            sampler.cancel()
            if op.poll() is None:
                op.terminate()
                try:
                    op.wait(15)
                except subprocess.TimeoutExpired:
                    op.kill()
                    op.wait()


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


async def main_async(args: argparse.Namespace, kubeconfig: str, kubeflow: bool) -> list[Result]:
    from torchjob.kube.client import TorchJobRes
    from torchjob.kube.crd import crd
    from torchjob.kube.install import apply

    objs = [crd()]
    if kubeflow:
        objs.append(yaml.safe_load(KUBEFLOW_CRD.read_text()))
    await asyncio.to_thread(apply, objs, kubeconfig)
    # Long read timeout: deleting thousands of pods in one call takes more than lightkube's 10 s.
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench",
                         timeout=httpx.Timeout(120.0, connect=10.0))
    results: list[Result] = []
    try:
        await wait_served(client, TorchJobRes)
        if kubeflow:
            await wait_served(client, PyTorchJobRes)
        stamp = int(time.time())
        n_pods = args.jobs * 4
        nodes = [n async for n in client.list(NodeG, labels={"type": "kwok"})]
        pods_room = sum(int(n["status"]["allocatable"].get("pods", 0)) for n in nodes)
        cpus = [str(n["status"]["allocatable"].get("cpu", "0")) for n in nodes]
        cpu_room = sum(float(c[:-1]) / 1000 if c.endswith("m") else float(c) for c in cpus)
        if pods_room < n_pods or cpu_room < n_pods * 0.05:
            raise RuntimeError(f"the fake nodes hold {pods_room} pods and {cpu_room} CPUs, {n_pods} pods and "
                               f"{n_pods * 0.05:.0f} CPUs needed: TORCHJOB_DEVCLUSTER_DIR={CLUSTER_DIR} "
                               "scripts/dev-cluster.sh down, and run again")

        async def direct(ns: str) -> Result:
            pods = [PodG.from_dict(p) for p in operator_pods(args.jobs, ns)]
            return await measure(client, "API server", ns, n_pods, pods, args.concurrency, args.timeout)

        async def torchjob_op(ns: str) -> Result:
            port = free_port()
            cmd = [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig, "--no-leader-elect",
                   "--metrics-port", str(port), "--workers", str(args.workers)]
            return await run_operator(client, "torchjob", cmd, dict(os.environ), f"http://127.0.0.1:{port}/readyz",
                                      Path(f"/tmp/torchjob-bench-operator-{stamp}.log"), ns,
                                      [TorchJobRes.from_dict(torchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                      TorchJobRes, torchjob_running, args)

        async def kubeflow_op(ns: str) -> Result:
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


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


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
    print(f"  {'':40}" + "".join(f"{r.name:>12}" for r in results))
    for label, get in rows:
        print(f"  {label:40}" + "".join(f"{get(r):>12}" for r in results))
    by = {r.name: r for r in results}
    api, tj, kf = by.get("API server"), by.get("torchjob"), by.get("kubeflow")
    print("ratios (same run)")
    for op in (tj, kf):
        if op is not None and api is not None:
            print(f"  {op.name + ' pods/s / API server pods/s':52} {ratio(op.pods_per_s, api.pods_per_s)}")
            print(f"  {op.name + ' / API server: time to every pod Running':52} "
                  f"{ratio(op.pods_running_s, api.pods_running_s)}")
    if tj is not None and kf is not None:
        print(f"  {'torchjob / kubeflow: pods/s':52} {ratio(tj.pods_per_s, kf.pods_per_s)}")
        print(f"  {'torchjob / kubeflow: time to every job Running':52} {ratio(tj.jobs_running_s, kf.jobs_running_s)}")
        print(f"  {'torchjob / kubeflow: peak RSS':52} {ratio(tj.rss_peak_mb, kf.rss_peak_mb)}")
        print(f"  {'torchjob / kubeflow: CPU time':52} {ratio(tj.cpu_s, kf.cpu_s)}")
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
    parser.add_argument("--kubeconfig", help="a cluster already up (with KWOK nodes, tainted kwok.x-k8s.io/node)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench's own cluster up")
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
    env |= {"TORCHJOB_DEVCLUSTER_DIR": CLUSTER_DIR, "DEVCLUSTER_NODES": str(NODES),
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
