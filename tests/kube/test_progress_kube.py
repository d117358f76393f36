"""Progress and stalls against a real kube-apiserver: the test plays the kubelet and the pods, which
report over HTTPS to the operator with pod-bound projected service-account tokens (TokenRequest),
checked by the operator through TokenReview."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod

from tests.jobs import job_data
from tests.kube.conftest import Operator, finished, job_status, set_pod, wait_job
from tests.kube.reporting import (
    SERVICE_ACCOUNT,
    PodReporter,
    ca_file,
    flood,
    make_service_account,
    pod_token,
    post,
    unbound_token,
    url,
)
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_JOB
from torchjob.progress.server import audience

pytestmark = pytest.mark.kube


def create_job(kube: Client, namespace: str, name: str, run_policy: dict[str, Any] | None = None,
               policies: list[dict[str, Any]] | None = None) -> None:
    data = job_data(name, workers=1, command=["python", "train.py"], run_policy=run_policy)
    data["metadata"]["namespace"] = namespace
    if policies:
        data["spec"]["policies"] = policies
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    kube.create(TorchJobRes.from_dict(data))


def start_pods(kube: Client, namespace: str, job: str, attempt: int, timeout: float = 30) -> list[Any]:
    """Wait for the job's pods of `attempt`, and run them (as the kubelet would)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pods = [p for p in kube.list(Pod, namespace=namespace, labels={LABEL_JOB: job})
                if not p.metadata.deletionTimestamp and p.metadata.annotations.get(ANNOTATION_ATTEMPT) == str(attempt)]
        if len(pods) == 2:
            for p in pods:
                set_pod(kube, p, "Running")
            return pods
        time.sleep(0.1)
    raise AssertionError(f"no 2 pods of attempt {attempt} of {job}")


def events(kube: Client, namespace: str, job: str) -> list[Any]:
    return [e for e in kube.list(Event, namespace=namespace) if e.involvedObject.name == job]


def test_a_hung_job_is_restarted_by_a_stalled_policy(kube: Client, namespace: str, operator: Operator,
                                                     tmp_path: Path) -> None:
    make_service_account(kube, namespace)
    # 5 s: the second attempts must send no false stall while they report, and at load 18 the reporter
    # threads or the operator went 2-3 s without a turn (a 3 s deadline left no margin for that)
    create_job(kube, namespace, "hang", run_policy={"progressDeadlineSeconds": 5, "backoffLimit": 2},
               policies=[{"event": "Stalled", "action": "RestartJob"}])
    pods = start_pods(kube, namespace, "hang", 0)
    endpoint = url(operator.progress_url, namespace, "hang")
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == endpoint
    ca = ca_file(kube, namespace, tmp_path)
    reporters = [PodReporter(endpoint, pod_token(kube, p, "hang"), ca, tmp_path) for p in pods]
    status = wait_job(kube, "hang", namespace, lambda s: (s.get("progress") or {}).get("step", 0) >= 3, timeout=30)
    assert status["progress"]["total"] == 1000 and status["progress"]["reporter"] in ("master-0", "worker-0")
    assert status["progress"]["metrics"][0]["name"] == "loss" and status.get("restartCount", 0) == 0
    assert all(r.reporter.sent > 0 and r.reporter.refused == 0 for r in reporters)

    for r in reporters:  # the hang: every rank stops reporting
        r.quiet()
    # The deadline runs from each replica's last report the operator received, which is no older than
    # its reporter's last report() call (a starved reporter thread makes that call well before quiet()).
    quiet_at = min(r.last for r in reporters)
    wait_job(kube, "hang", namespace, lambda s: s.get("restartCount") == 1, timeout=30)
    assert time.monotonic() - quiet_at >= 4.5  # not before the deadline (5 s after the last report)
    pods = start_pods(kube, namespace, "hang", 1)
    reporters = [PodReporter(endpoint, pod_token(kube, p, "hang"), ca, tmp_path) for p in pods]
    wait_job(kube, "hang", namespace, lambda s: s["conditions"][-1]["type"] == "Running", timeout=30)
    time.sleep(6)  # past the deadline again: the new attempts keep reporting, so no second stall
    master = next(p for p in pods if p.metadata.name.endswith("master-0"))
    set_pod(kube, master, "Succeeded", 0)
    status = wait_job(kube, "hang", namespace, finished, timeout=30)
    for r in reporters:
        r.quiet()
    conds = {c["type"]: c for c in status["conditions"] if c["status"] == "True"}
    assert "Succeeded" in conds and status["restartCount"] == 1, status
    stalls = [e for e in events(kube, namespace, "hang") if e.reason == "Stalled"]
    assert len(stalls) == 1 and "progressDeadlineSeconds" in stalls[0].message
    text = operator.scrape()
    assert f'torchjob_job_progress_percent{{job="hang",kind="TorchJob",namespace="{namespace}"}}' in text
    assert f'torchjob_job_seconds_since_progress_report{{job="hang",kind="TorchJob",namespace="{namespace}"}}' in text


