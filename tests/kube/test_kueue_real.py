"""The operator with a real Kueue manager (v0.13.2, built from the Go module proxy by
hack/kueue/build.sh) on the real control plane: Kueue admits the operator's Workloads as its
ClusterQueue's quota allows, and a finished job frees the quota for the next one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from tests.jobs import job_data
from tests.kube.conftest import REPO, Operator, finished, free_port, set_pod, wait_established, wait_job
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.machinery.client import KueueResourceFlavor, KueueWorkload, TorchJobRes
from torchjob.kube.objects.admission import kueue

pytestmark = [pytest.mark.kube, pytest.mark.timeout(2400)]  # the first may build Kueue (~5 min)
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues")
LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues")
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue v0.13 when it manages no certs itself


def build_kueue() -> Path:
    out = subprocess.run(["bash", str(REPO / "hack" / "kueue" / "build.sh")], capture_output=True, text=True,
                         timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"hack/kueue/build.sh failed:\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def serving_cert(kubeconfig: str, into: Path) -> None:
    """Kueue's metrics and webhook servers need a key pair; the dev cluster's apiserver pair will do
    (nothing here calls them over TLS). The real node's cluster names it tls.crt (its own CA's)."""
    pki = Path(kubeconfig).parent / "pki" / "apiserver"
    into.mkdir(parents=True, exist_ok=True)
    name = "apiserver" if (pki / "apiserver.crt").exists() else "tls"
    shutil.copy(pki / f"{name}.crt", into / "tls.crt")
    shutil.copy(pki / f"{name}.key", into / "tls.key")


def kueue_manager_config(work: Path, health: int, frameworks: list[str],
                         external: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
        "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(work / "certs")},
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": frameworks, "externalFrameworks": external},
    }


@contextmanager
def running_kueue(kubeconfig: str, kube: Client, work: Path, config: dict[str, Any]) -> Iterator[Path]:
    """Kueue's manager as a process with this Configuration (its CRDs applied first), ready: the
    directory of its build (crds/, webhooks.yaml)."""
    binary = build_kueue()
    for path in sorted((binary.parent.parent / "crds").glob("*.yaml")):
        for obj in codecs.load_all_yaml(path.read_text()):
            kube.apply(obj, force=True)
            wait_established(kube, obj.metadata.name)
    try:
        kube.create(Namespace(metadata=ObjectMeta(name="kueue-system")))
    except ApiError as e:
        if e.status.code != 409:
            raise
    serving_cert(kubeconfig, METRICS_CERTS)
    serving_cert(kubeconfig, work / "certs")
    health = int(config["health"]["healthProbeBindAddress"].rsplit(":", 1)[1])
    (work / "config.yaml").write_text(json.dumps(config))
    log = (work / "kueue.log").open("wb")
    # VisibilityOnDemand serves an aggregated API that needs in-cluster delegated authentication.
    proc = subprocess.Popen([str(binary), "--config", str(work / "config.yaml"),
                             "--feature-gates=VisibilityOnDemand=false"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env={**os.environ, "KUBECONFIG": kubeconfig})
    try:
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (work / "kueue.log").read_text()[-4000:]
            assert time.monotonic() < end, "Kueue not ready in 120 s:\n" + (work / "kueue.log").read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        yield binary.parent.parent
    finally:
        proc.terminate()
        proc.wait(30)
        print((work / "kueue.log").read_text()[-3000:])


@pytest.fixture(scope="module")
def kueue_manager(kubeconfig: str, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    work = tmp_path_factory.mktemp("kueue")
    config = kueue_manager_config(work, free_port(), ["batch/job"], ["TorchJob.v1.torchjob.dev"])
    with running_kueue(kubeconfig, kube, work, config):
        yield


def queued(name: str, queue: str) -> dict[str, Any]:
    data = job_data(name, workers=1)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: queue}
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return data


def running_on_admission(kube: Client, name: str, namespace: str) -> bool:
    """Resumed by the operator after Kueue admitted its Workload."""
    try:
        admitted = conditions(kube, f"torchjob-{name}", namespace).get("Admitted", {}).get("status") == "True"
    except ApiError:
        return False  # no Workload yet
    spec = kube.get(TorchJobRes, name, namespace=namespace).spec
    return admitted and (spec.get("runPolicy") or {}).get("suspend") is False


def conditions(kube: Client, workload: str, namespace: str) -> dict[str, dict[str, Any]]:
    status = kube.get(KueueWorkload, workload, namespace=namespace).status or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def quota(kube: Client, namespace: str, cpus: int, queue: str = "team-a") -> str:
    """A ResourceFlavor with a node label, a ClusterQueue of `cpus` CPUs on it and a LocalQueue
    `queue` in the namespace: the flavor's name (its node label's value)."""
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    kube.create(KueueResourceFlavor.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                               "metadata": {"name": flavor},
                                               "spec": {"nodeLabels": {"example.com/pool": flavor}}}))
    kube.create(ClusterQueue.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}}))
    kube.create(LocalQueue.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                      "metadata": {"name": queue, "namespace": namespace},
                                      "spec": {"clusterQueue": cq}}))
    return flavor


def test_a_real_kueue_admits_jobs_as_its_quota_allows_and_a_finished_job_frees_it(
        kube: Client, namespace: str, operator: Operator, kueue_manager: None) -> None:
    flavor = quota(kube, namespace, 2)  # one 2-pod job at a time
    create(kube, queued("qa", "team-a"), namespace)
    create(kube, queued("qb", "team-a"), namespace)

    end = time.monotonic() + 60
    while sum(running_on_admission(kube, j, namespace) for j in ("qa", "qb")) != 1:
        assert time.monotonic() < end, [conditions(kube, f"torchjob-{j}", namespace) for j in ("qa", "qb")]
        time.sleep(0.2)
    first, second = ("qa", "qb") if running_on_admission(kube, "qa", namespace) else ("qb", "qa")
    # Kueue has looked at it with the ClusterQueue in its cache: on a loaded machine its first answer can be
    # "ClusterQueue ... doesn't exist" (its cache had the LocalQueue first), which the quota's answer follows
    while True:
        waiting = conditions(kube, f"torchjob-{second}", namespace).get("QuotaReserved")
        if waiting is not None and "doesn't exist" not in waiting.get("message", ""):
            break
        assert time.monotonic() < end, conditions(kube, f"torchjob-{second}", namespace)
        time.sleep(0.2)
    assert waiting["status"] == "False" and "insufficient unused quota" in waiting["message"]
    assert conditions(kube, f"torchjob-{first}", namespace)["Admitted"]["status"] == "True"
    pods = wait_pods(kube, first, namespace, 2)
    assert all(p.spec.nodeSelector == {"example.com/pool": flavor} for p in pods)  # Kueue's flavor
    assert pods_of(kube, second, namespace) == []

    for p in pods:
        set_pod(kube, p, "Running")
    wait_job(kube, first, namespace, lambda s: s.get("state") == "Running")
    set_pod(kube, next(p for p in pods if p.metadata.name == f"{first}-master-0"), "Succeeded", 0)
    wait_job(kube, first, namespace, finished)
    # Finished -> Kueue releases the quota -> admits the other job -> the operator resumes it.
    assert wait_pods(kube, second, namespace, 2)
    assert conditions(kube, f"torchjob-{first}", namespace)["Finished"]["status"] == "True"
    assert conditions(kube, f"torchjob-{second}", namespace)["Admitted"]["status"] == "True"
