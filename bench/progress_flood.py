"""A flood against the operator's progress endpoint (issue 19), bounded in count and time, on a real
control plane (scripts/dev-cluster.sh), while a real job reports: what the endpoint holds.

The bench runs `torchjob operator` with its endpoint on loopback, makes two TorchJobs (one master pod
each, run by patching its status: the bench plays the kubelet and the pods, which report with
pod-bound projected tokens), then for `--seconds`:
- the victim's pod reports once a second from 127.0.0.1 (its answer's latency is what matters);
- `--idle` connections are held open and silent, and `--slow` ones trickle a byte every half second
  (re-opened when the endpoint cuts them), from `--sources` other loopback addresses (pods);
- `--bogus` threads post made-up JWT-shaped tokens as fast as they can (each new one could cost a
  TokenReview);
- oversized bodies (a 10 MB Content-Length, 1 MiB sent), and bodies nested 30,000 deep from the
  attacker job's own pod (a valid token: the body is read and refused);
- a new job is created mid-flood: the time until its pods exist says whether reconciles go on;
- the operator's two other ports too (issue 30, finding 1): `--port-idle` silent and `--port-slow`
  trickling connections on each of the health port and the metrics port, from the same sources, and
  `--port-bogus` threads asking /metrics (over TLS) with made-up tokens; meanwhile the kubelet's
  probes (/healthz and /readyz, the chart's 3 s timeout, from 127.0.0.1, every second) and a real scraper
  (/metrics with an allowed token, every 2 s) must be answered.
It prints the victim's report latencies, every answer the flood got, the probes' and the scraper's
answers and latencies, the operator's peak RSS and CPU, the TokenReviews the API server served, and
the new job's time to pods.

Usage: python bench/progress_flood.py [--seconds 30] [--idle 300] [--slow 100] [--sources 8] [--bogus 4]
                                      [--port-idle 100] [--port-slow 60] [--port-bogus 2]
                                      [--kubeconfig PATH] [--keep-cluster]
Without --kubeconfig the bench starts its own cluster in /tmp/torchjob-bench-flood and stops it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))
from progress_writes import cpu_seconds, free_port, requests_served  # noqa: E402

CLUSTER_DIR = "/tmp/torchjob-bench-flood"


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--sources", type=int, default=8, help="loopback addresses the flood comes from (its pods)")
    ap.add_argument("--bogus", type=int, default=4, help="threads posting made-up tokens")
    ap.add_argument("--port-idle", type=int, default=100, help="silent connections on each of the other two ports")
    ap.add_argument("--port-slow", type=int, default=60, help="trickling connections on each of the other two ports")
    ap.add_argument("--port-bogus", type=int, default=2, help="threads asking /metrics with made-up tokens")
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
    admin = KubeConfig.from_file(kubeconfig).get().user.token
    apply([crd()], kubeconfig)
    time.sleep(2)
    ns = f"flood-{uuid.uuid4().hex[:6]}"
    kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    kube.create(ServiceAccount(metadata=ObjectMeta(name="trainer", namespace=ns)))
    port, metrics_port, health_port = free_port(), free_port(), free_port()
    log_path = tempfile.mktemp(prefix="operator-flood-", suffix=".log")
    log = open(log_path, "wb")  # noqa: SIM115
    op = subprocess.Popen([sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig,
                           "--no-leader-elect", "--namespace", ns, "--metrics-port", str(metrics_port),
                           "--health-port", str(health_port),
                           "--progress-port", str(port), "--progress-url", f"https://127.0.0.1:{port}",
                           "--progress-write-interval", "1"], stdout=log, stderr=log)
    unchecked = ssl.create_default_context()  # /metrics: the operator's own CA, encrypted, not checked here
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE

    def create(name: str) -> None:
        container = {"name": "pytorch", "image": "example/trainer:1", "command": ["python", "train.py"]}
        kube.create(TorchJobRes.from_dict({
            "apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
                "spec": {"serviceAccountName": "trainer", "containers": [container]}}}}}}))

    def pod_of(job: str, timeout: float = 120) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pods = list(kube.list(Pod, namespace=ns, labels={LABEL_JOB: job}))
            if pods:
                return pods[0]
            time.sleep(0.2)
        raise SystemExit(f"no pod of {job} within {timeout}s (operator log: {log_path})")

    def running_with_token(job: str) -> str:
        p = pod_of(job)
        status = {"phase": "Running", "containerStatuses": [{
            "name": "pytorch", "image": "example/trainer:1", "imageID": "", "ready": True, "restartCount": 0,
            "state": {"running": {"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}}]}
        kube.patch(Pod.Status, p.metadata.name, {"status": status}, namespace=ns, patch_type=PatchType.MERGE)
        spec = TokenRequestSpec(audiences=[audience(ns, job)], expirationSeconds=3600,
                                boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1", name=p.metadata.name,
                                                                    uid=p.metadata.uid))
        req = ServiceAccount.Token(metadata=ObjectMeta(name="trainer", namespace=ns), spec=spec)
        return str(kube.create(req, name="trainer", namespace=ns).status.token)

    def reconciles() -> float:
        req = urllib.request.Request(f"https://127.0.0.1:{metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {admin}"})
        with urllib.request.urlopen(req, timeout=10, context=unchecked) as resp:
            text = resp.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("controller_runtime_reconcile_total{"))

    try:
        create("victim")
        create("attacker")
        victim, attacker = running_with_token("victim"), running_with_token("attacker")
        ca = kube.get(ConfigMap, "torchjob-progress-ca", namespace=ns).data["ca.crt"]  # type: ignore[index]
        ctx = ssl.create_default_context(cadata=ca)
        time.sleep(3)
        before = requests_served(kubeconfig)
        rec0, cpu0, rss0 = reconciles(), cpu_seconds(op.pid), rss_mb(op.pid)
        stop = time.monotonic() + args.seconds
        flood, latencies, victim_codes = Tally(), [], Tally()
        peak = [rss0]
        sources = [f"127.0.0.{i + 2}" for i in range(args.sources)]

        def post(token: str, body: bytes, source: str, timeout: float = 10.0) -> str:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout,
                                               source_address=(source, 0))
            try:
                conn.request("POST", status_path(ns, "victim" if token != attacker else "attacker"), body=body,
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                return str(resp.status)
            except (OSError, http.client.HTTPException) as e:
                return type(e).__name__
            finally:
                conn.close()

        def reporter() -> None:  # the victim's pod: one report a second, kept alive as torchjob.report does
            conn: http.client.HTTPSConnection | None = None
            step = 0
            while time.monotonic() < stop:
                tick = time.monotonic()
                step += 1
                body = json.dumps({"step": step, "total": 100000, "metrics": {"loss": 1 / step}})
                for _ in range(2):  # once more on a fresh connection if the kept one was let go
                    try:
                        conn = conn or http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                        conn.request("POST", status_path(ns, "victim"), body=body,
                                     headers={"Authorization": f"Bearer {victim}", "Content-Type": "application/json"})
                        resp = conn.getresponse()
                        resp.read()
                        victim_codes.add(str(resp.status))
                        if resp.status == 200:
                            latencies.append(time.monotonic() - tick)
                        break
                    except (OSError, http.client.HTTPException) as e:
                        victim_codes.add(type(e).__name__)
                        conn = None
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

        def holder(count: int, trickle: bool, target: int = port, tally: Tally = flood) -> None:
            # idle or slow connections, re-opened when cut
            socks: list[socket.socket | None] = [None] * count
            while time.monotonic() < stop:
                for i in range(count):
                    s = socks[i]
                    if s is None:
                        try:
                            s = socket.create_connection(("127.0.0.1", target), timeout=1,
                                                         source_address=(sources[i % len(sources)], 0))
                            s.setblocking(False)
                            socks[i] = s
                            tally.add("slow opened" if trickle else "idle opened")
                        except OSError:
                            tally.add("slow refused" if trickle else "idle refused")
                            continue
                    try:
                        if trickle:
                            s.send(b"\x16")
                        if s.recv(1) == b"":
                            raise ConnectionResetError
                    except BlockingIOError:
                        pass
                    except OSError:
                        tally.add("slow cut" if trickle else "idle cut")
                        s.close()
                        socks[i] = None
                time.sleep(0.5)
            for s in socks:
                if s is not None:
                    s.close()

        def bogus(source: str) -> None:
            while time.monotonic() < stop:
                token = ".".join(uuid.uuid4().hex for _ in range(3))
                flood.add(f"bogus token: {post(token, b'{}', source)}")

        def heavy(source: str) -> None:
            while time.monotonic() < stop:
                s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
                try:
                    t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
                    t.sendall(f"POST {status_path(ns, 'attacker')} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              f"{attacker}\r\nContent-Length: 10000000\r\n\r\n".encode() + b"x" * (1 << 20))
                    flood.add(f"10 MB body: {t.recv(64).split(b' ')[1].decode() or 'cut'}")
                except (OSError, IndexError) as e:
                    flood.add(f"10 MB body: {type(e).__name__}")
                finally:
                    s.close()
                deep = b'{"step": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
                flood.add(f"deep body: {post(attacker, deep, source)}")

        probes, scrapes, ports_flood = Tally(), Tally(), Tally()
        probe_lat: list[float] = []

        def get(target: int, path: str, source: str, token: str | None, tls: bool, timeout: float) -> str:
            conn = (http.client.HTTPSConnection("127.0.0.1", target, context=unchecked, timeout=timeout,
                                                source_address=(source, 0)) if tls else
                    http.client.HTTPConnection("127.0.0.1", target, timeout=timeout, source_address=(source, 0)))
            try:
                conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
                resp = conn.getresponse()
                resp.read()
                return str(resp.status)
            except (OSError, http.client.HTTPException) as e:
                return type(e).__name__
            finally:
                conn.close()

        def kubelet() -> None:  # the probes as the kubelet sends them: the chart's 3 s timeout, every second
            while time.monotonic() < stop:
                tick = time.monotonic()
                for path in ("/healthz", "/readyz"):
                    t = time.monotonic()
                    code = get(health_port, path, "127.0.0.1", None, False, 3.0)
                    probes.add(f"{path} {code}")
                    if code == "200":
                        probe_lat.append(time.monotonic() - t)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

        def scraper() -> None:  # Prometheus, every 2 s, with a token allowed to get /metrics
            while time.monotonic() < stop:
                scrapes.add(get(metrics_port, "/metrics", "127.0.0.1", admin, True, 10.0))
                time.sleep(2.0)

        def bogus_metrics(source: str) -> None:
            while time.monotonic() < stop:
                token = ".".join(uuid.uuid4().hex for _ in range(3))
                ports_flood.add(f"metrics, made-up token: {get(metrics_port, '/metrics', source, token, True, 10.0)}")

        port_threads = [threading.Thread(target=kubelet), threading.Thread(target=scraper),
                        *(threading.Thread(target=bogus_metrics, args=(sources[i % len(sources)],))
                          for i in range(args.port_bogus))]
        for target in (health_port, metrics_port):
            port_threads += [threading.Thread(target=holder, args=(args.port_idle, False, target, ports_flood)),
                             threading.Thread(target=holder, args=(args.port_slow, True, target, ports_flood))]
        threads = [*port_threads,
                   threading.Thread(target=reporter), threading.Thread(target=holder, args=(args.idle, False)),
                   threading.Thread(target=holder, args=(args.slow, True)),
                   *(threading.Thread(target=bogus, args=(sources[i % len(sources)],)) for i in range(args.bogus)),
                   threading.Thread(target=heavy, args=(sources[-1],))]
        for t in threads:
            t.start()
        time.sleep(args.seconds / 3)
        t_new = time.monotonic()
        create("newcomer")
        pod_of("newcomer", timeout=args.seconds)
        newcomer_s = time.monotonic() - t_new
        while time.monotonic() < stop:
            peak.append(rss_mb(op.pid))
            time.sleep(0.5)
        for t in threads:
            t.join()
        time.sleep(2)
        after = requests_served(kubeconfig)
        rec = reconciles() - rec0
        cpu, rss_end = cpu_seconds(op.pid) - cpu0, rss_mb(op.pid)
        progress = (kube.get(TorchJobRes, "victim", namespace=ns).status or {}).get("progress") or {}
    finally:
        op.terminate()
        op.wait(30)
    reviews = sum(after.get((v, "tokenreviews", ""), 0.0) - before.get((v, "tokenreviews", ""), 0.0)
                  for v in ("POST", "CREATE"))
    lat = sorted(latencies)
    print(f"flood for {args.seconds:g} s from {args.sources} sources: {args.idle} idle and {args.slow} slow "
          f"connections (re-opened when cut), {args.bogus} threads of made-up tokens, 10 MB and 30,000-deep bodies")
    print(f"victim's reports                : {dict(sorted(victim_codes.counts.items()))}; latency of the 200s "
          f"median {1000 * statistics.median(lat):.0f} ms, max {1000 * lat[-1]:.0f} ms" if lat else
          f"victim's reports                : {victim_codes.counts} (none landed)")
    print(f"victim's status.progress.step   : {progress.get('step')} (last sent ~{int(args.seconds)})")
    print(f"the flood's answers             : {dict(sorted(flood.counts.items()))}")
    print(f"the other ports ({args.port_idle} idle, {args.port_slow} slow on each; {args.port_bogus} threads of "
          f"made-up tokens on /metrics): {dict(sorted(ports_flood.counts.items()))}")
    plat = sorted(probe_lat)
    print(f"the kubelet's probes (3 s timeout): {dict(sorted(probes.counts.items()))}"
          + (f"; latency median {1000 * statistics.median(plat):.0f} ms, max {1000 * plat[-1]:.0f} ms" if plat else ""))
    print(f"the scraper's /metrics          : {dict(sorted(scrapes.counts.items()))}")
    print(f"tokenreviews served             : {reviews:.0f}")
    print(f"operator RSS                    : {rss0:.0f} MB before, peak {max(peak):.0f} MB, {rss_end:.0f} MB after")
    print(f"operator CPU                    : {cpu:.1f} s = {100 * cpu / args.seconds:.0f} % of a core")
    print(f"reconciles during the flood     : {rec:.0f}; a new job's pods made {newcomer_s:.1f} s after it")
    print(f"(operator log: {log_path})")


if __name__ == "__main__":
    main()
