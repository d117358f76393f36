"""The operator at scale, on a real control plane (scripts/dev-cluster.sh: etcd, kube-apiserver,
kube-scheduler and KWOK fake nodes, so pods are scheduled and "run" without containers).

N jobs x 4 replicas (1 master + 3 workers) are created at once, and these phases are measured in
the same run, one after the other on the same cluster (--phases picks some, in this order):

  api       the API server alone: the very pods the operator would create (as `torchjob render
            --kube` renders them) created directly by this client, 32 at a time: the ceiling any
            operator shares, for pod creation (pods/s) and for pods reaching Running
            (kube-scheduler's binding rate and KWOK's);
  before    with --baseline-src DIR: `torchjob operator` run from that source tree (PYTHONPATH),
            given N TorchJobs, on that tree's CRD: "torchjob (before)", for a before/after table
            in one sitting;
  torchjob  `torchjob operator` (a process, like the kube tests run it; from --src, else the
            torchjob this Python imports) given N TorchJobs;
  floor     the writes floor: the very writes the operator makes for each job (status, events,
            Service, pods; see scale_floor.py), made by this client with the operator's
            concurrency (--workers) and no operator, given the same N TorchJobs;
  volcano   `torchjob operator` given the same TorchJobs, each one gang (schedulingPolicy
            schedulerName volcano, minAvailable every pod) that Volcano's vc-scheduler (built by
            hack/volcano/build.sh, run alone) admits and binds: "torchjob+volcano";
  kueue     `torchjob operator` given the same TorchJobs in a Kueue queue (each pod requesting 10m
            CPU), Kueue's manager (hack/kueue/build.sh, run alone) admitting each whole job by a
            ClusterQueue's quota that holds them all: "torchjob+kueue" (bench/admitters.py);
  ptj       with --pytorchjobs, `torchjob operator --kubeflow-api on` given the very N
            PyTorchJobs the Kubeflow peer gets, on torchjob's `pytorchjobs.kubeflow.org` CRD
            (`torchjob install --kubeflow-api`): torchjob serving Kubeflow's API;
  kubeflow  the Kubeflow training-operator v1.8.1 given N PyTorchJobs, when its binary is there
            (`bash hack/kubeflow/build.sh` builds it from the Go module proxy; --kubeflow build
            does it here), on Kubeflow's own CRD. It runs with the same number of workers
            (--controller-threads).

For each: the time until every pod exists (pods/s), until every pod is Running, until every job
is Running (by the operator's own status; jobs Running per second), the operator's memory (RSS
once ready; peak = VmHWM), its CPU time. Times are taken by a watch in this process, from the
first create. Between phases the operator is stopped and every object it made is deleted (grace
period 0), so the next phase starts from an empty namespace and free nodes.

With --job-pods N: one TorchJob of a master and N-1 workers instead (phases api, before, torchjob,
floor): from its create to every pod Running against the floor's same writes (its status writes cut
to the three any operator makes: Created, every pod made, Running); then, while each runs, its gang
restart (a worker fails, exit 137) to every pod of the next attempt Running, against the floor's
delete-and-create of the same pods by this client; then `torchjob describe --kube`, `list --kube`
and the dashboard's job page timed (bench/big_job.py).

torchjob is reached through its command line only (`torchjob render --kube`, `torchjob install
--dry-run --crd-only`, `torchjob operator`), never its kube modules, which move.

Usage: python bench/operator_scale.py [--jobs 200] [--workers 4] [--kubeflow auto|build|no]
                                      [--pytorchjobs] [--src DIR] [--baseline-src DIR]
                                      [--phases api,before,torchjob,floor,ptj,kubeflow]
                                      [--rounds N] [--job-pods N] [--nodes 4] [--timeout S] [--kubeconfig PATH]
                                      [--keep-cluster] [--cluster-dir DIR]
With --rounds N the phases run N times, interleaved (in their order, then reversed, and so on;
each round in fresh namespaces, --jobs jobs per phase and round): each round's table and ratios
are printed, then each ratio's median, least and greatest over the rounds. On a shared machine a
load change between two phases moves one run's ratio more than the code does; over rounds that
alternate, it weighs on both sides alike.
Without --kubeconfig the bench starts its own cluster in /tmp/torchjob-bench-cluster or
--cluster-dir (never the tests' /tmp/torchjob-devcluster; every port is a free one) and stops it
at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

import admitters
import big_job
from scale_floor import ANY_NAME, ANY_NAMESPACE, Plan, Written, least, objects
from scale_measure import (
    PodG,
    Proc,
    Result,
    clean,
    ensure,
    fmt,
    measure,
    run_operator,
    wait_served,
)
from torchjob.local.start.ports import free_port

try:  # the HTTP client lightkube uses (its own fork of httpx in lightkube >= 1.0)
    import httpx2 as httpx
except ImportError:
    import httpx  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
CLUSTER_DIR = "/tmp/torchjob-bench-cluster"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
CONTAINER = {"name": "pytorch", "image": "example/trainer:1", "command": ["python", "train.py"]}
# What pods are told to report progress to: `torchjob render --kube`'s default; the operator is
# given it with a free --progress-port, so that it never collides with another on this machine.
PROGRESS_URL = "https://torchjob-operator.torchjob-system.svc:8443"

# Generic (dict) resources, as in scale_measure.py.
TorchJobRes = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
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
BEFORE = "torchjob (before)"  # torchjob from --baseline-src
FLOOR = "writes floor"
PHASES = ("api", "before", "torchjob", "floor", "volcano", "kueue", "ptj", "kubeflow")
ADMITTED = {"volcano": "torchjob+volcano", "kueue": "torchjob+kueue"}  # torchjob given admitters (admitters.py)
TORCHJOB_CRD, PYTORCHJOB_CRD = "torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"
INSTALL_MANAGER = "torchjob-install"  # `torchjob install`'s field manager: the bench applies CRDs as it does


# --------------------------------------------------------------------------------- objects


def torchjob(name: str, namespace: str, workers: int = 3) -> dict[str, Any]:
    # A grace of 0: a deleted pod (the gang restart's) is removed by the API server at once, as the floor's are
    # (the same template). With a grace, KWOK removes it, by name only (a kubelet's delete names the pod's uid):
    # a delete of KWOK's asked again after a timeout took the next attempt's pod of that name once it ran, and
    # the operator restarted the gang for it (uncounted: a deletion), again and again (two 4,096-pod runs).
    template = {"metadata": {"annotations": {"torchjob.dev/wait-for-master": "false"}},
                "spec": {"tolerations": [TOLERATION], "containers": [CONTAINER], "terminationGracePeriodSeconds": 0}}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


def pytorchjob(name: str, namespace: str) -> dict[str, Any]:
    template = {"spec": {"tolerations": [TOLERATION], "containers": [CONTAINER]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": 3, "restartPolicy": "Never", "template": template}}}}


def torchjob_running(obj: dict[str, Any]) -> bool:
    return bool((obj.get("status") or {}).get("state") == "Running")


def pytorchjob_running(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions)


class Tree:
    """A torchjob source tree, reached through its command line only (`python -m torchjob` with
    PYTHONPATH=src in front; src None: the torchjob this Python imports)."""

    def __init__(self, src: str | None, workers: int = 3) -> None:
        self.src = str(Path(src).resolve()) if src else None
        self.workers = workers  # of each bench job (--job-pods: one job of a master and N-1 workers)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.src:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self.src, env.get("PYTHONPATH")) if p)
        return env

    def run(self, *args: str) -> str:
        out = subprocess.run([sys.executable, *args], env=self.env(), capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} (PYTHONPATH={self.src}) failed:\n{out.stderr[-3000:]}")
        return out.stdout

    @functools.cached_property
    def where(self) -> str:
        """The torchjob package this tree's command runs (to say in the table which code ran)."""
        return self.run("-c", "import os, torchjob; print(os.path.dirname(torchjob.__file__))").strip()

    @functools.cached_property
    def crds(self) -> dict[str, dict[str, Any]]:
        """This tree's CRDs (TorchJob's, and its pytorchjobs.kubeflow.org), by name."""
        out = self.run("-m", "torchjob", "install", "--dry-run", "--crd-only", "--kubeflow-api")
        return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d.get("kind") ==
                "CustomResourceDefinition"}

    @functools.cached_property
    def rendered(self) -> str:
        """What `torchjob render --kube` says the operator creates for one bench job, named
        ANY_NAME in ANY_NAMESPACE (JSON)."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(torchjob(ANY_NAME, ANY_NAMESPACE, self.workers), f)
            f.flush()
            objs = json.loads(self.run("-m", "torchjob", "render", "--kube", f.name, "-o", "json"))
        kinds = sorted(o["kind"] for o in objs)
        if kinds != ["Pod"] * (self.workers + 1) + ["Service"]:
            raise RuntimeError(f"torchjob render --kube gave {len(kinds)} objects for the bench's job, not "
                               f"{self.workers + 1} pods and a Service")
        return json.dumps(objs)

    def pods(self, jobs: int, namespace: str) -> list[dict[str, Any]]:
        return [o for i in range(jobs) for o in objects(self.rendered, f"j{i}", namespace, None) if o["kind"] == "Pod"]


def apply_crd(kubeconfig: str, crd: dict[str, Any]) -> str:
    """Server-side apply a CRD, as `torchjob install` does (same field manager: one CRD of a name
    replaces the other's fields); returns its resourceVersion."""
    from lightkube import Client, codecs

    client = Client(config=KubeConfig.from_file(kubeconfig), field_manager=INSTALL_MANAGER)
    try:
        got = client.apply(codecs.from_dict(crd), force=True)
        return str(got.metadata.resourceVersion if got.metadata else "")
    finally:
        client.close()


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


async def use_crd(client: AsyncClient, kubeconfig: str, crd: dict[str, Any], res: Any) -> None:
    """Install this CRD (a tree's or Kubeflow's, one replacing the other: server-side apply by the
    same manager), and wait until its objects are served by it."""
    name = crd["metadata"]["name"]
    try:
        rv0 = getattr((await client.get(CustomResourceDefinition, name)).metadata, "resourceVersion", None)
    except Exception:
        rv0 = None
    rv = await asyncio.to_thread(apply_crd, kubeconfig, crd)
    end = time.monotonic() + 60
    while True:
        got = await client.get(CustomResourceDefinition, name)
        conditions = (got.status.conditions if got.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            break
        if time.monotonic() > end:
            raise RuntimeError(f"CRD {name} not established after 60 s")
        await asyncio.sleep(0.2)
    if rv != rv0:  # the API server swaps a changed CRD's storage (schema, pruning) asynchronously
        await asyncio.sleep(3)
    await wait_served(client, res)


async def memory_report(path: Path, op: subprocess.Popen[bytes], res: Result) -> None:
    """Ask the operator run by bench/operator_memory.py where its memory is (SIGUSR1), and note it."""
    path.unlink(missing_ok=True)
    op.send_signal(signal.SIGUSR1)
    end = time.monotonic() + 300
    while not path.exists():
        if time.monotonic() > end or op.poll() is not None:
            res.notes.append(f"no memory report in {path}")
            return
        await asyncio.sleep(0.5)
    data = json.loads(path.read_text())
    parts = [f"memory (report in {path}): RSS {data['rss_mb']:.0f} MB at the end"]
    for inf in data["informers"]:
        fields = ", ".join(f"{k} {v:.1f}" for k, v in list(inf["by_field_mb"].items())[:8])
        parts.append(f"{inf['kind']} cache {inf['objects']} objects, {inf['mb']:.1f} MB "
                     f"({inf['bytes_per_object']:.0f} B each; MB by field: {fields})")
    other = ", ".join(f"{t} {v['mb']:.1f}" for t, v in list(data["other_by_type"].items())[:6])
    parts.append(f"other Python objects by type (MB): {other}")
    res.notes.append("; ".join(parts))


# --------------------------------------------------------------------------------- phases


def round_order(phases: list[str], n: int) -> list[str]:
    """The phases of round n (from 0): in their order, then reversed, and so on, so that a load
    that rises (or falls) through a round weighs on each phase alike over two rounds. The floor
    replays what the last torchjob phase wrote, so the first round keeps the order."""
    return list(reversed(phases)) if n % 2 else list(phases)


async def main_async(args: argparse.Namespace, kubeconfig: str, phases: list[str],
                     last_clean: bool) -> list[list[Result]]:
    workers = args.pods - 1
    tree, baseline = Tree(args.src, workers), Tree(args.baseline_src, workers) if args.baseline_src else None
    # Long read timeout: deleting thousands of pods in one call takes more than lightkube's 10 s.
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench",
                         timeout=httpx.Timeout(120.0, connect=10.0))
    rounds: list[list[Result]] = []
    written: dict[str, Written] = {}  # what each torchjob phase's operator wrote
    try:
        await use_crd(client, kubeconfig, tree.crds[TORCHJOB_CRD], TorchJobRes)
        stamp = int(time.time())
        tag = str(stamp)  # in each phase's namespace and files: the round's with --rounds
        n_pods = args.jobs * args.pods
        nodes = [n async for n in client.list(NodeG, labels={"type": "kwok"})]
        pods_room = sum(int(n["status"]["allocatable"].get("pods", 0)) for n in nodes)
        cpus = [str(n["status"]["allocatable"].get("cpu", "0")) for n in nodes]
        cpu_room = sum(float(c[:-1]) / 1000 if c.endswith("m") else float(c) for c in cpus)
        if pods_room < n_pods or cpu_room < n_pods * 0.05:
            raise RuntimeError(f"the fake nodes hold {pods_room} pods and {cpu_room} CPUs, {n_pods} pods and "
                               f"{n_pods * 0.05:.0f} CPUs needed: TORCHJOB_DEVCLUSTER_DIR={args.cluster_dir} "
                               "scripts/dev-cluster.sh down, and run again")

        async def direct(ns: str) -> Result:
            pods = [PodG.from_dict(p) for p in tree.pods(args.jobs, ns)]
            return await measure(client, "API server", ns, n_pods, pods, args.concurrency, args.timeout)

        def torchjob_cmd(port: int, kubeflow_api: str) -> list[str]:
            return [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig, "--no-leader-elect",
                    "--metrics-port", "0", "--health-port", str(port), "--workers", str(args.workers),
                    "--kubeflow-api", kubeflow_api,
                    "--progress-port", str(free_port()), "--progress-url", PROGRESS_URL]

        async def big_after(ns: str, code: Tree | None, then: Any, act: Any, op: subprocess.Popen[bytes],
                            res: Result) -> None:
            """--job-pods, once every pod runs: the gang restart (`act`), then (`code`: an operator's
            phase) describe, list and the dashboard timed, then `then` (the memory report)."""
            proc = Proc(op.pid)
            cpu0 = proc.cpu_s()
            await big_job.restart(client, ns, n_pods, res, args.timeout, act)
            if code is not None:
                res.notes.append(f"operator CPU during the gang restart: {proc.cpu_s() - cpu0:.1f} s")
                await asyncio.to_thread(big_job.readers, kubeconfig, ns, "j0", code.env(), res)
            if then is not None:
                await then(op, res)

        async def torchjob_op(ns: str, name: str, code: Tree,
                              shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Result:
            """`shape`: each job changed for an admitter (admitters.py); then no gang restart nor readers."""
            await use_crd(client, kubeconfig, code.crds[TORCHJOB_CRD], TorchJobRes)
            port = free_port()
            seen = written[name] = Written()
            label = name.split()[-1].strip("()")
            log = Path(f"/tmp/torchjob-bench-operator-{label}-{tag}.log")
            cmd, after = torchjob_cmd(port, "off"), None
            if args.profile_memory:  # the operator under bench/operator_memory.py, asked once all is Running
                profile = Path(f"/tmp/torchjob-bench-memory-{label}-{tag}.json")
                cmd = [cmd[0], str(Path(__file__).with_name("operator_memory.py")), "--out", str(profile), "--",
                       *cmd[1:]]
                after = functools.partial(memory_report, profile)
            if args.job_pods and shape is None:  # the gang restart, then the readers, while the operator runs
                after = functools.partial(big_after, ns, code, after,
                                          big_job.fail_one(client, ns, "j0", n_pods))
            res = await run_operator(client, name, cmd, code.env(), f"http://127.0.0.1:{port}/readyz", log, ns,
                                     [TorchJobRes.from_dict((shape or (lambda j: j))(torchjob(f"j{i}", ns, workers)))
                                      for i in range(args.jobs)],
                                     TorchJobRes, torchjob_running, args, observe=seen, after=after)
            await seen.count_events(client, ns, "TorchJob")
            res.notes.append(f"ran {code.where}; wrote {fmt(seen.writes_per_job())} status writes and "
                             f"{fmt(seen.events_per_job())} events per job")
            return res

        async def floor(ns: str) -> Result:
            await use_crd(client, kubeconfig, tree.crds[TORCHJOB_CRD], TorchJobRes)
            plan = Plan.of(written.get("torchjob") or written.get(BEFORE))
            plan = least(plan) if args.job_pods else plan
            plan_file, rendered_file = Path(f"/tmp/torchjob-bench-floor-plan-{tag}.json"), Path(
                f"/tmp/torchjob-bench-floor-objects-{tag}.json")
            plan_file.write_text(json.dumps(dataclasses.asdict(plan)))
            rendered_file.write_text(tree.rendered)
            port = free_port()
            cmd = [sys.executable, str(Path(__file__).with_name("scale_floor.py")), "--kubeconfig", kubeconfig,
                   "--namespace", ns, "--workers", str(args.workers), "--port", str(port), "--plan", str(plan_file),
                   "--rendered", str(rendered_file)]
            log = Path(f"/tmp/torchjob-bench-floor-{tag}.log")
            again = big_job.delete_and_create(client, ns, args.concurrency)
            restart = functools.partial(big_after, ns, None, None, again) if args.job_pods else None
            jobs = [TorchJobRes.from_dict(torchjob(f"j{i}", ns, workers)) for i in range(args.jobs)]
            res = await run_operator(client, FLOOR, cmd, dict(os.environ), f"http://127.0.0.1:{port}/readyz", log,
                                     ns, jobs, TorchJobRes, torchjob_running, args, after=restart)
            lines = log.read_text(errors="replace").strip().splitlines()
            try:  # the writer's last line: what it wrote
                made = json.loads(lines[-1])
            except (IndexError, ValueError):
                res.notes.append(f"the writer said nothing of its writes; see {log}")
            else:
                writes = ", ".join(f"{n} {what}" for what, n in sorted(made["writes"].items()))
                res.notes.append(f"wrote {writes}; {made['source']}")
                res.notes.extend(f"{n} x {err}" for err, n in made["errors"].items())
            return res

        async def admitted_op(ns: str, admitter: str) -> Result:
            """torchjob given the same jobs, each admitted by Volcano's gang or Kueue's quota (admitters.py)."""
            work = Path(tempfile.mkdtemp(prefix=f"torchjob-bench-{admitter}-"))
            if admitter == "volcano":
                running, shape = admitters.vc_scheduler(kubeconfig, work), admitters.gang
            else:
                running, shape = admitters.kueue(kubeconfig, work, ns, n_pods), admitters.queued
            with running as log:
                res = await torchjob_op(ns, ADMITTED[admitter], tree, shape)
            res.notes.append(f"{admitter}'s log: {log}")
            return res

        async def torchjob_pytorchjobs_op(ns: str) -> Result:
            await use_crd(client, kubeconfig, tree.crds[PYTORCHJOB_CRD], PyTorchJobRes)
            port = free_port()
            return await run_operator(client, TORCHJOB_PTJ, torchjob_cmd(port, "on"), tree.env(),
                                      f"http://127.0.0.1:{port}/readyz",
                                      Path(f"/tmp/torchjob-bench-operator-ptj-{tag}.log"), ns,
                                      [PyTorchJobRes.from_dict(pytorchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                      PyTorchJobRes, pytorchjob_running, args)

        async def kubeflow_op(ns: str) -> Result:
            await use_crd(client, kubeconfig, yaml.safe_load(KUBEFLOW_CRD.read_text()), PyTorchJobRes)
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
                                          Path(f"/tmp/torchjob-bench-kubeflow-{tag}.log"), ns,
                                          [PyTorchJobRes.from_dict(pytorchjob(f"j{i}", ns)) for i in range(args.jobs)],
                                          PyTorchJobRes, pytorchjob_running, args,
                                          while_starting=lambda: kubeflow_certs(client))
            finally:
                if not certs_were_there:
                    shutil.rmtree(KUBEFLOW_CERT_DIR.parent, ignore_errors=True)

        table: dict[str, tuple[str, str, Callable[[str], Any], Any]] = {
            "api": ("API server", f"{n_pods} pods created directly", direct, None),
            "before": (BEFORE, f"torchjob operator from {args.baseline_src}, {args.jobs} TorchJobs",
                       lambda ns: torchjob_op(ns, BEFORE, baseline or tree), TorchJobRes),
            "torchjob": ("torchjob", f"torchjob operator, {args.jobs} TorchJobs",
                         lambda ns: torchjob_op(ns, "torchjob", tree), TorchJobRes),
            "floor": (FLOOR, f"the operator's writes for {args.jobs} TorchJobs, made directly with "
                             f"{args.workers} workers", floor, TorchJobRes),
            "volcano": (ADMITTED["volcano"], f"torchjob operator, {args.jobs} TorchJobs as Volcano gangs",
                        lambda ns: admitted_op(ns, "volcano"), TorchJobRes),
            "kueue": (ADMITTED["kueue"], f"torchjob operator, {args.jobs} TorchJobs admitted by Kueue",
                      lambda ns: admitted_op(ns, "kueue"), TorchJobRes),
            "ptj": (TORCHJOB_PTJ, f"torchjob operator --kubeflow-api on, {args.jobs} PyTorchJobs",
                    torchjob_pytorchjobs_op, PyTorchJobRes),
            "kubeflow": ("kubeflow", f"Kubeflow training-operator {KUBEFLOW_VERSION}, {args.jobs} PyTorchJobs",
                         kubeflow_op, PyTorchJobRes),
        }
        n_rounds = args.rounds or 1
        for r in range(n_rounds):
            results: list[Result] = []
            rounds.append(results)
            order = round_order(phases, r)
            for n, key in enumerate(order):
                name, what, phase, job_res = table[key]
                tag = f"{stamp}-r{r + 1}" if args.rounds else str(stamp)
                ns = f"bench-{key}-{tag}"
                await client.create(NamespaceG.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}}))
                at = f" (round {r + 1} of {n_rounds})" if args.rounds else ""
                print(f"[bench] {what}{at} ...", file=sys.stderr, flush=True)
                try:
                    res = await phase(ns)
                except Exception as e:
                    res = Result(name, n_pods, notes=[f"failed: {e}"])
                results.append(res)
                print(f"[bench]   {res.summary()}", file=sys.stderr, flush=True)
                if r == n_rounds - 1 and n == len(order) - 1 and not last_clean:
                    break  # the cluster goes with everything in it
                try:  # the next phase starts from free nodes, and no operator caches these objects
                    await clean(client, ns, job_res, n_pods)
                except Exception as e:
                    res.notes.append(f"cleaning {ns} failed: {e!r}")
    finally:
        await client.close()
    return rounds


