"""A real control plane for the Kubernetes tests: etcd + kube-apiserver started by
scripts/dev-cluster.sh (built from the Go module proxy, or taken from KUBEBUILDER_ASSETS), the
CRD installed, and the operator running as a process. The test plays the kubelet by patching pod
statuses. In CI these tests run; elsewhere set TORCHJOB_KUBE_TESTS=1 to run them."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, KubeConfig, codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families

from tests.ui.conftest import artifacts, browser, dashboard, page  # noqa: F401 (test_ui_kube.py: a real browser)
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.install.crd import CRD_NAME, crd
from torchjob.local.start.ports import free_port

REPO = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("CI") == "true" or os.environ.get("TORCHJOB_KUBE_TESTS") == "1"


@contextmanager
def dev_cluster(state_dir: str | None = None) -> Iterator[str]:
    """A dev cluster (scripts/dev-cluster.sh) with the TorchJob CRD: its kubeconfig. In its own
    state dir when given (beside the session's), else the default one."""
    env = {**os.environ, **({"TORCHJOB_DEVCLUSTER_DIR": state_dir} if state_dir else {})}
    script = ["bash", str(REPO / "scripts" / "dev-cluster.sh")]
    out = subprocess.run([*script, "up"], capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh up failed:\n{out.stdout}\n{out.stderr}")
    path = out.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    try:
        apply([crd()], path)
        wait_established(Client(config=KubeConfig.from_file(path)), CRD_NAME)
        yield path
    finally:
        subprocess.run([*script, "down"], capture_output=True, timeout=120, env=env)


UNUSABLE: dict[str, str] = {}  # state dir -> why its cluster could not be repaired (asked once)


def ensure_usable(env: dict[str, str]) -> None:
    """Before a module that uses a shared dev cluster: every component running, the API server ready,
    the nodes Ready, CoreDNS answering (a real node), a pod schedulable (`dev-cluster.sh check`); a
    component whose keeper is gone is started again. Otherwise the module fails at once with the
    reason, instead of each of its tests waiting out its own timeout."""
    state = env.get("TORCHJOB_DEVCLUSTER_DIR", "/tmp/torchjob-devcluster")
    if state in UNUSABLE:
        pytest.fail(f"the dev cluster in {state} is not usable (found before an earlier module):\n{UNUSABLE[state]}",
                    pytrace=False)
    out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "check", "--repair"], capture_output=True,
                         text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        UNUSABLE[state] = out.stderr[-3000:]
        pytest.fail(f"the dev cluster in {state} is not usable and could not be repaired:\n{out.stderr[-3000:]}",
                    pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def usable_cluster(request: pytest.FixtureRequest) -> None:
    """The session's cluster checked before each module whose tests use it."""
    module = request.node
    if not any(i.module is getattr(module, "obj", None) and "kubeconfig" in getattr(i, "fixturenames", ())
               for i in request.session.items):
        return
    request.getfixturevalue("kubeconfig")
    if not os.environ.get("TORCHJOB_TEST_KUBECONFIG"):
        ensure_usable(dict(os.environ))


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    if not ENABLED:
        pytest.skip("Kubernetes tests need a control plane: set TORCHJOB_KUBE_TESTS=1 (the fixture runs "
                    "scripts/dev-cluster.sh up, building etcd and kube-apiserver once per machine)")
    path = os.environ.get("TORCHJOB_TEST_KUBECONFIG", "")  # a control plane already up (development)
    if path:
        apply([crd()], path)
        wait_established(Client(config=KubeConfig.from_file(path)), CRD_NAME)
        yield path
        return
    with dev_cluster() as path:
        yield path


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> Client:
    return Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-tests")


# /metrics is served over HTTPS by the operator's own CA (a test of its certificate is in
# tests/controller/test_metrics_auth.py): here the connection is encrypted, the certificate not checked
UNCHECKED = ssl.create_default_context()
UNCHECKED.check_hostname, UNCHECKED.verify_mode = False, ssl.CERT_NONE


class Operator:
    def __init__(self, kubeconfig: str, log: Path, args: tuple[str, ...] = ("--no-leader-elect",),
                 progress_host: str = "127.0.0.1") -> None:
        self.kubeconfig, self.log, self.args = kubeconfig, log, args
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.health_port = free_port()
        # The progress endpoint: on loopback, where the tests post as the pods would; real pods reach
        # the host at another address (`progress_host`).
        self.progress_port = free_port()
        self.progress_host = progress_host

    @property
    def progress_url(self) -> str:
        return f"https://{self.progress_host}:{self.progress_port}"

    def start(self) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchjob", "operator", "--kubeconfig", self.kubeconfig, *self.args,
             "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
             "--workers", "4", "--progress-port", str(self.progress_port),
             "--progress-url", self.progress_url, "--progress-write-interval", "1"],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )

    def scrape(self, path: str = "/metrics", token: str | None = None) -> str:
        """GET /metrics (HTTPS: the operator's own CA, not checked here) with a token allowed to read it
        (the kubeconfig's: the test's admin) unless another is given; /healthz and /readyz from the
        health port (plain HTTP)."""
        token = token or KubeConfig.from_file(self.kubeconfig).get().user.token
        probe = path in ("/healthz", "/readyz")
        url = (f"http://127.0.0.1:{self.health_port}{path}" if probe
               else f"https://127.0.0.1:{self.metrics_port}{path}")
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token and not probe else {})
        with urllib.request.urlopen(req, timeout=10, context=None if probe else UNCHECKED) as resp:
            return str(resp.read().decode())

    def metrics(self) -> dict[str, float]:
        """The operator's Prometheus metrics, by name (labels of interest are the controller's own)."""
        text = self.scrape()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("result", "success") == "success":
                    out[sample.name] = out.get(sample.name, 0.0) + sample.value
        return out

    def reconciles(self) -> float:
        """Reconciles done so far (0 before the operator serves its metrics)."""
        try:
            return self.metrics().get("controller_runtime_reconcile_total", 0.0)
        except OSError:
            return 0.0

    def wait_idle(self, after: float, timeout: float = 60) -> None:
        """Until the operator has reconciled since `after` (a `reconciles()` count) and has nothing
        queued or in flight: what it was going to do about the changes before, it has done. A fact to
        wait on instead of a sleep that passes whether or not the operator looked."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                m = self.metrics()
            except OSError:
                m = {}
            if (m.get("controller_runtime_reconcile_total", 0.0) > after and m.get("workqueue_depth", 1.0) == 0
                    and m.get("controller_runtime_active_workers", 1.0) == 0):
                return
            time.sleep(0.1)
        raise AssertionError(f"the operator did not reconcile and settle within {timeout}s")

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def operator(kubeconfig: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(kubeconfig, tmp_path / "operator.log")
    op.start()
    yield op
    op.stop()
    print(op.log.read_text()[-4000:])


@pytest.fixture
def namespace(kube: Client) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.create(Namespace(metadata=ObjectMeta(name=name)))
    return name


# --- playing the kubelet -----------------------------------------------------------------


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_pod(kube: Client, pod: Any, phase: str, exit_code: int | None = None, reason: str | None = None) -> None:
    container = next(c for c in pod.spec.containers)
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["containerStatuses"] = [{"name": container.name, "image": container.image or "x", "imageID": "",
                                        "ready": True, "restartCount": 0,
                                        "state": {"running": {"startedAt": now_iso()}}}]
    elif exit_code is not None:
        terminated = {"exitCode": exit_code, "finishedAt": now_iso(),
                      "reason": "Completed" if exit_code == 0 else "Error"}
        status["containerStatuses"] = [{"name": container.name, "image": container.image or "x", "imageID": "",
                                        "ready": False, "restartCount": 0, "state": {"terminated": terminated}}]
    if reason:
        status["reason"] = reason
    kube.patch(Pod.Status, pod.metadata.name, {"status": status}, namespace=pod.metadata.namespace,
               patch_type=PatchType.MERGE)


def job_status(kube: Client, name: str, namespace: str) -> dict[str, Any]:
    obj = kube.get(TorchJobRes, name, namespace=namespace)
    return dict(obj.status or {})


def wait_job(kube: Client, name: str, namespace: str, pred: Any, timeout: float = 60) -> dict[str, Any]:
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        try:
            last = job_status(kube, name, namespace)
        except ApiError:
            last = {}
        if pred(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out on {namespace}/{name}: {last}")


def finished(status: dict[str, Any]) -> bool:
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in status.get("conditions", []))


# --- third-party CRDs (Volcano and scheduler-plugins PodGroups, Kueue's Workloads and
# ResourceFlavors), as their projects publish them ---


def third_party_crds() -> list[Any]:
    out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "crds"], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh crds failed:\n{out.stderr}")
    return [obj for path in out.stdout.split() for obj in codecs.load_all_yaml(Path(path).read_text())]


def wait_established(client: Client, name: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = client.get(CustomResourceDefinition, name)
        if any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {name} not established")


@pytest.fixture(scope="session")
def scheduling_crds(kube: Client) -> list[str]:
    """The Volcano and scheduler-plugins PodGroup CRDs and Kueue's, installed; their names."""
    names = []
    for obj in third_party_crds():
        kube.apply(obj, force=True)
        wait_established(kube, obj.metadata.name)
        names.append(obj.metadata.name)
    return names


