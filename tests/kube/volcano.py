"""Volcano's scheduler (vc-scheduler, built from the Go module proxy by hack/volcano/build.sh) run
alone as a process against a cluster: no vc-controller-manager, no webhooks. Used by
tests/kube/test_volcano_real.py against the dev cluster; works against any cluster given an
admin kubeconfig."""

from __future__ import annotations

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

from lightkube import Client, codecs

from tests.kube.conftest import REPO, free_port, wait_established

SCHEDULER_NAME = "volcano"  # pods' schedulerName; the dev cluster's kube-scheduler only takes default-scheduler


def build_vc_scheduler() -> Path:
    out = subprocess.run(["bash", str(REPO / "hack" / "volcano" / "build.sh")], capture_output=True, text=True,
                         timeout=3000)
    if out.returncode != 0:
        raise RuntimeError(f"hack/volcano/build.sh failed:\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


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
def run_vc_scheduler(kubeconfig: str, kube: Client, work: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Build (once per machine) and start vc-scheduler against the cluster of `kubeconfig`, as
    cluster admin; return when it schedules. It needs only its CRDs: it creates the `default`
    Queue itself (pkg/scheduler/cache/cache.go, newDefaultQueue), and the Queue's state (which the
    controller manager keeps) is not read by the scheduler."""
    binary = build_vc_scheduler()
    for path in sorted((binary.parent.parent / "crds").glob("*.yaml")):
        for obj in codecs.load_all_yaml(path.read_text()):
            kube.apply(obj, force=True)
            wait_established(kube, obj.metadata.name)
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
         "--cache-dumper=false", "--logtostderr", "-v=3"],
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
