"""The chart installed by real Helm, the operator's image on the real node, two replicas: both Ready
(`helm install --wait`, `kubectl rollout status`), leader election with the leader's pod labelled for
the progress Service, failover with a job's progress landing across it, `helm upgrade --wait` rolling
one replica at a time with the Lease held throughout, uninstall with jobs in flight, metrics scraped
over HTTPS from a pod, and the operator ServiceAccount's calls (the API server's audit log) against
what its roles grant: every grant used (gang jobs under the real Volcano scheduler and a
scheduler-plugins PodGroup, a job queued in the real Kueue, names taken by others, a stale CA, a
certificate near its end), or said why no request can use it.

The tests run in order and share the installation (module order is the story of an install)."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from lightkube import codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret, Service

from tests.e2e.conftest import kill_container, running_container, wait_for
from tests.e2e.images import TESTS_IMAGE
from tests.incluster.conftest import RELEASE, SOCK, SYSTEM, USERS, Cluster, devcluster
from tests.jobs import job_data
from tests.kube.admitters import ClusterQueue, LocalQueue, kueue_manager_config, run_vc_scheduler, running_kueue
from tests.kube.conftest import free_port, wait_established
from torchjob.kube.machinery.client import (
    KueueResourceFlavor,
    KueueWorkload,
    PluginsPodGroup,
    PyTorchJobRes,
    TorchJobRes,
    VolcanoPodGroup,
)
from torchjob.kube.objects import install
from torchjob.kube.objects.admission import kueue
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.workload.reporting import CA_CONFIGMAP, CA_KEY
from torchjob.kube.progress import tls

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operator" / "install.md"
DASHBOARD = REPO / "charts" / "torchjob" / "dashboards" / "torchjob.json"
OPERATOR = {"app.kubernetes.io/name": install.NAME}
TIMINGS: dict[str, float] = {}
RUN: dict[str, datetime] = {}


def blocks(lang: str) -> list[str]:
    """The doc's fenced blocks of a language, each tested here (its `tested by` comment says so)."""
    return re.findall(rf"<!-- tested by: tests/incluster/test_helm.py::\w+ -->\n```{lang}\n(.*?)```", DOC.read_text(),
                      re.S)


def job(name: str, steps: int, step_time: float, kind: str = "TorchJob") -> dict[str, Any]:
    data = job_data(name, workers=1, restart_policy="Never",
                    command=("python", "/opt/tests/ddp_progress.py", "--steps", str(steps),
                             "--step-time", str(step_time)))
    data["metadata"]["namespace"] = USERS
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = TESTS_IMAGE
    if kind == "PyTorchJob":
        data["apiVersion"], data["kind"] = "kubeflow.org/v1", "PyTorchJob"
    return data


def create(c: Cluster, data: dict[str, Any]) -> None:
    res = PyTorchJobRes if data["kind"] == "PyTorchJob" else TorchJobRes
    c.client.create(res.from_dict(data))  # type: ignore[attr-defined]


def state(c: Cluster, name: str, kind: str = "TorchJob") -> str:
    res = PyTorchJobRes if kind == "PyTorchJob" else TorchJobRes
    conditions = (c.client.get(res, name, namespace=USERS).status or {}).get("conditions") or []
    return next((x["type"] for x in reversed(conditions) if x.get("status") == "True"), "")


def operator_pods(c: Cluster) -> list[Pod]:
    return [p for p in c.client.list(Pod, namespace=SYSTEM, labels=OPERATOR) if not p.metadata.deletionTimestamp]


def ready(p: Pod) -> bool:
    return any(x.type == "Ready" and x.status == "True" for x in (p.status.conditions or []) if p.status)


def leader(c: Cluster) -> str:
    holder = c.client.get(Lease, install.LEASE, namespace=SYSTEM).spec.holderIdentity or ""
    return holder.rsplit("-", 1)[0]  # the pod's hostname, then a per-process suffix


def labelled(c: Cluster) -> set[str]:
    """The operator pods that carry the leader's label (what the progress Service selects)."""
    return {p.metadata.name for p in operator_pods(c) if (p.metadata.labels or {}).get(install.LEADER_LABEL) == "true"}


def all_ready(c: Cluster) -> str:
    """The leader, once two operator pods run, both Ready (readiness says the process works, not that it
    leads), and the leader's alone carries the label; else ''."""
    pods = operator_pods(c)
    running = [p for p in pods if p.status and p.status.phase == "Running"]
    ready_ones = [p.metadata.name for p in running if ready(p)]
    who = leader(c)
    return who if len(running) == 2 and len(ready_ones) == 2 and labelled(c) == {who} else ""