# --------------------------------------------------------------------------------- report


def rel(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def ratios(results: list[Result]) -> list[tuple[str, float | None]]:
    """Each operator against its peers among `results` (measured in the same run, or round)."""
    by = {r.name: r for r in results}
    api, tj, tjp, kf = by.get("API server"), by.get("torchjob"), by.get(TORCHJOB_PTJ), by.get("kubeflow")
    before, floor = by.get(BEFORE), by.get(FLOOR)
    out: list[tuple[str, float | None]] = []
    for op in (before, tj, tjp, kf):
        if op is not None and api is not None:
            out.append((op.name + " pods/s / API server pods/s", rel(op.pods_per_s, api.pods_per_s)))
            out.append((op.name + " / API server: time to every pod Running",
                        rel(op.pods_running_s, api.pods_running_s)))
    if tj is not None and before is not None:
        for label, now, then in (("pods/s", tj.pods_per_s, before.pods_per_s),
                                 ("jobs Running/s", tj.jobs_per_s, before.jobs_per_s),
                                 ("time to every job Running", tj.jobs_running_s, before.jobs_running_s),
                                 ("CPU until every pod exists", tj.cpu_pods_s, before.cpu_pods_s),
                                 ("CPU time", tj.cpu_s, before.cpu_s),
                                 ("peak RSS", tj.rss_peak_mb, before.rss_peak_mb)):
            out.append((f"torchjob / {BEFORE}: {label}", rel(now, then)))
    for op in (before, tj):
        if op is not None and floor is not None:
            out.append((f"{op.name} / {FLOOR}: every pod Running", rel(op.pods_running_s, floor.pods_running_s)))
            if op.restart_s is not None or floor.restart_s is not None:
                out.append((f"{op.name} / {FLOOR}: gang restart, every pod Running again",
                            rel(op.restart_s, floor.restart_s)))
            out.append((f"{op.name} / {FLOOR}: jobs Running/s", rel(op.jobs_per_s, floor.jobs_per_s)))
            out.append((f"{op.name} / {FLOOR}: pods/s", rel(op.pods_per_s, floor.pods_per_s)))
            out.append((f"{op.name} / {FLOOR}: CPU until every pod exists", rel(op.cpu_pods_s, floor.cpu_pods_s)))
            out.append((f"{op.name} / {FLOOR}: CPU time", rel(op.cpu_s, floor.cpu_s)))
            out.append((f"{op.name} / {FLOOR}: peak RSS", rel(op.rss_peak_mb, floor.rss_peak_mb)))
    for a, b in ((tj, kf), (tjp, kf), (tjp, tj)):
        if a is not None and b is not None:
            out.append((f"{a.name} / {b.name}: pods/s", rel(a.pods_per_s, b.pods_per_s)))
            out.append((f"{a.name} / {b.name}: time to every job Running", rel(a.jobs_running_s, b.jobs_running_s)))
            out.append((f"{a.name} / {b.name}: peak RSS", rel(a.rss_peak_mb, b.rss_peak_mb)))
            out.append((f"{a.name} / {b.name}: CPU time", rel(a.cpu_s, b.cpu_s)))
    for admitted in (by.get(name) for name in ADMITTED.values()):  # what an admitter adds to torchjob alone
        if admitted is not None and tj is not None:
            out.append((f"{admitted.name} / torchjob: every pod Running",
                        rel(admitted.pods_running_s, tj.pods_running_s)))
            out.append((f"{admitted.name} / torchjob: operator CPU time", rel(admitted.cpu_s, tj.cpu_s)))
    return out


def table(args: argparse.Namespace, results: list[Result], title: str) -> None:
    """The figures of each phase of `results`, then their ratios."""
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("client's creates answered after (s)", lambda r: fmt(r.created_s)),
        ("every pod exists after (s)", lambda r: fmt(r.pods_s)),
        ("pods created per second", lambda r: fmt(r.pods_per_s, ".0f")),
        ("every pod Running after (s)", lambda r: fmt(r.pods_running_s)),
        ("every job Running after (s)", lambda r: fmt(r.jobs_running_s)),
        ("jobs Running per second", lambda r: fmt(r.jobs_per_s, ".1f")),
        ("operator ready after start (s)", lambda r: fmt(r.ready_s)),
        ("operator RSS once ready (MB)", lambda r: fmt(r.rss_idle_mb, ".0f")),
        ("operator peak RSS (MB)", lambda r: fmt(r.rss_peak_mb, ".0f")),
        ("operator CPU until every pod exists (s)", lambda r: fmt(r.cpu_pods_s, ".1f")),
        ("operator CPU time, whole run (s)", lambda r: fmt(r.cpu_s, ".1f")),
        *(big_job.rows(results) if args.job_pods else []),
    ]
    col = max([14, *(len(r.name) + 2 for r in results)])
    print(f"  {'':40}" + "".join(f"{r.name:>{col}}" for r in results))
    for label, get in rows:
        print(f"  {label:40}" + "".join(f"{get(r):>{col}}" for r in results))
    print(title)
    for label, value in ratios(results):
        print(f"  {label:60} {fmt(value)}")


