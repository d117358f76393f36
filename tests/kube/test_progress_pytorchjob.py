"""Progress and stalls of a Kubeflow `PyTorchJob` served by torchjob, as of a TorchJob: its pods get
Trainer's variables and a token with the PyTorchJob's own audience, its reports are accepted at the
pytorchjobs path and shown under `status.torchjob.progress`, and `runPolicy.progressDeadlineSeconds`
fails a job whose ranks went quiet. A real API server; the test plays the kubelet and the pods."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, job_status, set_pod
from tests.kube.reporting import SERVICE_ACCOUNT, PodReporter, ca_file, make_service_account, pod_token, post
from tests.kube.test_kubeflow_api import kubeflow_operator  # noqa: F401 (the fixture)
from tests.kube.test_kubeflow_crd import PyTorchJobRes, pytorchjobs, seed  # noqa: F401 (the fixture)
from tests.kube.test_progress_kube import create_job, events
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.labels import kubeflow as kfl
from torchjob.progress.server import PYTORCHJOBS, audience, status_path

pytestmark = pytest.mark.kube


def create_pytorchjob(kube: Client, namespace: str, name: str, run_policy: dict[str, Any] | None = None) -> None:
    data = seed(name)
    data["metadata"]["namespace"] = namespace
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
    if run_policy:
        data["spec"]["runPolicy"] = run_policy
    kube.create(PyTorchJobRes.from_dict(data))


def kind_pods(kube: Client, namespace: str, job: str, pytorchjob: bool = True, timeout: float = 30) -> list[Any]:
    """The two pods of the PyTorchJob (or of the TorchJob) of that name, running."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pods = [p for p in kube.list(Pod, namespace=namespace, labels={LABEL_JOB: job})
                if not p.metadata.deletionTimestamp and (kfl.LABEL_OPERATOR in p.metadata.labels) == pytorchjob]
        if len(pods) == 2:
            for p in pods:
                set_pod(kube, p, "Running")
            return pods
        time.sleep(0.1)
    found = [p.metadata.name for p in kube.list(Pod, namespace=namespace)]
    raise AssertionError(f"no 2 pods of {job} (PyTorchJob: {pytorchjob}): {found}, "
                         f"{kube.get(PyTorchJobRes, job, namespace=namespace).status}")


def extras(kube: Client, namespace: str, name: str) -> dict[str, Any]:
    """torchjob's status of the PyTorchJob (`status.torchjob`)."""
    return dict((kube.get(PyTorchJobRes, name, namespace=namespace).status or {}).get("torchjob") or {})


def wait_extras(kube: Client, namespace: str, name: str, pred: Any, timeout: float = 30) -> dict[str, Any]:
    end = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        last = extras(kube, namespace, name)
        if pred(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"PyTorchJob {name}: {last}")