class LeaseSampler:
    """The Lease and the Deployment sampled every 0.1 s: when no live holder had it (none, or expired),
    and when no operator replica was available."""

    def __init__(self, c: Cluster) -> None:
        self.c, self.samples, self.stop = c, [], threading.Event()  # type: list[tuple[float, str, int]]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                spec = self.c.client.get(Lease, install.LEASE, namespace=SYSTEM).spec
                wall = datetime.now().astimezone()
                live = bool(spec.holderIdentity) and spec.renewTime is not None and (
                    (wall - spec.renewTime).total_seconds() < (spec.leaseDurationSeconds or 15))
                available = (self.c.client.get(Deployment, install.NAME, namespace=SYSTEM).status
                             .availableReplicas or 0)
                self.samples.append((now, spec.holderIdentity if live else "", available))
            except ApiError:
                pass
            time.sleep(0.1)

    def done(self) -> list[tuple[float, str, int]]:
        self.stop.set()
        self.thread.join()
        return self.samples


class ProgressSampler:
    """A job's status.progress.step sampled every 0.2 s, with when each was seen."""

    def __init__(self, c: Cluster, name: str) -> None:
        self.c, self.name, self.samples, self.stop = c, name, [], threading.Event()  # type: ignore[var-annotated]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                p = (self.c.client.get(TorchJobRes, self.name, namespace=USERS).status or {}).get("progress") or {}
                self.samples.append((time.monotonic(), p.get("step"), p.get("total")))
            except ApiError:
                pass
            time.sleep(0.2)

    def done(self) -> list[tuple[float, Any, Any]]:
        self.stop.set()
        self.thread.join()
        return self.samples


class PodWatch:
    """Every pod of a job namespace seen, by name: the uids it had (two: created twice)."""

    def __init__(self, c: Cluster) -> None:
        self.c, self.seen, self.stop = c, {}, threading.Event()  # type: dict[str, set[str]]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for p in self.c.client.list(Pod, namespace=USERS):
                self.seen.setdefault(p.metadata.name, set()).add(p.metadata.uid)
            time.sleep(0.2)

    def done(self) -> dict[str, set[str]]:
        self.stop.set()
        self.thread.join()
        return self.seen


def test_install_as_the_docs_say(cluster: Cluster) -> None:
    c = cluster
    # The suite's cluster may hold Kubeflow's CRD made by `torchjob install` (no Helm release owns it):
    # Helm will not adopt it, so it goes (with no job left in it) and the chart makes it again.
    try:
        c.client.delete(CustomResourceDefinition, "pytorchjobs.kubeflow.org")
        wait_for("Kubeflow's CRD gone", lambda: not any(
            x.metadata.name == "pytorchjobs.kubeflow.org" for x in c.client.list(CustomResourceDefinition)), 60)
    except ApiError:
        pass
    for ns in (SYSTEM, USERS, MONITORING):  # left by an earlier run on a cluster kept up: the docs start from none
        try:
            c.client.delete(Namespace, ns)
        except ApiError:
            continue
        wait_for(f"namespace {ns} gone", lambda n=ns: n not in {x.metadata.name for x in c.client.list(Namespace)}, 120)
    (image,), (commands,), (expected,) = blocks("sh")[:1], blocks("sh")[1:2], blocks("text")[:1]
    RUN["since"] = datetime.now(UTC)  # the audit below reads this run's calls (a cluster kept up has more)
    t0 = time.monotonic()
    built = c.run("bash", "-c", image, timeout=900)
    assert built.returncode == 0, built.stderr
    TIMINGS["operator-image"] = time.monotonic() - t0
    sock = Path(c.audit).parent / "realnode/containerd/containerd.sock"
    images = c.run("ctr", "--address", str(sock), "-n", "k8s.io", "images", "ls")
    size = next(line.split()[3:5] for line in images.stdout.splitlines() if "localhost/torchjob-operator:dev" in line)
    print(f"operator image localhost/torchjob-operator:dev in containerd: {' '.join(size)}")
    bins = f"{Path(c.helm_bin).parent}"
    t0 = time.monotonic()
    out = c.run("bash", "-ec", f"export PATH={bins}:$PATH\n{commands}", timeout=480)
    assert out.returncode == 0, out.stdout + out.stderr
    shown = re.sub(r"LAST DEPLOYED: .*", "LAST DEPLOYED: (date)", out.stdout.split("\n", 2)[2]).strip()
    ns = c.client.get(Namespace, SYSTEM)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # `helm install --wait` and `kubectl rollout status` returned: both replicas Ready, the leader's pod labelled
    TIMINGS["helm install --wait, rollout status"] = time.monotonic() - t0
    who = wait_for("two operator pods Ready, the leader's labelled", lambda: all_ready(c), timeout=60)
    pod = c.client.get(Pod, who, namespace=SYSTEM)
    assert pod.spec.serviceAccountName == install.NAME
    assert pod.spec.containers[0].image == "localhost/torchjob-operator:dev"
    c.client.create(Namespace(metadata=ObjectMeta(name=USERS)))
    assert shown == expected.strip(), f"the doc's output is not what helm printed:\n{shown}"


