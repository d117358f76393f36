"""The operator's API writes per job per minute while many jobs report progress, on a real control
plane (scripts/dev-cluster.sh: etcd, kube-apiserver; the bench plays the kubelet and the pods).

N TorchJobs (one master pod each, run by patching its status) report progress over HTTPS to
`torchjob operator`'s endpoint with pod-bound projected tokens (TokenRequest), each pod every
`--every` seconds, for `--seconds`. The API server's own request counters
(apiserver_request_total) give the writes the operator made meanwhile: PATCHes of torchjobs/status,
TokenReviews. Kubeflow Trainer's status server applies the status once per request
(`pkg/statusserver/server.go` @8c0f505), so there the writes would equal the reports.

Usage: python bench/progress_writes.py [--jobs 200] [--every 2] [--seconds 60] [--write-interval 5]
                                       [--kubeconfig PATH] [--keep-cluster]
Without --kubeconfig the bench starts its own cluster in /tmp/torchjob-bench-progress and stops it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torchjob.local.start.ports import free_port

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
CLUSTER_DIR = "/tmp/torchjob-bench-progress"


def requests_served(kubeconfig: str) -> dict[tuple[str, str, str], float]:
    """apiserver_request_total by (verb, resource, subresource)."""
    from lightkube import KubeConfig

    config = KubeConfig.from_file(kubeconfig).get()
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # loopback, our own dev cluster
    req = urllib.request.Request(f"{config.cluster.server}/metrics",
                                 headers={"Authorization": f"Bearer {config.user.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for labels, value in re.findall(r"^apiserver_request_total\{(.*)\} (\S+)$", text, re.M):
        d = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (d.get("verb", ""), d.get("resource", ""), d.get("subresource", ""))
        out[key] = out.get(key, 0.0) + float(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between two reports of one pod")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--write-interval", type=float, default=5.0, help="the operator's --progress-write-interval")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--keep-cluster", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": CLUSTER_DIR}
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "up"], capture_output=True,
                             text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"dev-cluster.sh up failed:\n{out.stderr[-3000:]}")
        kubeconfig = out.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    try:
        run(args, kubeconfig)
    finally:
        if args.kubeconfig is None and not args.keep_cluster:
            subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "down"], capture_output=True, env=env)


def run(args: argparse.Namespace, kubeconfig: str) -> None:
    from lightkube import Client, KubeConfig
    from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, ServiceAccount
    from lightkube.types import PatchType

    from torchjob.kube.machinery.client import TorchJobRes
    from torchjob.kube.objects.install import apply
    from torchjob.kube.objects.install.crd import crd
    from torchjob.kube.objects.labels import LABEL_JOB
    from torchjob.progress.server import audience, status_path

    kube = Client(config=KubeConfig.from_file(kubeconfig), field_manager="bench")
    apply([crd()], kubeconfig)
    time.sleep(2)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    kube.create(ServiceAccount(metadata=ObjectMeta(name="trainer", namespace=ns)))
    port, metrics_port = free_port(), free_port()
    log = open(tempfile.mktemp(prefix="operator-", suffix=".log"), "wb")  # noqa: SIM115
    op = subprocess.Popen([sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig,
                           "--no-leader-elect", "--namespace", ns, "--metrics-port", str(metrics_port),
                           "--health-port", "0",
                           "--progress-port", str(port), "--progress-url", f"https://127.0.0.1:{port}",
                           "--progress-write-interval", str(args.write_interval)], stdout=log, stderr=log)
    pool = ThreadPoolExecutor(16)
    try:
        names = [f"job-{i:04d}" for i in range(args.jobs)]

        def create(name: str) -> None:
            container = {"name": "pytorch", "image": "example/trainer:1", "command": ["python", "train.py"]}
            kube.create(TorchJobRes.from_dict({
                "apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": ns},
                "spec": {"runPolicy": {"progressDeadlineSeconds": 600}, "pytorchReplicaSpecs": {"Master": {
                    "replicas": 1, "restartPolicy": "Never",
                    "template": {"spec": {"serviceAccountName": "trainer", "containers": [container]}}}}}}))

        list(pool.map(create, names))
        print(f"created {args.jobs} jobs in {ns}", flush=True)
        pods: dict[str, Any] = {}
        end = time.monotonic() + 600
        while len(pods) < args.jobs and time.monotonic() < end:
            pods = {p.metadata.labels[LABEL_JOB]: p for p in kube.list(Pod, namespace=ns)}
            time.sleep(1)

        def running(p: Any) -> None:
            status = {"phase": "Running", "containerStatuses": [{
                "name": "pytorch", "image": "example/trainer:1", "imageID": "", "ready": True, "restartCount": 0,
                "state": {"running": {"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}}]}
            kube.patch(Pod.Status, p.metadata.name, {"status": status}, namespace=ns, patch_type=PatchType.MERGE)

        list(pool.map(running, pods.values()))

        def token(job: str) -> str:
            p = pods[job]
            spec = TokenRequestSpec(audiences=[audience(ns, job)], expirationSeconds=3600,
                                    boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1",
                                                                        name=p.metadata.name, uid=p.metadata.uid))
            req = ServiceAccount.Token(metadata=ObjectMeta(name="trainer", namespace=ns), spec=spec)
            return str(kube.create(req, name="trainer", namespace=ns).status.token)

        tokens = dict(zip(names, pool.map(token, names), strict=True))
        ca = kube.get(ConfigMap, "torchjob-progress-ca", namespace=ns).data["ca.crt"]  # type: ignore[index]
        time.sleep(args.write_interval + 2)  # the jobs' own status writes (Created, Running) are done
        before = requests_served(kubeconfig)
        cpu0 = cpu_seconds(op.pid)
        codes: dict[int, int] = {}
        lock = threading.Lock()
        stop = time.monotonic() + args.seconds
        threads = 8

        def reporter(mine: list[str]) -> None:
            ctx = ssl.create_default_context(cadata=ca)
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
            step = 0
            while time.monotonic() < stop:
                tick = time.monotonic()
                step += 1
                for job in mine:
                    body = json.dumps({"step": step, "total": 100000, "metrics": {"loss": 1 / step}})
                    try:
                        conn.request("POST", status_path(ns, job), body=body,
                                     headers={"Authorization": f"Bearer {tokens[job]}",
                                              "Content-Type": "application/json"})
                        resp = conn.getresponse()
                        resp.read()
                        code = resp.status
                        if resp.getheader("Connection", "").lower() == "close":
                            conn.close()
                    except (OSError, http.client.HTTPException):
                        code = 0
                        conn.close()
                    with lock:
                        codes[code] = codes.get(code, 0) + 1
                time.sleep(max(0.0, args.every - (time.monotonic() - tick)))

        ts = [threading.Thread(target=reporter, args=(names[i::threads],)) for i in range(threads)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        took = time.monotonic() - t0
        time.sleep(args.write_interval + 1)  # the writes of the last interval
        after = requests_served(kubeconfig)
        cpu = cpu_seconds(op.pid) - cpu0
    finally:
        op.terminate()
        op.wait(30)
        pool.shutdown()

    def delta(verb: str, res: str, sub: str = "") -> float:
        return after.get((verb, res, sub), 0.0) - before.get((verb, res, sub), 0.0)

    minutes = (took + args.write_interval + 1) / 60
    status_writes = delta("PATCH", "torchjobs", "status") + delta("UPDATE", "torchjobs", "status")
    reports = sum(codes.values())
    writes_all = sum(v - before.get(k, 0.0) for k, v in after.items()
                     if k[0] in ("POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"))
    print(f"{args.jobs} jobs, one reporting pod each, a report every {args.every:g} s for {took:.0f} s; "
          f"operator --progress-write-interval {args.write_interval:g}")
    print(f"reports sent                      : {reports} ({reports / took:.0f}/s); "
          f"answers {dict(sorted(codes.items()))}")
    print(f"torchjobs/status writes           : {status_writes:.0f} = {status_writes / args.jobs / minutes:.2f} "
          f"per job per minute (bound: {60 / args.write_interval:.0f})")
    print(f"tokenreviews                      : {delta('POST', 'tokenreviews') + delta('CREATE', 'tokenreviews'):.0f} "
          f"(cached 5 min per token)")
    print(f"every write to the API server     : {writes_all:.0f} = {writes_all / args.jobs / minutes:.2f} per job "
          "per minute (this bench's own reads and the operator's included)")
    print(f"one write per report (Trainer)    : {reports / args.jobs / minutes:.2f} per job per minute")
    print(f"operator CPU while reporting      : {cpu:.1f} s = {100 * cpu / took:.0f} % of a core")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)


if __name__ == "__main__":
    main()