def test_a_pytorchjob_reports_progress_with_its_own_token_and_no_other(
        kube: Client, namespace: str, kubeflow_operator: Operator, tmp_path: Path) -> None:  # noqa: F811
    make_service_account(kube, namespace)
    create_pytorchjob(kube, namespace, "same", {"progressDeadlineSeconds": 60})
    create_pytorchjob(kube, namespace, "other")
    pods, other = kind_pods(kube, namespace, "same"), kind_pods(kube, namespace, "other")
    # A TorchJob of that name (its pods would have the same names: it has none, but it is served)
    create_job(kube, namespace, "same", run_policy={"progressDeadlineSeconds": 60})

    endpoint = kubeflow_operator.progress_url + status_path(namespace, "same", PYTORCHJOBS)
    assert endpoint.endswith(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/same/status")
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == endpoint
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] and env["KUBEFLOW_TRAINER_SERVER_CA_CERT"]
    projected = next(v.projected for v in pods[0].spec.volumes if v.projected is not None)
    assert [s.serviceAccountToken.audience for s in projected.sources if s.serviceAccountToken] == \
        [audience(namespace, "same", PYTORCHJOBS)] != [audience(namespace, "same")]

    ca = ca_file(kube, namespace, tmp_path)
    good = json.dumps({"step": 1, "total": 10}).encode()
    pj_aud, tj_aud = audience(namespace, "same", PYTORCHJOBS), audience(namespace, "same")
    token = pod_token(kube, pods[0], "same", aud=pj_aud)
    tj_endpoint = kubeflow_operator.progress_url + status_path(namespace, "same")
    tj_token = pod_token(kube, pods[0], "same", aud=tj_aud)  # what the TorchJob's pods would be given
    assert post(endpoint, good, tj_token, ca)[0] == 403  # the TorchJob's audience, at the PyTorchJob's path
    assert post(tj_endpoint, good, tj_token, ca)[0] == 403  # ...and at the TorchJob's: not one of its pods
    assert post(tj_endpoint, good, token, ca)[0] == 403  # the PyTorchJob's token, at the TorchJob's path
    other_aud = audience(namespace, "other", PYTORCHJOBS)
    assert post(endpoint, good, pod_token(kube, other[0], "other", aud=other_aud), ca)[0] == 403  # another job's
    assert post(endpoint, good, pod_token(kube, other[0], "other", aud=pj_aud), ca)[0] == 403  # its pod, our audience

    code, body = post(endpoint, json.dumps({"step": 4, "total": 10, "metrics": {"loss": 0.5}}).encode(), token, ca)
    assert code == 200, body
    # The progress writer's patch and the operator's Running write are two writers: wait for both
    got = wait_extras(kube, namespace, "same", lambda s: (s.get("progress") or {}).get("step") == 4
                      and (s.get("conditions") or [{}])[-1].get("type") == "Running")
    assert got["progress"]["percent"] == 40.0 and got["progress"]["reporter"] in ("master-0", "worker-0")
    assert got["conditions"][-1]["type"] == "Running"
    stored = kube.get(PyTorchJobRes, "same", namespace=namespace).status
    assert "progress" not in stored and stored["conditions"][-1]["type"] == "Running"  # Kubeflow's shape kept
    assert "progress" not in job_status(kube, "same", namespace)  # the TorchJob of that name: nothing
    assert "progress" not in extras(kube, namespace, "other")
    text = kubeflow_operator.scrape()
    assert f'torchjob_job_progress_percent{{job="same",kind="PyTorchJob",namespace="{namespace}"}} 40.0' in text


def test_a_stalled_pytorchjob_fails_with_progress_deadline_exceeded(
        kube: Client, namespace: str, kubeflow_operator: Operator, tmp_path: Path) -> None:  # noqa: F811
    make_service_account(kube, namespace)
    create_pytorchjob(kube, namespace, "hang", {"progressDeadlineSeconds": 3})
    pods = kind_pods(kube, namespace, "hang")
    endpoint = kubeflow_operator.progress_url + status_path(namespace, "hang", PYTORCHJOBS)
    ca = ca_file(kube, namespace, tmp_path)
    reporters = [PodReporter(endpoint, pod_token(kube, p, "hang", aud=audience(namespace, "hang", PYTORCHJOBS)),
                             ca, tmp_path) for p in pods]
    wait_extras(kube, namespace, "hang", lambda s: (s.get("progress") or {}).get("step", 0) >= 3)
    assert all(r.reporter.sent > 0 and r.reporter.refused == 0 for r in reporters)
    for r in reporters:  # the hang: every rank stops reporting
        r.quiet()
    # The deadline runs from each replica's last report the operator received, which is no older than
    # its reporter's last report() call (a starved reporter thread makes that call well before quiet()).
    quiet_at = min(r.last for r in reporters)
    got = wait_extras(kube, namespace, "hang", lambda s: any(
        c["type"] == "Failed" and c["status"] == "True" for c in s.get("conditions", [])))
    assert time.monotonic() - quiet_at >= 2.5  # not before the deadline
    failed = next(c for c in got["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ProgressDeadlineExceeded", failed
    stored = kube.get(PyTorchJobRes, "hang", namespace=namespace).status
    kubeflows = stored["conditions"][-1]  # what Kubeflow's readers see
    assert kubeflows["type"] == "Failed" and kubeflows["reason"] == "PyTorchJobFailed", kubeflows
    assert "no progress report" in kubeflows["message"], kubeflows
    end = time.monotonic() + 15  # the event is written beside the status, not before it
    while not (stalls := [e for e in events(kube, namespace, "hang") if e.reason == "Stalled"]):
        if time.monotonic() > end:
            break
        time.sleep(0.2)
    assert stalls and "progressDeadlineSeconds" in stalls[0].message