def test_a_torchjob_and_a_pytorchjob_run_and_report_progress_through_the_service(cluster: Cluster) -> None:
    c = cluster
    t0 = time.monotonic()
    create(c, job("tj", 10, 0.3))
    create(c, job("kf", 10, 0.3, kind="PyTorchJob"))
    for name, kind in (("tj", "TorchJob"), ("kf", "PyTorchJob")):
        wait_for(f"{kind} {name} Succeeded", lambda n=name, k=kind: state(c, n, k) == "Succeeded", timeout=180)
    # the reports reached the leader through the headless Service, TLS verified against the CA the
    # operator published in the namespace (the pods' helper refuses an unverified endpoint)
    def written() -> Any:
        p = (c.client.get(TorchJobRes, "tj", namespace=USERS).status or {}).get("progress")
        return p if p and p.get("step") == 10 else None

    progress = wait_for("the last report written", written, timeout=30)
    assert progress["percent"] == 100.0, progress
    TIMINGS["a TorchJob and a PyTorchJob"] = time.monotonic() - t0


def test_the_leader_dies_while_a_job_trains_and_the_other_replica_takes_over(cluster: Cluster) -> None:
    c = cluster
    started = datetime.now().astimezone()

    def since(events: list[dict[str, Any]]) -> list[dict[str, Any]]:  # this test's (a cluster may be reused)
        return [e for e in events if datetime.fromisoformat(e["requestReceivedTimestamp"]) >= started]

    watch = PodWatch(c)
    create(c, job("failover", 50, 0.4))
    create(c, job("bystander", 45, 0.4))  # reports beside it: none may land on the other job
    wait_for("the job Running", lambda: state(c, "failover") == "Running", timeout=120)
    wait_for("the job's progress in its status", lambda: (c.client.get(TorchJobRes, "failover", namespace=USERS)
                                                          .status or {}).get("progress"), timeout=60)
    progress = ProgressSampler(c, "failover")
    old = leader(c)
    died = datetime.now().astimezone()
    c.client.delete(Pod, old, namespace=SYSTEM, grace_period=0)
    t0 = time.monotonic()
    try:  # a Lease not given up runs out after operator.leaseDuration (15 s); a loaded node is slower
        # the surviving replica, or the Deployment's replacement when the dead leader could not give
        # its Lease up and the two raced for it once it ran out (both are fine: one leader, not the dead)
        wait_for("another replica leading", lambda: leader(c) not in ("", old), timeout=120, every=0.1)
    except AssertionError as e:
        pods = [(p.metadata.name, p.status.phase if p.status else None,
                 [(s.restartCount, s.ready) for s in (p.status.containerStatuses or [])] if p.status else None)
                for p in operator_pods(c)]
        raise AssertionError(f"{e}; Lease holder {leader(c)!r}, operator pods {pods}") from None
    TIMINGS["failover: leader death -> Lease taken"] = time.monotonic() - t0
    other = leader(c)  # the new leader
    wait_for("the new leader's pod labelled, the dead one's gone", lambda: labelled(c) == {other}, timeout=30)
    TIMINGS["failover: leader death -> the progress Service selects the new leader"] = time.monotonic() - t0
    wait_for("the job Succeeded", lambda: state(c, "failover") == "Succeeded", timeout=180)
    wait_for("the job's last report in its status", lambda: (c.client.get(TorchJobRes, "failover", namespace=USERS)
                                                             .status or {}).get("progress", {}).get("step") == 50, 30)
    samples = progress.done()
    at_death = max((step for t, step, _ in samples if t <= t0 and step is not None), default=0)
    moved = [(t, step) for t, step, _ in samples if t > t0 and step is not None and step > at_death]
    assert moved, f"the job's progress did not move after the leader died (step {at_death} then): {samples[-5:]}"
    TIMINGS["failover: leader death -> the job's progress lands again"] = moved[0][0] - t0
    steps = [step for _, step, _ in samples if step is not None]
    assert steps == sorted(steps), steps  # never back: no report of an earlier step written after a later one
    assert all(total == 50 for _, step, total in samples if step is not None)  # no report of the bystander's
    wait_for("the bystander Succeeded", lambda: state(c, "bystander") == "Succeeded", timeout=180)
    bystander = wait_for("the bystander's last report", lambda: (lambda p: p if p.get("step") == 45 else None)(
        (c.client.get(TorchJobRes, "bystander", namespace=USERS).status or {}).get("progress") or {}), 30)
    assert bystander["total"] == 45, bystander
    seen = watch.done()
    assert {n for n in seen if n.startswith("failover-")} == {"failover-master-0", "failover-worker-0"}
    assert all(len(uids) == 1 for n, uids in seen.items() if n.startswith("failover-")), seen  # none twice
    # the new leader reconciles from its caches' sync on (its log), and wrote the job's status (the audit)
    TIMINGS["failover (deleted, grace 0): death -> new leader's caches synced, reconciling"] = (
        synced_at(c, other, died) - died).total_seconds()
    writes = [e for e in since(c.audited()) if e["objectRef"].get("resource") == "torchjobs"
              and e["objectRef"].get("subresource") == "status" and e["objectRef"].get("name") == "failover"
              and other in str(e["user"].get("extra", {}))]
    first = min(datetime.fromisoformat(e["requestReceivedTimestamp"]) for e in writes)
    TIMINGS["failover (deleted, grace 0): death -> new leader's first status write"] = (first - died).total_seconds()
    creates = [e for e in since(c.audited()) if e["verb"] == "create" and e["objectRef"].get("resource") == "pods"
               and e["objectRef"].get("namespace") == USERS
               and str(e["objectRef"].get("name", "")).startswith("failover")]
    assert len([e for e in creates if e["responseStatus"]["code"] == 201]) == 2, creates
    wait_for("a second replica again, both Ready", lambda: all_ready(c), timeout=120)


