"""The admitters of a big job, for bench/operator_scale.py's phases `volcano` and `kueue` (--job-pods):
Volcano's scheduler (vc-scheduler v1.10.0, hack/volcano/build.sh) and Kueue's manager (v0.13.2,
hack/kueue/build.sh), each run alone as a process against the bench's cluster, as the tests run them
(tests/kube/volcano.py, tests/kube/test_kueue_real.py), and the job each is given: the very TorchJob
of the `torchjob` phase with a gang (schedulingPolicy: Volcano binds its pods once all of them fit)
or a Kueue queue (the operator holds the job suspended behind a Workload until Kueue admits it).

Built when missing (minutes, once per machine). Kueue's metrics server needs a key pair at a path its
v0.13 fixes (/etc/kueue/metrics/certs): the cluster's API server pair is copied there, as the tests do."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace

from scale_measure import free_port

REPO = Path(__file__).resolve().parents[1]
VOLCANO = "volcano"  # the pods' schedulerName: the cluster's kube-scheduler leaves them to vc-scheduler
QUEUE = "bench"  # the Kueue LocalQueue the job names
POD_CPU = "10m"  # each pod's request, which Kueue counts against the ClusterQueue's quota
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
ResourceFlavor = create_global_resource("kueue.x-k8s.io", "v1beta1", "ResourceFlavor", "resourceflavors")
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues")
LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues")


def gang(job: dict[str, Any]) -> dict[str, Any]:
    """The job as one gang for Volcano: every pod needed at once."""
    pods = sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values())
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"schedulerName": VOLCANO, "minAvailable": pods}}
    return job


def queued(job: dict[str, Any]) -> dict[str, Any]:
    """The job in Kueue's queue: each pod requests POD_CPU, which the whole job's admission counts."""
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = QUEUE
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"] = [{**c, "resources": {"requests": {"cpu": POD_CPU}}}
                                                  for c in rspec["template"]["spec"]["containers"]]
    return job


def _build(script: str) -> Path:
    out = subprocess.run(["bash", str(REPO / "hack" / script / "build.sh")], capture_output=True, text=True,
                         timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"hack/{script}/build.sh failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _apply_crds(kube: Client, crds: Path) -> None:
    for path in sorted(crds.glob("*.yaml")):
        for obj in codecs.load_all_yaml(path.read_text()):
            kube.apply(obj, force=True)
            name, end = str(obj.metadata.name if obj.metadata else ""), time.monotonic() + 60
            while not _established(kube.get(CustomResourceDefinition, name)):
                if time.monotonic() > end:
                    raise RuntimeError(f"CRD {name} not established in 60 s")
                time.sleep(0.2)


def _established(crd: CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status is not None else None
    return any(c.type == "Established" and c.status == "True" for c in conditions or [])


def _wait(ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    end = time.monotonic() + 120
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > end:
            raise RuntimeError(f"{what} not ready in 120 s:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _scheduling_cycles(port: int) -> int:
    """How many scheduling sessions vc-scheduler has run (its /metrics): the first comes once it has synced."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return 0
    m = re.search(r"^volcano_e2e_scheduling_latency_milliseconds_count (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


@contextmanager
def vc_scheduler(kubeconfig: str, work: Path) -> Iterator[str]:
    """vc-scheduler against the cluster, scheduling (its `default` Queue it makes itself); yields its log's path."""
    binary = _build("volcano")
    _apply_crds(Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench"),
                binary.parent.parent / "crds")
    conf = work / "conf" / "scheduler.conf"  # a directory of its own: it reloads on any write there
    conf.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "hack" / "volcano" / "scheduler.conf", conf)
    metrics, log_path = free_port(), work / "vc-scheduler.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(binary), f"--kubeconfig={kubeconfig}", f"--scheduler-conf={conf}", f"--scheduler-name={VOLCANO}",
             "--leader-elect=false", "--enable-metrics=true", f"--listen-address=127.0.0.1:{metrics}",
             "--enable-healthz=true", f"--healthz-address=127.0.0.1:{free_port()}", "--cache-dumper=false",
             "--logtostderr", "-v=1"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            env={**os.environ, "DEBUG_SOCKET_DIR": str(work / "socks"), "KUBECONFIG": kubeconfig})
        try:
            _wait(lambda: _scheduling_cycles(metrics) > 0, proc, log_path, "vc-scheduler")
            yield str(log_path)
        finally:
            _stop(proc)


def _serving_cert(kubeconfig: str, into: Path) -> None:
    pki = Path(kubeconfig).parent / "pki" / "apiserver"
    into.mkdir(parents=True, exist_ok=True)
    name = "apiserver" if (pki / "apiserver.crt").exists() else "tls"
    shutil.copy(pki / f"{name}.crt", into / "tls.crt")
    shutil.copy(pki / f"{name}.key", into / "tls.key")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def kueue(kubeconfig: str, work: Path, namespace: str, pods: int) -> Iterator[str]:
    """Kueue's manager against the cluster, integrating TorchJobs, with a ClusterQueue whose CPU quota
    holds the job's `pods` (POD_CPU each) and the LocalQueue QUEUE in `namespace`; yields its log's path."""
    binary = _build("kueue")
    kube = Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench")
    _apply_crds(kube, binary.parent.parent / "crds")
    try:
        kube.create(Namespace(metadata=ObjectMeta(name="kueue-system")))
    except ApiError as e:
        if e.status.code != 409:
            raise
    _serving_cert(kubeconfig, KUEUE_METRICS_CERTS)
    _serving_cert(kubeconfig, work / "certs")
    health = free_port()
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": "kueue-system",
              "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
              "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
              "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(work / "certs")},
              "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
              "integrations": {"frameworks": ["batch/job"], "externalFrameworks": ["TorchJob.v1.torchjob.dev"]}}
    (work / "config.yaml").write_text(json.dumps(config))
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    quota = f"{pods * int(POD_CPU.removesuffix('m')) // 1000 + 1}"
    kube.create(ResourceFlavor.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                          "metadata": {"name": flavor}}))
    kube.create(ClusterQueue.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": quota}]}]}]}}))
    kube.create(LocalQueue.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                      "metadata": {"name": QUEUE, "namespace": namespace},
                                      "spec": {"clusterQueue": cq}}))
    log_path = work / "kueue.log"
    with log_path.open("wb") as log:
        # VisibilityOnDemand serves an aggregated API that needs in-cluster delegated authentication.
        proc = subprocess.Popen([str(binary), "--config", str(work / "config.yaml"),
                                 "--feature-gates=VisibilityOnDemand=false"],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env={**os.environ, "KUBECONFIG": kubeconfig})
        try:
            _wait(lambda: _ready(f"http://127.0.0.1:{health}/readyz"), proc, log_path, "Kueue")
            yield str(log_path)
        finally:
            _stop(proc)
            for res, name in ((ClusterQueue, cq), (ResourceFlavor, flavor)):
                try:
                    kube.delete(res, name)
                except ApiError:
                    pass
