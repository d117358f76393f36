"""The shared scenario table against a real kube-apiserver: the operator decides, the test plays
the kubelet (it runs each pod and ends it with the scenario's exit code at the scenario's time) and
the pods' progress reports (over HTTPS, with pod-bound tokens, until the scenario's quiet time), and
someone else's deletions (a pod deleted through the API, as a drain does)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, finished, job_status, set_pod
from tests.kube.reporting import SERVICE_ACCOUNT, PodReporter, ca_file, make_service_account, pod_token, post, url
from tests.scenarios import SCENARIOS, Scenario
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_JOB, LABEL_TYPE

pytestmark = pytest.mark.kube


def play(kube: Client, namespace: str, sc: Scenario, operator: Operator, tmp_path: Path,
         timeout: float = 60, in_place: bool = False, pods: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """`in_place`: the job has warm spares, so its pods restart in place; the test plays their entry
    point too: an attempt's end reported to the operator's endpoint (exit 0 ends the pod), an attempt
    asked to stop ended (143), the next attempt run when the pod's attempt says so, the pod ended with
    its last attempt's code when released. `pods`: filled with each replica's pods (uids)."""
    job = sc.job(["python", "train.py"])
    data = job.model_dump(mode="json", exclude_none=True)
    data["metadata"]["namespace"] = namespace
    if in_place:
        data["spec"].setdefault("runPolicy", {})["warmSpares"] = True
    if sc.reports or in_place:
        make_service_account(kube, namespace)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
        if sc.reports or in_place:
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
    entry = EntryPoint(kube, namespace, job.name, operator, tmp_path) if in_place else None
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
                if pods is not None:
                    pods.setdefault(name, set()).add(meta.uid)
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
                    if entry is not None and (name, attempt) not in started:  # started in place
                        started[(name, attempt)] = time.monotonic()
                        if attempt < len(sc.reports.get(name, ())):
                            reporting[(name, attempt)] = entry.reporter(pod)
                            reporting_since[(name, attempt)] = time.monotonic()
                    if entry is not None and entry.ended(pod, attempt):
                        continue
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
                        if since >= delay and entry is not None and code != 0 and inplace.in_place(pod.to_dict(), None):
                            entry.report(pod, attempt, code)
                        elif since >= delay:
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


class EntryPoint:
    """The pods' entry point, as tests/kube/test_spares_kube.py runs the real one: what it tells the
    operator's endpoint (with the pod's token), and how its pod ends."""

    def __init__(self, kube: Client, namespace: str, job: str, operator: Operator, tmp_path: Path) -> None:
        self.kube, self.namespace, self.job, self.tmp_path = kube, namespace, job, tmp_path
        self.endpoint = url(operator.progress_url, namespace, job)
        self.tokens: dict[str, str] = {}  # by pod uid
        self.told: set[tuple[str, int]] = set()  # (pod uid, attempt) reported

    def token(self, pod: Pod) -> str:
        if pod.metadata.uid not in self.tokens:
            self.tokens[pod.metadata.uid] = pod_token(self.kube, pod, self.job)
        return self.tokens[pod.metadata.uid]

    def reporter(self, pod: Pod) -> PodReporter:
        return PodReporter(self.endpoint, self.token(pod), ca_file(self.kube, self.namespace, self.tmp_path),
                           self.tmp_path)

    def report(self, pod: Pod, attempt: int, code: int) -> None:
        if (pod.metadata.uid, attempt) in self.told:
            return
        body = json.dumps({"attempt": attempt, "exitCode": code, "message": None,
                           "finishedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}).encode()
        answer, _ = post(self.endpoint.removesuffix("/status") + "/inplace", body, self.token(pod),
                         ca_file(self.kube, self.namespace, self.tmp_path))
        if answer in (200, 409):  # recorded (409: the operator moved the pod on meanwhile)
            self.told.add((pod.metadata.uid, attempt))

    def ended(self, pod: Pod, attempt: int) -> bool:
        """Whether the pod's attempt has ended (what is left is the entry point's to do: stop an
        attempt asked to, end a released pod with its last code)."""
        here = inplace.in_place(pod.to_dict(), None)
        if here is None:
            return False
        if here.release and here.ended is not None:
            kubelet_says(self.kube, pod, "Failed", here.ended.exit_code)
            return True
        if here.stop == attempt and here.ended is None:
            self.report(pod, attempt, 143)  # SIGTERM, as a script without a handler ends
            return True
        return here.ended is not None or (pod.metadata.uid, attempt) in self.told


PLAYED = [s for s in SCENARIOS if s.plays_on("kube")]
# Played again with warm spares, restarting in place: the same table, the same expected ends.
IN_PLACE = ["onfailure-recovers", "exitcode-138-retry", "gang-restart-on-a-killed-worker",
            "gang-restart-peers-failing-with-it", "gang-restart-backoff-limit", "podfailed-restartjob",
            "stalled-restartjob-recovers", "evicted-restartjob"]


@pytest.mark.parametrize("sc", PLAYED, ids=[s.name for s in PLAYED])
def test_scenario_on_a_real_control_plane(sc: Scenario, kube: Client, namespace: str, operator: Operator,
                                          tmp_path: Path) -> None:
    status = play(kube, namespace, sc, operator, tmp_path)
    sc.check(status)


@pytest.mark.parametrize("sc", [s for s in PLAYED if s.name in IN_PLACE],
                         ids=[s.name for s in PLAYED if s.name in IN_PLACE])
def test_scenario_restarting_in_place(sc: Scenario, kube: Client, namespace: str, operator: Operator,
                                      tmp_path: Path) -> None:
    pods: dict[str, set[str]] = {}
    status = play(kube, namespace, sc, operator, tmp_path, in_place=True, pods=pods)
    sc.check(status)
    # in place: a replica keeps its pod through its restarts, unless someone else deleted it
    assert {name: len(uids) for name, uids in pods.items() if name not in sc.deleted} == {
        name: 1 for name in pods if name not in sc.deleted}, pods
    assert any(r["attempt"] > 0 for r in status["replicas"].values()), status  # it was restarted