def synced_at(c: Cluster, pod: str, after: datetime) -> datetime:
    """When the pod's operator had its caches synced (its workers start reconciling then), after `after`."""
    def synced() -> datetime | None:
        for line in c.kubectl("logs", pod, "-n", SYSTEM).splitlines():
            entry = json.loads(line) if line.startswith("{") else {}
            at = datetime.fromisoformat(entry["ts"]) if "ts" in entry else None
            if at is not None and at >= after and str(entry.get("msg", "")).startswith("caches synced"):
                return at
        return None

    return wait_for(f"{pod}'s caches synced", synced, timeout=60)  # type: ignore[no-any-return]


def test_metrics_are_scraped_from_a_pod_through_the_service(cluster: Cluster, tmp_path: Path) -> None:
    """From the namespace the NetworkPolicy opens the metrics port to (`monitoring`, the chart's
    default), over HTTPS: the certificate checked against the operator's CA (ca.crt of its Secret) for
    the metrics Service's name, as the chart's ServiceMonitor has Prometheus do."""
    c = cluster
    secret = c.client.get(Secret, "torchjob-progress-tls", namespace=SYSTEM)
    ca = base64.b64decode(secret.data["ca.crt"]).decode()  # type: ignore[index]
    scraper = {
        "apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "operator-ca", "namespace": MONITORING},
             "data": {"ca.crt": ca}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper", "namespace": MONITORING}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "torchjob-test-scraper"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": install.METRICS_READER},
             "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": MONITORING}]},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "scrape", "namespace": MONITORING},
             # its token mounted as the operator's is (the dev cluster runs no ServiceAccount admission)
             "spec": {"serviceAccountName": "scraper", "restartPolicy": "Never",
                      "volumes": [install.TOKEN_VOLUME, {"name": "ca", "configMap": {"name": "operator-ca"}}],
                      "containers": [{"name": "scrape", "image": TESTS_IMAGE, "command": ["python", "-c", SCRAPE],
                                      "volumeMounts": [{"name": "token", "mountPath": install.SA_DIR},
                                                       {"name": "ca", "mountPath": "/ca"}]}]}}]}
    (tmp_path / "scraper.yaml").write_text(yaml.safe_dump(scraper))
    c.kubectl("apply", "-f", str(tmp_path / "scraper.yaml"))
    phase = wait_for("the scrape done", lambda: c.client.get(Pod, "scrape", namespace=MONITORING).status.phase
                     in ("Succeeded", "Failed") and c.client.get(Pod, "scrape", namespace=MONITORING).status.phase, 90)
    assert phase == "Succeeded", c.kubectl("logs", "scrape", "-n", MONITORING)
    text = c.kubectl("logs", "scrape", "-n", MONITORING)
    exposed = set(re.findall(r"^# TYPE (\S+) ", text, re.M))  # a counter not counted yet has no sample line
    # the leader's books: the job that trained across the failover reported to it to the end
    gauge = 'torchjob_job_progress_percent{job="failover",kind="TorchJob",namespace="team-a"} 100.0'
    assert gauge in text, text[-3000:]
    assert 'torchjob_jobs{kind="TorchJob",state="Succeeded"}' in text
    wanted = {re.sub(r"_bucket$", "", m) for m in re.findall(DASHBOARD_METRIC, DASHBOARD.read_text())}
    assert wanted and wanted <= exposed, f"the dashboard draws what /metrics does not expose: {wanted - exposed}"


DASHBOARD_METRIC = r"\b((?:controller_runtime|workqueue|torchjob|leader_election)_[a-z_]+)\b"
MONITORING = "monitoring"  # the namespace the chart's NetworkPolicy opens the metrics port to, by default
# From a pod: every address of the metrics Service's name (headless: each replica), over TLS checked
# against the operator's CA for the Service's name, with the pod's own token; the leader's answer has
# the job gauges.
SCRAPE = """
import socket, ssl
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
name = "torchjob-operator-metrics.torchjob-system.svc"
ctx = ssl.create_default_context(cafile="/ca/ca.crt")
for ip in sorted({a[4][0] for a in socket.getaddrinfo(name, 8080, proto=socket.IPPROTO_TCP)}):
    with ctx.wrap_socket(socket.create_connection((ip, 8080), timeout=10), server_hostname=name) as s:
        s.sendall(f"GET /metrics HTTP/1.0\\r\\nHost: {name}\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\\r\\n\\r\\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    print(body.decode())
"""