def header(args: argparse.Namespace) -> str:
    sched = " (QPS 1000, no default spreading)" if args.fast_scheduler and not args.kubeconfig else ""
    shape = (f"one job of {args.pods} pods (a master and {args.pods - 1} workers)" if args.job_pods else
             f"{args.jobs} jobs x 4 replicas = {args.jobs * 4} pods")
    return (f"operator at scale: {shape}; real kube-apiserver + "
            f"kube-scheduler{sched} + KWOK ({args.nodes} fake nodes), {os.cpu_count()} cores; operators run with "
            f"{args.workers} workers")


def targets(args: argparse.Namespace, results: list[Result], floor_rel: float | None, floor_how: str) -> None:
    """The issue's goals, of `results` (the peak RSS: the highest of them); the floor's ratio as given."""
    by = {r.name: r for r in results}
    api, tj, floor = by.get("API server"), by.get("torchjob"), by.get(FLOOR)
    out = []
    if tj is not None and api is not None:
        met = tj.pods_per_s is not None and api.pods_per_s is not None and (
            tj.pods_per_s >= 100 or tj.pods_per_s >= api.pods_per_s)
        out.append(f">= 100 pods/s or the API server's own rate: {'met' if met else 'NOT met'}")
    if tj is not None and floor is not None and args.job_pods:
        out.append(f"<= 1.1x the writes floor's time to every pod Running: {floor_how}{fmt(floor_rel)}, "
                   + ("met" if floor_rel is not None and floor_rel <= 1.1 else "NOT met"))
    elif tj is not None and floor is not None:
        out.append(f">= 0.8x the writes floor's jobs Running/s: {floor_how}{fmt(floor_rel)}, "
                   + ("met" if floor_rel is not None and floor_rel >= 0.8 else "NOT met"))
    if tj is not None and tj.reads:
        out.append(f"readers: {big_job.goal(tj.reads)}")
    tjs = [r for r in results if r.name == "torchjob"]
    if tjs:
        peaks = [r.rss_peak_mb for r in tjs if r.rss_peak_mb is not None]
        peak = max(peaks) if peaks else None
        mem = f"< 150 MB peak: {fmt(peak, '.0f')} MB at {args.jobs} jobs"
        if args.jobs >= 1000 and peak is not None:
            mem += ", met" if peak < 150 else ", NOT met"
        out.append(mem)
        if any(r.jobs_running_s is None for r in tjs):
            out.append("every job Running: NOT met")
    if out:
        print("targets: " + "; ".join(out))


