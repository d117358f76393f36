"""The operator against a real kube-apiserver: what it creates, restarts without duplicates,
suspend/resume, API-server validation, metrics."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, Service, ServiceAccount
from lightkube.types import PatchType

from tests.jobs import job_data
from tests.kube.conftest import UNCHECKED, Operator, admit_podgroup, finished, set_pod, wait_job
from torchjob.dialects.convert import explicit
from torchjob.dialects.load import load
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels import LABEL_JOB

pytestmark = pytest.mark.kube
SEEDS = Path(__file__).resolve().parents[1] / "dialects" / "seeds"


def create(kube: Client, data: dict[str, Any], namespace: str) -> None:
    data["metadata"]["namespace"] = namespace
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        for c in rspec["template"]["spec"]["containers"]:
            c.setdefault("image", "example/trainer:1")
    kube.create(TorchJobRes.from_dict(data))


def pods_of(kube: Client, job: str, namespace: str) -> list[Any]:
    return [p for p in kube.list(Pod, namespace=namespace, labels={LABEL_JOB: job}) if not p.metadata.deletionTimestamp]


def wait_pods(kube: Client, job: str, namespace: str, n: int, timeout: float = 30) -> list[Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pods = pods_of(kube, job, namespace)
        if len(pods) == n:
            return pods
        time.sleep(0.1)
    raise AssertionError(f"expected {n} pods of {job}, got {len(pods_of(kube, job, namespace))}")


def env(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}


def test_volcano_seed_reconciles_to_pods_service_and_env(kube: Client, namespace: str, operator: Operator,
                                                         scheduling_crds: list[str]) -> None:
    job = load(SEEDS / "001-volcano-cm.yaml").job
    create(kube, explicit(job), namespace)
    admit_podgroup(kube, job.name, namespace)
    pods = {p.metadata.name: p for p in wait_pods(kube, job.name, namespace, 3)}
    assert set(pods) == {f"{job.name}-master-0", f"{job.name}-worker-0", f"{job.name}-worker-1"}
    master = env(pods[f"{job.name}-master-0"])
    assert master["MASTER_ADDR"] == f"{job.name}-master-0.{job.name}" and master["RANK"] == "0"
    assert env(pods[f"{job.name}-worker-1"])["RANK"] == "2" and master["WORLD_SIZE"] == "3"
    assert master["VC_MASTER_NUM"] == "1" and master["VC_WORKER_NUM"] == "2"
    svc = kube.get(Service, job.name, namespace=namespace)
    assert svc.spec is not None and svc.spec.clusterIP == "None"
    for p in pods.values():
        set_pod(kube, p, "Running")
    wait_job(kube, job.name, namespace, lambda s: any(c["type"] == "Running" and c["status"] == "True"
                                                      for c in s.get("conditions", [])))
    set_pod(kube, pods[f"{job.name}-master-0"], "Succeeded", 0)
    status = wait_job(kube, job.name, namespace, finished)
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Succeeded"] == ["Completed"]
    wait_pods(kube, job.name, namespace, 1)  # CompleteJob stopped the lingering workers


def test_operator_restart_adopts_pods_without_duplicates(kube: Client, namespace: str, operator: Operator) -> None:
    create(kube, job_data("adopt", workers=3), namespace)
    before = {p.metadata.name: p.metadata.uid for p in wait_pods(kube, "adopt", namespace, 4)}
    operator.stop(kill=True)
    operator.start()
    operator.wait_idle(after=0)  # a fresh operator lists, reconciles every job, and must adopt what exists
    after = {p.metadata.name: p.metadata.uid for p in wait_pods(kube, "adopt", namespace, 4)}
    assert after == before
    for p in pods_of(kube, "adopt", namespace):
        set_pod(kube, p, "Running")
    master = next(p for p in pods_of(kube, "adopt", namespace) if p.metadata.name == "adopt-master-0")
    set_pod(kube, master, "Succeeded", 0)
    assert "Succeeded" in {c["type"] for c in wait_job(kube, "adopt", namespace, finished)["conditions"]}


def test_suspend_deletes_pods_and_resume_recreates_them(kube: Client, namespace: str, operator: Operator) -> None:
    create(kube, job_data("sus", workers=1), namespace)
    wait_pods(kube, "sus", namespace, 2)
    kube.patch(TorchJobRes, "sus", {"spec": {"runPolicy": {"suspend": True}}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    wait_pods(kube, "sus", namespace, 0)
    wait_job(kube, "sus", namespace, lambda s: s.get("state") == "Suspended" and "startTime" not in s)
    kube.patch(TorchJobRes, "sus", {"spec": {"runPolicy": {"suspend": False}}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    pods = wait_pods(kube, "sus", namespace, 2)
    assert {p.metadata.annotations["torchjob.dev/attempt"] for p in pods} == {"1"}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "exactly one master"),
    (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=0), "at least 1"),
    (lambda d: d["metadata"].update(name="x" * 60), "too long"),
    (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"), "Unsupported value"),
])
def test_api_server_rejects_bad_jobs_with_clear_messages(kube: Client, namespace: str, edit: Any,
                                                         message: str) -> None:
    data = job_data("bad", workers=1)
    edit(data)
    with pytest.raises(ApiError) as err:
        create(kube, data, namespace)
    assert message in str(err.value)


def test_a_pod_the_api_server_refuses_fails_the_job(kube: Client, namespace: str, operator: Operator) -> None:
    data = job_data("noimage", workers=1)
    data["metadata"]["namespace"] = namespace  # no image: valid for torchjob locally, not for a pod
    kube.create(TorchJobRes.from_dict(data))
    status = wait_job(kube, "noimage", namespace, finished)
    assert status["failure"]["reason"] == "InvalidSpec" and "image" in status["failure"]["message"]


def test_metrics_and_health(kube: Client, namespace: str, operator: Operator) -> None:
    assert operator.proc is not None
    port = int(operator.proc.args[operator.proc.args.index("--metrics-port") + 1])  # type: ignore[union-attr]
    create(kube, job_data("met", workers=1), namespace)
    wait_pods(kube, "met", namespace, 2)
    body = operator.scrape()  # with a token allowed to get /metrics (the test's admin)
    assert "controller_runtime_reconcile_total" in body and "workqueue_depth" in body
    assert operator.scrape("/readyz") == operator.scrape("/healthz") == "ok"  # the health port; probes: no token
    with pytest.raises(urllib.error.HTTPError) as elsewhere:  # the probes are not on the metrics port
        urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5, context=UNCHECKED)
    assert elsewhere.value.code == 404
    # /metrics (every namespace's job names): no token, a made-up one, a ServiceAccount's not allowed to get it
    kube.create(ServiceAccount(metadata=ObjectMeta(name="nosy", namespace=namespace)))
    nosy = kube.create(ServiceAccount.Token(metadata=ObjectMeta(name="nosy", namespace=namespace),
                                            spec=TokenRequestSpec(audiences=[], expirationSeconds=600)),
                       name="nosy", namespace=namespace).status.token
    for token, code in ((None, 401), ("made.up.token", 401), (nosy, 403)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers={
                "Authorization": f"Bearer {token}"} if token else {}), timeout=10, context=UNCHECKED)
        assert refused.value.code == code, token