def test_a_crashed_leader_is_replaced_when_its_lease_expires(cluster: Cluster) -> None:
    """A deleted pod is told SIGTERM first (even at grace 0), and the leader gives its Lease up; a crash
    (SIGKILL of its process) gives nothing up: the Lease must expire (operator.leaseDuration)."""
    c = cluster
    identity = c.client.get(Lease, install.LEASE, namespace=SYSTEM).spec.holderIdentity
    pod = c.client.get(Pod, leader(c), namespace=SYSTEM)
    died = datetime.now().astimezone()
    kill_container(running_container(pod), sock=SOCK)
    t0 = time.monotonic()
    wait_for("another process leading", lambda: c.client.get(Lease, install.LEASE, namespace=SYSTEM).spec
             .holderIdentity not in (identity, None, ""), timeout=60, every=0.1)
    TIMINGS["crash (SIGKILL): death -> Lease taken"] = time.monotonic() - t0
    TIMINGS["crash (SIGKILL): death -> new leader's caches synced, reconciling"] = (
        synced_at(c, leader(c), died) - died).total_seconds()
    # its container started again in the same pod, which still had the label: taken off (by the new
    # leader, or by the restarted container itself on start)
    wait_for("two replicas again, both Ready, the new leader's pod alone labelled", lambda: all_ready(c), timeout=120)


def test_helm_upgrade_rolls_the_deployment_while_a_job_trains(cluster: Cluster) -> None:
    c = cluster
    create(c, job("upgrade", 40, 0.4))
    wait_for("the job Running", lambda: state(c, "upgrade") == "Running", timeout=120)
    before = {p.metadata.name: p.metadata.uid for p in c.client.list(Pod, namespace=USERS,
                                                                     labels={LABEL_JOB: "upgrade"})}
    old = {p.metadata.name for p in operator_pods(c)}
    # The progress endpoint's certificate near its end (same CA, same names): the new replicas renew it on
    # start (tls.ensure: the Secret patched), as one running would within tls.CHECK_S (an hour)
    near_end = age_certificate(c)
    sampler = LeaseSampler(c)
    t0 = time.monotonic()
    # --wait: until every replica of the new spec is Ready, which a rollout one replica at a time reaches
    c.helm("upgrade", RELEASE, "charts/torchjob", "-n", SYSTEM, "--reuse-values", "--set", "operator.workers=6",
           "--wait", "--timeout", "5m", timeout=360)
    TIMINGS["helm upgrade --wait"] = time.monotonic() - t0
    c.kubectl("rollout", "status", "deployment/torchjob-operator", "-n", SYSTEM, "--timeout", "60s")
    pods = operator_pods(c)
    new = [p for p in pods if p.metadata.name not in old]
    assert len(new) == 2 and all(p.spec.containers[0].command[p.spec.containers[0].command.index("--workers") + 1]
                                 == "6" for p in new), [p.metadata.name for p in pods]
    wait_for("the new replicas Ready, the leader's pod labelled", lambda: all_ready(c), timeout=60)
    assert state(c, "upgrade") in ("Running", "Succeeded")  # trained through the rollout
    samples = sampler.done()
    # Some live replica held the Lease throughout but for the handovers themselves: a leader told to
    # stop gives it up (no holder) once it has drained, and the standby, which watches it, takes it at
    # once; each such moment is far shorter than a Lease's duration. An operator replica was available
    # at every sample.
    gaps, start = [], None
    for t, holder, _ in samples:
        if not holder and start is None:
            start = t
        elif holder and start is not None:
            gaps.append(t - start)
            start = None
    holders = {h for _, h, _ in samples if h}
    print(f"upgrade: {len(samples)} samples, Lease holders {sorted(holders)}, moments without one {gaps}")
    TIMINGS["helm upgrade: longest moment without a Lease holder"] = max(gaps, default=0.0)
    assert start is None and all(g < 1.0 for g in gaps), f"moments with no live Lease holder: {gaps}"
    assert len(gaps) <= 2  # a handover at most per old replica that led
    assert min(a for _, _, a in samples) >= 1, "a moment of the rollout with no operator replica available"
    wait_for("the job Succeeded", lambda: state(c, "upgrade") == "Succeeded", timeout=180)
    after = {p.metadata.name: p.metadata.uid for p in c.client.list(Pod, namespace=USERS,
                                                                    labels={LABEL_JOB: "upgrade"})}
    assert after == before  # the job's pods trained on, none made again
    deployment = c.client.get(Deployment, install.NAME, namespace=SYSTEM)
    assert deployment.metadata.generation == 2
    assert deployment.spec.strategy.rollingUpdate.maxUnavailable == 0
    renewed = stored_tls(c)
    assert renewed["ca.crt"] == near_end["ca.crt"], "the CA was made anew: only the serving certificate was due"
    left = x509.load_pem_x509_certificate(renewed["tls.crt"].encode()).not_valid_after_utc - datetime.now(UTC)
    assert left > timedelta(days=tls.RENEW_BEFORE_DAYS), f"the certificate near its end was not renewed: {left} left"