def apiserver_metrics(kubeconfig: str) -> str:
    """The kube-apiserver's own /metrics, as text."""
    config = KubeConfig.from_file(kubeconfig).get()
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # loopback, our own dev cluster
    req = urllib.request.Request(f"{config.cluster.server}/metrics",
                                 headers={"Authorization": f"Bearer {config.user.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return str(resp.read().decode())


def apiserver_requests(kubeconfig: str, verb: str, resource: str) -> float:
    """How many `verb` requests on `resource` the kube-apiserver has served (its own /metrics)."""
    text = apiserver_metrics(kubeconfig)
    pattern = re.compile(r'^apiserver_request_total\{(.*)\} (\S+)$', re.M)
    return sum(float(value) for labels, value in pattern.findall(text)
               if f'resource="{resource}"' in labels and f'verb="{verb}"' in labels)


def admit_podgroup(kube: Client, name: str, namespace: str, timeout: float = 30) -> None:
    """Play the volcano scheduler: move the job's PodGroup from Pending to Inqueue (its CRD has no
    status subresource, so the object itself is patched)."""
    from torchjob.kube.machinery.client import VolcanoPodGroup

    end = time.monotonic() + timeout
    while True:
        try:
            kube.patch(VolcanoPodGroup, name, {"status": {"phase": "Inqueue"}}, namespace=namespace,
                       patch_type=PatchType.MERGE)
            return
        except ApiError as e:
            if e.status.code != 404 or time.monotonic() > end:
                raise
            time.sleep(0.1)


def kueue_status(kube: Client, workload: str, namespace: str, status: dict[str, Any]) -> None:
    """Play Kueue: server-side apply the Workload's status as its admission manager does."""
    from torchjob.kube.machinery.client import KueueWorkload

    body = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": workload, "namespace": namespace}, "status": status}
    kube.patch(KueueWorkload.Status, workload, body, namespace=namespace, patch_type=PatchType.APPLY,
               field_manager="kueue-admission", force=True)


def kueue_condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now_iso()}
