"""The shared scenario table against a real kube-apiserver: the operator decides, the test plays
the kubelet (it runs each pod and ends it with the scenario's exit code at the scenario's time) and
the pods' progress reports (over HTTPS, with pod-bound tokens, until the scenario's quiet time), and
someone else's deletions (a pod deleted through the API, as a drain does)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, finished, job_status, set_pod
from tests.kube.reporting import SERVICE_ACCOUNT, PodReporter, ca_file, make_service_account, pod_token, url
from tests.scenarios import SCENARIOS, Scenario
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_JOB, LABEL_TYPE

pytestmark = pytest.mark.kube


def play(kube: Client, namespace: str, sc: Scenario, operator: Operator, tmp_path: Path,
         timeout: float = 60) -> dict[str, Any]:
    job = sc.job(["python", "train.py"])
    data = job.model_dump(mode="json", exclude_none=True)
    data["metadata"]["namespace"] = namespace
    if sc.reports:
        make_service_account(kube, namespace)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
        if sc.reports:
            rspec["template"]["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
    kube.create(TorchJobRes.from_dict(data))
    started: dict[tuple[str, int], float] = {}
    # The first attempts run from one moment, the last of their pods' starts, as a job's ranks start
    # together: the operator makes the pods one by one, seconds apart on a loaded machine, and the
    # scenario's times between replicas (an earlier failure, a later one) must not turn on that.
    first = {f"{rtype.lower()}-{i}" for rtype, rspec in data["spec"]["pytorchReplicaSpecs"].items()
             for i in range(rspec.get("replicas", 1))}
    reporting: dict[tuple[str, int], PodReporter] = {}  # the attempts that report, until their quiet time
    # The quiet time runs from the reporter's start, after the pod's token and CA are fetched (API
    # calls that took over a second under load: a 1 s quiet time from the pod's start never reported).
    reporting_since: dict[tuple[str, int], float] = {}
    deleted: set[str] = set()  # replicas whose first attempt was deleted
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            status = job_status(kube, job.name, namespace)
            if finished(status):
                return status
            for (name, attempt), r in reporting.items():
                if time.monotonic() - reporting_since[(name, attempt)] >= sc.reports[name][attempt]:
                    r.quiet()
            for pod in kube.list(Pod, namespace=namespace, labels={LABEL_JOB: job.name}):
                meta = pod.metadata
                if meta.deletionTimestamp:
                    continue
                name = f"{meta.labels[LABEL_TYPE]}-{meta.labels[LABEL_INDEX]}"
                attempt = int(meta.annotations[ANNOTATION_ATTEMPT])
                phase = pod.status.phase if pod.status else None
                if phase in (None, "Pending"):
                    kubelet_says(kube, pod, "Running")
                    started[(name, attempt)] = time.monotonic()
                    if attempt < len(sc.reports.get(name, ())):
                        reporting[(name, attempt)] = PodReporter(
                            url(operator.progress_url, namespace, job.name), pod_token(kube, pod, job.name),
                            ca_file(kube, namespace, tmp_path), tmp_path)
                        reporting_since[(name, attempt)] = time.monotonic()
                elif phase == "Running":
                    since = time.monotonic() - started.setdefault((name, attempt), time.monotonic())
                    if name in sc.deleted and name not in deleted and attempt == 0 and since >= sc.deleted[name]:
                        kube.delete(Pod, meta.name, namespace=namespace)
                        deleted.add(name)
                        continue
                    plan = sc.exits.get(name, ())
                    if attempt < len(plan):
                        delay, code = plan[attempt]
                        since = time.monotonic() - started.setdefault((name, attempt), time.monotonic())
                        if attempt == 0:  # from the first attempts' common start, once all have started
                            starts = [started.get((n, 0)) for n in first]
                            since = -1.0 if None in starts else time.monotonic() - max(s for s in starts if s)
                        if since >= delay:
                            kubelet_says(kube, pod, "Succeeded" if code == 0 else "Failed", code)
            time.sleep(0.05)
    finally:
        for r in reporting.values():
            r.quiet()
    raise AssertionError(f"{sc.name}: no end in {timeout}s: {job_status(kube, job.name, namespace)}")


def kubelet_says(kube: Client, pod: Pod, phase: str, exit_code: int | None = None) -> None:
    """What a kubelet reports of a pod, unless the pod is gone: the operator may delete it (a gang
    restart after a peer's failure) between the listing and the report, as it can on a real node."""
    try:
        set_pod(kube, pod, phase, exit_code)
    except ApiError as e:
        if e.status.code != 404:
            raise


PLAYED = [s for s in SCENARIOS if s.plays_on("kube")]


@pytest.mark.parametrize("sc", PLAYED, ids=[s.name for s in PLAYED])
def test_scenario_on_a_real_control_plane(sc: Scenario, kube: Client, namespace: str, operator: Operator,
                                          tmp_path: Path) -> None:
    status = play(kube, namespace, sc, operator, tmp_path)
    sc.check(status)