def stored_tls(c: Cluster) -> dict[str, str]:
    data = c.client.get(Secret, tls.SECRET, namespace=SYSTEM).data or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def age_certificate(c: Cluster) -> dict[str, str]:
    """The Secret's serving certificate replaced by one of the same CA and names with a week left (due:
    fewer than tls.RENEW_BEFORE_DAYS); the Secret's data as it is then."""
    stored = stored_tls(c)
    san = x509.load_pem_x509_certificate(stored["tls.crt"].encode()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    hosts = [*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))]
    made = datetime.now(UTC) - timedelta(days=tls.CERT_VALID_DAYS - 7)
    aged = tls.generate(hosts, (stored["ca.crt"], stored[tls.CA_KEY_KEY]), stored[tls.TRUSTED_KEY], now=made)
    data = {"tls.crt": aged.cert_pem, "tls.key": aged.key_pem}
    c.client.patch(Secret, tls.SECRET, {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}},
                   namespace=SYSTEM)
    return {**stored, **data}


@pytest.mark.timeout(600)  # a scheduler and Kueue started, seven jobs, on a node shared with other work
def test_what_the_jobs_above_do_not_do_uses_the_rest_of_the_operator_s_rights(cluster: Cluster, tmp_path: Path) -> None:
    """Issue 30, item 10: the grants the jobs above leave unused, each used here, so that the audit
    below sees it called (or lists it with why not): a job deleted after ttlSecondsAfterFinished
    (torchjobs and pytorchjobs delete), its pods deleted by cleanPodPolicy All (pods delete), a
    TensorBoard (deployments create); a pod, a Service, a TensorBoard Deployment and two PodGroups of
    a job's names made by someone else (the operator's create gets 409 and it reads whose the object
    is: get); a CA in the namespace's ConfigMap not the operator's (configmaps delete, then create); a gang job that
    the real Volcano scheduler admits and places (its PodGroup made, watched, deleted when the job
    ends), a scheduler-plugins gang job (its PodGroup made and deleted), and a job queued in a real
    Kueue (its Workload made, read, watched and marked Finished; the job suspended and resumed; its
    ResourceFlavor read for the node labels). Volcano's scheduler and Kueue's manager run as processes
    on this machine against the cluster (as tests/kube runs them), as cluster admin."""
    c = cluster
    # An older CA in the namespace's ConfigMap: the leader (new since the upgrade, it has not published
    # there yet) brings it up to date before the next pods of the namespace, which project it.
    c.client.patch(ConfigMap, CA_CONFIGMAP, {"data": {CA_KEY: tls.generate(["stale"]).ca_pem}}, namespace=USERS)
    for kind in ("TorchJob", "PyTorchJob"):
        data = job(f"ttl-{kind.lower()}", 2, 0.1, kind=kind)
        data["spec"]["runPolicy"] = {**data["spec"].get("runPolicy", {}), "ttlSecondsAfterFinished": 3,
                                     "cleanPodPolicy": "All"}
        create(c, data)
    t0 = time.monotonic()
    with ExitStack() as third_parties:  # started while the TTL's jobs run
        third_parties.enter_context(run_vc_scheduler(c.kubeconfig, c.client, tmp_path / "volcano"))
        config = kueue_manager_config(tmp_path, free_port(), ["batch/job"], ["TorchJob.v1.torchjob.dev"])
        third_parties.enter_context(running_kueue(c.kubeconfig, c.client, tmp_path, config))
        for path in crds("scheduling.x-k8s.io_podgroups.yaml"):
            for obj in codecs.load_all_yaml(path.read_text()):
                c.client.apply(obj, force=True)
                wait_established(c.client, obj.metadata.name)
        queue(c)
        TIMINGS["Volcano's scheduler and Kueue's manager started"] = time.monotonic() - t0
        # Objects of the names the jobs below want, made by someone else (no owner), each deleted as soon
        # as the operator has read whose it is: a job retries a taken pod, Service or Deployment with a
        # growing backoff (reconcile errors), a taken PodGroup every few seconds.
        squatted = datetime.now(UTC)  # (a cluster kept up has an earlier run's reads in its audit log)
        squatter = {"restartPolicy": "Never", "containers": [{"name": "c", "image": TESTS_IMAGE,
                                                              "command": ["sleep", "600"]}]}
        for res, name in ((VolcanoPodGroup, "gang"), (PluginsPodGroup, "gang-plugins")):
            c.client.create(res.from_dict({"metadata": {"name": name, "namespace": USERS},  # type: ignore[attr-defined]
                                           "spec": {"minMember": 1}}))
        template = {"metadata": {"labels": {"squat": "board"}}, "spec": {**squatter, "restartPolicy": "Always"}}
        c.client.create(Deployment.from_dict({"metadata": {"name": "board-tensorboard", "namespace": USERS}, "spec": {
            "replicas": 0, "selector": {"matchLabels": {"squat": "board"}}, "template": template}}))
        c.client.create(Pod.from_dict({"metadata": {"name": "taken-master-0", "namespace": USERS}, "spec": squatter}))
        c.client.create(Service.from_dict({"metadata": {"name": "taken", "namespace": USERS},
                                           "spec": {"clusterIP": "None", "ports": [{"port": 1}]}}))
        gang = job("gang", 2, 0.1)
        gang["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = {"schedulerName": "volcano"}
        # No scheduler-plugins scheduler runs here: the pods name the default one, which places them
        # (the PodGroup is made, and the pods labelled for it, as for the real one).
        plugins = job("gang-plugins", 2, 0.1)
        plugins["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = {"schedulerName": "scheduler-plugins"}
        queued = job("queued", 2, 0.1)
        queued["metadata"]["labels"] = {**queued["metadata"].get("labels", {}), kueue.QUEUE_LABEL: QUEUE}
        for rspec in plugins["spec"]["pytorchReplicaSpecs"].values():
            rspec["template"]["spec"]["schedulerName"] = "default-scheduler"
        for rspec in queued["spec"]["pytorchReplicaSpecs"].values():
            rspec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
        board = job("board", 20, 0.5)  # running while its TensorBoard waits for the name
        board["spec"]["tensorboard"] = {"logDirs": ["t9k://pvc/runs/exp1"]}
        for data in (gang, plugins, queued, board, job("taken", 2, 0.1)):
            create(c, data)

        def names(res: Any) -> set[str]:
            return {x.metadata.name for x in c.client.list(res, namespace=USERS)}

        def read_whose(resource: str, name: str, group: str) -> bool:
            return any(e["verb"] == "get" and e["objectRef"].get("resource") == resource
                       and e["objectRef"].get("apiGroup", "") == group and e["objectRef"].get("name") == name
                       and datetime.fromisoformat(e["requestReceivedTimestamp"]) >= squatted for e in c.audited())

        # The TensorBoard's name first: its job makes it only while the job runs (20 steps of 0.5 s), at its
        # next retry, which backs off as long as the name was held (the other names' reads, before it, made
        # that longer than the job on a loaded machine: its Deployment never came). The taken Service is made
        # before the pods, and a taken name ends the round: then the pod's.
        for resource, name, group, res in (("deployments", "board-tensorboard", "apps", Deployment),
                                           ("services", "taken", "", Service), ("pods", "taken-master-0", "", Pod),
                                           ("podgroups", "gang", "scheduling.volcano.sh", VolcanoPodGroup),
                                           ("podgroups", "gang-plugins", "scheduling.x-k8s.io", PluginsPodGroup)):
            wait_for(f"the taken {resource} {name}'s owner read", lambda r=resource, n=name, g=group:
                     read_whose(r, n, g), timeout=60, every=0.1)
            c.client.delete(res, name, namespace=USERS, **({"grace_period": 0} if res is Pod else {}))
        wait_for("the namespace's CA ConfigMap brought up to date", lambda: (
            c.client.get(ConfigMap, CA_CONFIGMAP, namespace=USERS).data or {}).get(CA_KEY)
            == stored_tls(c)[tls.TRUSTED_KEY], timeout=30)
        wait_for("the TensorBoard's Deployment", lambda: any(
            r.kind == "TorchJob" and r.name == "board" for r in c.client.get(
                Deployment, "board-tensorboard", namespace=USERS).metadata.ownerReferences or []), timeout=60)
        for name in ("gang", "gang-plugins", "queued", "taken"):
            wait_for(f"{name} Succeeded", lambda n=name: state(c, n) == "Succeeded", timeout=180)
        # each PodGroup deleted by the operator when its job ended
        wait_for("the gangs' PodGroups deleted", lambda: not {"gang"} & names(VolcanoPodGroup)
                 and not {"gang-plugins"} & names(PluginsPodGroup), timeout=30)
        # the operator marks the Workload Finished after the job's Succeeded status write: waited for, not read once
        def workload_conditions() -> dict[str, str]:
            workload = c.client.get(KueueWorkload, kueue.workload_name("queued"), namespace=USERS)
            return {x["type"]: x["status"] for x in (workload.status or {}).get("conditions", [])}

        conditions = wait_for("the queued job's Workload Finished",
                              lambda: (got := workload_conditions()).get("Finished") == "True" and got, timeout=30)
        assert conditions.get("Admitted") == "True" and conditions.get("Finished") == "True", conditions
        wait_for("the TTL's deletes", lambda: not {"ttl-torchjob"} & names(TorchJobRes)
                 and not {"ttl-pytorchjob"} & names(PyTorchJobRes), timeout=120)
    gang_pods = list(c.client.list(Pod, namespace=USERS, labels={LABEL_JOB: "gang"}))
    assert len(gang_pods) == 2 and all(p.spec.schedulerName == "volcano" and p.spec.nodeName for p in gang_pods)
    queued_pods = list(c.client.list(Pod, namespace=USERS, labels={LABEL_JOB: "queued"}))
    assert queued_pods and all(p.spec.nodeSelector == FLAVOR_LABELS for p in queued_pods)  # the flavor's
    for name in ("board", "taken", "gang", "gang-plugins", "queued"):
        c.client.delete(TorchJobRes, name, namespace=USERS)
    TIMINGS["the rest of the operator's rights"] = time.monotonic() - t0


QUEUE = "team-a-queue"  # a LocalQueue in the users' namespace, of a ClusterQueue with room for the job
FLAVOR_LABELS = {"kubernetes.io/os": "linux"}  # the ResourceFlavor's node labels (the real node has them)


def queue(c: Cluster) -> None:
    """Kueue's objects for the queued job (applied: a cluster kept up has them from a run before)."""
    c.client.apply(KueueResourceFlavor.from_dict({  # type: ignore[attr-defined]
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "incluster-linux"},
        "spec": {"nodeLabels": FLAVOR_LABELS}}), force=True)
    c.client.apply(ClusterQueue.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "incluster"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "incluster-linux", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}}), force=True)
    c.client.apply(LocalQueue.from_dict({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                         "metadata": {"name": QUEUE, "namespace": USERS},
                                         "spec": {"clusterQueue": "incluster"}}), force=True)