def notes(results: list[Result], where: str = "") -> None:
    for r in results:
        for note in r.notes:
            print(f"  note ({r.name}{where}): {note}")


def report(args: argparse.Namespace, results: list[Result], kubeflow_note: str) -> None:
    print("\n" + header(args))
    table(args, results, "ratios (same run)")
    by = {r.name: r for r in results}
    tj, floor = by.get("torchjob"), by.get(FLOOR)
    floor_rel = None
    if tj and floor:
        floor_rel = (rel(tj.pods_running_s, floor.pods_running_s) if args.job_pods
                     else rel(tj.jobs_per_s, floor.jobs_per_s))
    targets(args, results, floor_rel, "")
    print(kubeflow_note)
    notes(results)


def report_rounds(args: argparse.Namespace, rounds: list[list[Result]], kubeflow_note: str) -> None:
    """Each round's table and ratios (each against its peers of the same round), then each ratio's
    median, least and greatest over the rounds."""
    print(f"\n{header(args)}; {len(rounds)} rounds, the phases interleaved (each round in a fresh namespace, "
          "the order reversed every other round)")
    for n, results in enumerate(rounds):
        print(f"round {n + 1}: " + ", ".join(r.name for r in results))
        table(args, results, f"ratios (round {n + 1})")
    by_label: dict[str, list[float | None]] = {}
    for results in rounds:
        for label, value in ratios(results):
            by_label.setdefault(label, []).append(value)
    print(f"ratios over {len(rounds)} rounds: median (least-greatest), then each round's")
    for label, values in by_label.items():
        got = [v for v in values if v is not None]
        spread = f"{statistics.median(got):.2f} ({min(got):.2f}-{max(got):.2f})" if got else "-"
        if got and len(got) < len(values):  # a phase that did not finish: said, not hidden
            spread += f" of {len(got)}"
        print(f"  {label:60} {spread:>18}   " + " ".join(fmt(v) for v in values))
    goal = "every pod Running" if args.job_pods else "jobs Running/s"
    floor_rel = by_label.get(f"torchjob / {FLOOR}: {goal}") or []
    got = [v for v in floor_rel if v is not None]
    median = statistics.median(got) if got and len(got) == len(floor_rel) else None
    targets(args, [r for results in rounds for r in results], median, f"median of {len(rounds)} rounds ")
    print(kubeflow_note)
    for n, results in enumerate(rounds):
        notes(results, f", round {n + 1}")


