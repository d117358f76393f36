"""The admitters, each run alone as a process against a cluster, as cluster admin: Volcano's scheduler
(vc-scheduler, built from the Go module proxy by hack/volcano/build.sh; no vc-controller-manager, no webhooks)
and Kueue's manager (v0.13.2, hack/kueue/build.sh). Used by tests/kube (test_volcano_real.py,
test_kueue_real.py, ...), tests/e2e, tests/incluster and bench/admitters.py; they work against any cluster given
an admin kubeconfig."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from tests.kube.conftest import REPO, free_port, wait_established

SCHEDULER_NAME = "volcano"  # pods' schedulerName; the dev cluster's kube-scheduler only takes default-scheduler
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues")
LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues")
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue v0.13 when it manages no certs itself


def build(what: str) -> Path:
    """hack/WHAT/build.sh (minutes the first time on a machine, then cached): the binary's path."""
    out = subprocess.run(["bash", str(REPO / "hack" / what / "build.sh")], capture_output=True, text=True,
                         timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"hack/{what}/build.sh failed:\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def apply_crds(kube: Client, crds: Path) -> None:
    for path in sorted(crds.glob("*.yaml")):
        for obj in codecs.load_all_yaml(path.read_text()):
            kube.apply(obj, force=True)
            wait_established(kube, obj.metadata.name)


def scheduling_cycles(metrics_port: int) -> int:
    """How many scheduling sessions vc-scheduler has run (its own /metrics); it runs the first only
    after its informers have synced."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return 0
    m = re.search(r"^volcano_e2e_scheduling_latency_milliseconds_count (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


@contextmanager
def run_vc_scheduler(kubeconfig: str, kube: Client, work: Path, verbosity: int = 3
                     ) -> Iterator[subprocess.Popen[bytes]]:
    """Build (once per machine) and start vc-scheduler against the cluster of `kubeconfig`, as
    cluster admin; return when it schedules. It needs only its CRDs: it creates the `default`
    Queue itself (pkg/scheduler/cache/cache.go, newDefaultQueue), and the Queue's state (which the
    controller manager keeps) is not read by the scheduler. Its log: work/vc-scheduler.log (`verbosity`: -v)."""
    binary = build("volcano")
    apply_crds(kube, binary.parent.parent / "crds")
    # In a directory of its own: vc-scheduler reloads it on any write in its directory (its log's too).
    conf = work / "conf" / "scheduler.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "hack" / "volcano" / "scheduler.conf", conf)
    metrics, healthz = free_port(), free_port()
    log_path = work / "vc-scheduler.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [str(binary), f"--kubeconfig={kubeconfig}", f"--scheduler-conf={conf}",
         f"--scheduler-name={SCHEDULER_NAME}", "--leader-elect=false",
         # Both off by default (else on :8080 and :11251, all interfaces); readiness is read from /metrics.
         "--enable-metrics=true", f"--listen-address=127.0.0.1:{metrics}",
         "--enable-healthz=true", f"--healthz-address=127.0.0.1:{healthz}",
         "--cache-dumper=false", "--logtostderr", f"-v={verbosity}"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        # Its log-level socket is /tmp/klog-socks/klog.sock by default: one per machine. Its vGPU
        # device code makes its own client at start, from $KUBECONFIG or else ~/.kube/config.
        env={**os.environ, "DEBUG_SOCKET_DIR": str(work / "socks"), "KUBECONFIG": kubeconfig})
    try:
        end = time.monotonic() + 120
        while scheduling_cycles(metrics) == 0:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < end, "vc-scheduler not scheduling in 120 s:\n" + log_path.read_text()[-4000:]
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=2) as resp:
            assert resp.status == 200
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        print(log_path.read_text()[-3000:])


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
    binary = build("kueue")
    apply_crds(kube, binary.parent.parent / "crds")
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