def crds(*files: str) -> list[Path]:
    """Third-party CRDs as their projects publish them (`dev-cluster.sh crds`)."""
    listed = devcluster("crds", timeout=300)
    assert listed.returncode == 0, listed.stderr
    paths = [Path(line) for line in listed.stdout.split()]
    return [p for p in paths if p.name in files]


def test_the_operator_service_accounts_calls_are_what_its_roles_grant(cluster: Cluster) -> None:
    """Every call allowed (no 403), and every rule of the installed roles used by one, or listed in
    NOT_EXERCISED with why no request can use it."""
    c = cluster
    since = RUN.get("since", datetime.min.replace(tzinfo=UTC))
    calls = [e for e in c.audited(("ResponseStarted", "ResponseComplete"))  # a watch still open: started
             if datetime.fromisoformat(e["requestReceivedTimestamp"]) >= since]
    refused = [(e["verb"], e["objectRef"], e["responseStatus"]) for e in calls if e["responseStatus"]["code"] == 403]
    assert refused == []
    used = {(e["objectRef"].get("apiGroup", ""), e["objectRef"]["resource"]
             + (f"/{e['objectRef']['subresource']}" if e["objectRef"].get("subresource") else ""), e["verb"],
             e["objectRef"].get("name", "")) for e in calls if "objectRef" in e}
    unused = []
    rules = [*install.RULES, *install.LEASE_RULES, *install.KUBEFLOW_RULES]
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    names = rule.get("resourceNames")
                    hit = any(g == group and r == resource and v == verb and (not names or n in names)
                              for g, r, v, n in used)
                    if not hit and (group, resource, verb) not in NOT_EXERCISED:
                        unused.append((group, resource, verb, names))
    assert unused == [], f"granted, never called in this run: {unused}"