def interrupted(*_: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4, help="operator workers (every operator, and the floor's)")
    parser.add_argument("--concurrency", type=int, default=32, help="this client's creates in flight")
    parser.add_argument("--timeout", type=float, help="per phase, seconds (default: 900, or a second per 20 pods)")
    parser.add_argument("--kubeflow", choices=["auto", "build", "no"], default="auto",
                        help="auto: measure the Kubeflow training-operator when built; build: build it first")
    parser.add_argument("--pytorchjobs", action="store_true",
                        help="also measure torchjob serving the same PyTorchJobs as the Kubeflow peer "
                             "(--kubeflow-api on, torchjob's pytorchjobs.kubeflow.org CRD)")
    parser.add_argument("--src", help="the torchjob source tree measured as 'torchjob' (put first on PYTHONPATH; "
                                      "default: the torchjob this Python imports)")
    parser.add_argument("--baseline-src", help="also measure the operator of this source tree, as "
                                               f"'{BEFORE}', in the same run (e.g. a worktree before a change)")
    parser.add_argument("--phases", help=f"comma-separated, of {','.join(PHASES)} (run in that order); default: "
                                         "api, before (with --baseline-src), torchjob, floor, ptj (with "
                                         "--pytorchjobs), kubeflow (when built)")
    parser.add_argument("--profile-memory", action="store_true",
                        help="run torchjob's operators under bench/operator_memory.py and note where their memory "
                             "is once every job is Running (its informer caches, by field)")
    parser.add_argument("--fast-scheduler", action="store_true",
                        help="the bench's own cluster's kube-scheduler with client QPS 1000 (default 50: it binds "
                             "~50 pods/s) and no default topology spreading (with thousands of Services in a "
                             "namespace it weighs every pod against every pod): for runs of many thousand jobs")
    parser.add_argument("--rounds", type=int,
                        help="run the phases N times, interleaved (the order reversed every other round, each "
                             "round in fresh namespaces), --jobs jobs per phase in each round; print each round's "
                             "figures and each ratio's median, least and greatest: ratios that a load change "
                             "between phases does not swamp")
    parser.add_argument("--job-pods", type=int, metavar="N",
                        help="one TorchJob of N pods (a master and N-1 workers) instead of --jobs jobs of 4: from its "
                             "create to every pod Running against the writes floor's same pods; then its gang "
                             "restart (a worker fails, exit 137) against the floor's delete-and-create of the same "
                             "pods; then `torchjob describe --kube`, `list --kube` and the dashboard's job page timed")
    parser.add_argument("--nodes", type=int, default=4, help="KWOK fake nodes of the bench's own cluster")
    parser.add_argument("--kubeconfig", help="a cluster already up (with KWOK nodes, tainted kwok.x-k8s.io/node)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench's own cluster up")
    parser.add_argument("--cluster-dir", default=CLUSTER_DIR,
                        help=f"state dir of the bench's own cluster (default {CLUSTER_DIR})")
    args = parser.parse_args()
    # Stopped (SIGTERM, or SIGINT, which a shell's background job ignores): the phase's operator and
    # the bench's own cluster are stopped on the way out.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, interrupted)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: a round count is 1 or more (or leave --rounds out for one pass)")
    if args.job_pods is not None:
        if args.job_pods < 2:
            parser.error(f"--job-pods {args.job_pods}: a job of a master and at least one worker is 2 pods or more")
        if args.phases and any(p in args.phases for p in ("ptj", "kubeflow")):
            parser.error("--job-pods measures TorchJobs: phases api, before, torchjob, floor, volcano and kueue")
        args.jobs, args.pods, args.kubeflow, args.pytorchjobs = 1, args.job_pods, "no", False
    else:
        args.pods = 4
    if args.timeout is None:
        args.timeout = max(900.0, args.jobs * args.pods / 20)

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
    if args.phases:
        asked = [p.strip() for p in args.phases.split(",") if p.strip()]
        unknown = [p for p in asked if p not in PHASES]
        if unknown:
            parser.error(f"--phases: no such phase {', '.join(unknown)} (of {', '.join(PHASES)})")
        if "before" in asked and not args.baseline_src:
            parser.error("--phases before needs --baseline-src")
        if "kubeflow" in asked and not kubeflow:
            parser.error(f"--phases kubeflow: {kubeflow_note}")
        phases = [p for p in PHASES if p in asked]
    else:
        phases = ["api", *(["before"] if args.baseline_src else []), "torchjob", "floor",
                  *(["ptj"] if args.pytorchjobs else []), *(["kubeflow"] if kubeflow else [])]
    if "kubeflow" not in phases and kubeflow:
        kubeflow_note = "peer: the Kubeflow training-operator was not measured (--phases)"

    kubeconfig = args.kubeconfig
    started = not kubeconfig
    # A cluster of its own (never the tests'), with room for every pod on the fake nodes: Kubeflow's
    # workers have an init container requesting 50m CPU and 10Mi, so room for that too.
    per_node = math.ceil(args.jobs * args.pods / args.nodes) + 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVCLUSTER_")}
    env |= {"TORCHJOB_DEVCLUSTER_DIR": args.cluster_dir, "DEVCLUSTER_NODES": str(args.nodes),
            "DEVCLUSTER_NODE_PODS": str(max(110, per_node)), "DEVCLUSTER_NODE_CPU": str(max(32, per_node)),
            "DEVCLUSTER_NODE_MEMORY": f"{max(256, per_node)}Gi"}
    if started and args.fast_scheduler:
        config = Path(tempfile.gettempdir()) / f"torchjob-bench-scheduler-{os.getpid()}.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": f"{args.cluster_dir}/kube-scheduler.kubeconfig", "qps": 1000,
                                 "burst": 2000},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [
                {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}}]}],
        }))
        env["DEVCLUSTER_SCHEDULER_ARGS"] = f"--config={config}"
    if started:
        out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "up"], capture_output=True,
                             text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"dev-cluster.sh up failed:\n{out.stderr[-3000:]}")
        kubeconfig = out.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    assert kubeconfig
    try:
        rounds = asyncio.run(main_async(args, kubeconfig, phases, last_clean=not started or args.keep_cluster))
    finally:
        if started and not args.keep_cluster:
            subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "down"], capture_output=True, env=env)
    if args.rounds:
        report_rounds(args, rounds, kubeflow_note)
    else:
        report(args, rounds[0], kubeflow_note)


if __name__ == "__main__":
    main()