def test_bad_reports_are_refused_without_harm(kube: Client, namespace: str, operator: Operator,
                                              tmp_path: Path) -> None:
    make_service_account(kube, namespace)
    for name in ("victim", "other"):
        create_job(kube, namespace, name, run_policy={"progressDeadlineSeconds": 60})
    victim, other = (start_pods(kube, namespace, name, 0) for name in ("victim", "other"))
    ca = ca_file(kube, namespace, tmp_path)
    endpoint = url(operator.progress_url, namespace, "victim")
    token = pod_token(kube, victim[0], "victim")
    good = json.dumps({"step": 1, "total": 10}).encode()

    assert post(endpoint, good, None, ca)[0] == 403
    assert post(endpoint, good, "not-a-token", ca)[0] == 403
    assert post(endpoint, good, pod_token(kube, other[0], "other"), ca)[0] == 403  # another job's audience
    # the victim's audience, but bound to another job's pod, or to no pod at all
    assert post(endpoint, good, pod_token(kube, other[0], "other", aud=audience(namespace, "victim")), ca)[0] == 403
    assert post(endpoint, good, unbound_token(kube, namespace, audience(namespace, "victim")), ca)[0] == 403
    # a pod labelled as one of the victim's replicas, but made by someone else (no controller): its
    # pod-bound token with the victim's audience is refused
    impostor = kube.create(Pod.from_dict({
        "metadata": {"name": "impostor", "namespace": namespace,
                     "labels": {LABEL_JOB: "victim", "torchjob.dev/replica-type": "worker",
                                "torchjob.dev/replica-index": "0"}, "annotations": {ANNOTATION_ATTEMPT: "0"}},
        "spec": {"serviceAccountName": SERVICE_ACCOUNT, "containers": [{"name": "c", "image": "busybox:1.36"}]}}))
    time.sleep(1)  # in the operator's pod cache
    assert post(endpoint, good, pod_token(kube, impostor, "victim"), ca)[0] == 403
    code, body = post(endpoint, b"{not json", token, ca)
    assert (code, body["reason"]) == (422, "Invalid")
    assert post(endpoint, b"x" * (70 * 1024), token, ca)[0] == 413
    codes = flood(endpoint, json.dumps({"step": 2}).encode(), token, ca, 400)
    assert 429 in codes and set(codes) <= {200, 429}, set(codes)
    assert operator.scrape("/healthz") == "ok"
    time.sleep(1.0)
    code, _ = post(endpoint, json.dumps({"step": 5, "total": 10}).encode(), token, ca)
    assert code == 200
    # The progress writer's patch and the operator's Running write are two writers: wait for both
    status = wait_job(kube, "victim", namespace, lambda s: (s.get("progress") or {}).get("step") == 5
                      and (s.get("conditions") or [{}])[-1].get("type") == "Running", timeout=15)
    assert status["progress"]["percent"] == 50.0 and status["progress"]["reporter"] == "master-0"
    assert status["conditions"][-1]["type"] == "Running" and not finished(status)
    assert "progress" not in job_status(kube, "other", namespace)


def _reviews(operator: Operator) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in operator.scrape().splitlines()
               if line.startswith("torchjob_progress_token_reviews_total{"))


def test_a_pods_first_report_gets_through_a_flood_of_made_up_tokens_from_its_own_address(
        kube: Client, namespace: str, operator: Operator, tmp_path: Path) -> None:
    """Issue 43, item 6, on the operator's endpoint: 200 made-up tokens from the address a pod reports
    from (not JWTs, JWT-shaped with made-up claims, another job's real token) are each refused 403
    without a TokenReview and spend no budget, so the pod's first report, a token never reviewed,
    lands at once (a budget per address answered it 429)."""
    import base64
    from concurrent.futures import ThreadPoolExecutor

    make_service_account(kube, namespace)
    for name in ("flooded", "bystander"):
        create_job(kube, namespace, name, run_policy={"progressDeadlineSeconds": 60})
    flooded, bystander = (start_pods(kube, namespace, name, 0) for name in ("flooded", "bystander"))
    ca = ca_file(kube, namespace, tmp_path)
    endpoint = url(operator.progress_url, namespace, "flooded")
    claims = base64.urlsafe_b64encode(json.dumps({"aud": [audience(namespace, "flooded")], "kubernetes.io": {
        "namespace": namespace, "pod": {"name": "flooded-master-0", "uid": "made-up"}}}).encode()).decode()
    made_up = ["not-a-token", f"eyJhbGciOiJSUzI1NiJ9.{claims.rstrip('=')}.forged",
               pod_token(kube, bystander[0], "bystander")]
    good = json.dumps({"step": 1, "total": 10}).encode()
    before = _reviews(operator)
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: post(endpoint, good, made_up[i % 3], ca)[0], range(200)))
    assert set(codes) == {403}, set(codes)
    assert _reviews(operator) == before  # not one TokenReview for them
    assert post(endpoint, good, pod_token(kube, flooded[0], "flooded"), ca)[0] == 200