# Granted, and never seen in the audit log however the operator is used: the API server's
# OwnerReferencesPermissionEnforcement admission plugin (off by default, and here; on in OpenShift and
# hardened clusters) asks the authorizer whether the creator of a pod, Service, PodGroup, Workload or
# Deployment whose ownerReference sets blockOwnerDeletion (the operator's all do, as Kubeflow's) may
# update the owner's finalizers. That is an authorization check, not a request: no audit event. Without
# the grant such a cluster refuses every object the operator makes for a job.
NOT_EXERCISED = {
    ("torchjob.dev", "torchjobs/finalizers", "update"): "no request: OwnerReferencesPermissionEnforcement's check",
    ("kubeflow.org", "pytorchjobs/finalizers", "update"): "no request: OwnerReferencesPermissionEnforcement's check",
    # Granted and used, but by no job of this suite: only a job with spec.volumeClaims (a Trainer runtime's
    # volumeClaimPolicies) makes a claim (create; get where one is there already). Those run against the
    # operator with an admin's client in tests/kube/test_trainjob_initializers.py and, on the real node, in
    # tests/e2e/test_trainjob_real.py: none through this install's own rights (create and get, what it calls).
    ("", "persistentvolumeclaims", "create"): "no job of this suite asks for a claim",
    ("", "persistentvolumeclaims", "get"): "no job of this suite asks for a claim",
    # Granted and used, but by no job of this suite: only a stalled job's stacks are read from its pods' logs
    # (kube/controller/pods/stall_stacks.py; tests/controller/test_stall_stacks_sequencing.py, and on the real node
    # tests/e2e/test_progress_real.py, whose operator runs with the dev cluster's admin credentials).
    ("", "pods/log", "get"): "no job of this suite stalls",
}


def test_helm_uninstall_keeps_the_crds_and_the_jobs(cluster: Cluster) -> None:
    c = cluster
    c.helm("uninstall", RELEASE, "-n", SYSTEM)
    wait_for("the operator's pods gone", lambda: not list(c.client.list(Pod, namespace=SYSTEM, labels=OPERATOR)), 60)
    names = {x.metadata.name for x in c.client.list(CustomResourceDefinition)}
    assert {"torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"} <= names
    assert {j.metadata.name for j in c.client.list(TorchJobRes, namespace=USERS)} == {
        "tj", "failover", "bystander", "upgrade"}
    assert [j.metadata.name for j in c.client.list(PyTorchJobRes, namespace=USERS)] == ["kf"]
    print("timings (s):", {k: round(v, 1) for k, v in TIMINGS.items()})
