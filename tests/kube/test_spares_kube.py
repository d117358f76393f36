"""runPolicy.warmSpares on a cluster (issue 32): a replica whose command Python runs restarts in place,
in its pod, its warm spare becoming the next attempt. Against a real kube-apiserver and the operator as
it runs, its progress endpoint included; the test plays the kubelet with real processes (tests/kube/
kubelet.py), so the pods' entry point is the one the operator ships, talking to the operator over HTTPS
with pod-bound tokens. The same job without spares (pods made again) is run beside it: the job's story
(restart count, conditions, the root cause, the replicas' environments, arguments, exit codes) is the same."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod

from tests.jobs import job_data
from tests.kube.conftest import Operator, now_iso, set_pod, wait_job
from tests.kube.kubelet import MARK, Kubelet
from tests.kube.reporting import SERVICE_ACCOUNT, make_service_account
from tests.kube.test_operator import create, wait_pods
from torchjob.api.status import Reason
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_JOB

pytestmark = pytest.mark.kube

# Rank 0's first attempt fails (exit 3, a message in its error file) once its peer runs; the peer's
# first attempt runs until it is stopped; every second attempt succeeds. Each attempt leaves a trace:
# its pid, when its process started, what it sees.
TRAIN = """\
import json, os, sys, time
from pathlib import Path

trace = Path(os.environ["TRACE_DIR"])
rank = os.environ["RANK"]
n = len(list(trace.glob(f"{rank}-*")))
with open(f"/proc/{os.getpid()}/stat") as f:
    started = int(f.read().rsplit(")", 1)[1].split()[19])  # clock ticks after boot
(trace / f"{rank}-{n}").write_text(json.dumps({
    "pid": os.getpid(), "started": started, "at": time.time(), "env": dict(os.environ), "argv": sys.argv,
    "file": __file__, "path0": sys.path[0], "torch_ahead": "torch" in sys.modules}))
print(f"rank {rank} attempt {n}", flush=True)
if n == 0 and rank == "0":
    while not list(trace.glob("1-0")):
        time.sleep(0.05)
    time.sleep(float(os.environ["FAIL_AFTER_S"]))
    Path(os.environ["TORCHELASTIC_ERROR_FILE"]).write_text("boom at step 3")
    sys.exit(3)
if n == 0:
    time.sleep(300)
time.sleep(1)  # a second attempt's work
"""


def spares_job(name: str, namespace: str, trace: Path, spares: bool) -> dict[str, Any]:
    data = job_data(name, workers=1, restart_policy="OnFailure", restart_scope=None,
                    command=["python", "-u", "train.py", "--lr", "0.1"],
                    run_policy={"backoffLimit": 3, **({"warmSpares": True} if spares else {})})
    data["metadata"]["namespace"] = namespace
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        pod["serviceAccountName"] = SERVICE_ACCOUNT
        pod["containers"][0]["env"] = [{"name": "TRACE_DIR", "value": str(trace)},
                                       {"name": "FAIL_AFTER_S", "value": "3"}]
    return data


def traces(trace: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(trace.iterdir())}


def reasons(kube: Client, job: str, namespace: str) -> list[str]:
    found = sorted(kube.list(Event, namespace=namespace, fields={"involvedObject.name": job}),
                   key=lambda e: (e.eventTime or e.firstTimestamp or e.metadata.creationTimestamp))
    # less WaitingForNode: the pods made again here wait for a node (this cluster's node takes none of
    # them; the test plays their kubelet) until the test runs them, where a restart in place makes none
    return [e.reason for e in found if e.reason != "WaitingForNode"]


def run(kube: Client, namespace: str, name: str, tmp: Path, spares: bool) -> tuple[dict[str, Any], Kubelet]:
    trace = tmp / name / "trace"
    trace.mkdir(parents=True)
    (tmp / name / "train.py").write_text(TRAIN)
    create(kube, spares_job(name, namespace, trace, spares), namespace)
    with Kubelet(kube, namespace, name, tmp / name / "pods", tmp / name,
                 extra_env={"TORCHJOB_SPARE_AFTER_S": "0.5"}) as kubelet:
        status = wait_job(kube, name, namespace, lambda s: s.get("state") in ("Succeeded", "Failed"), timeout=120)
    return status, kubelet


def test_a_failed_rank_restarts_in_place_as_its_spare_and_the_job_goes_as_without_spares(
        kubeconfig: str, kube: Client, namespace: str, tmp_path: Path) -> None:
    make_service_account(kube, namespace)
    op = Operator(kubeconfig, tmp_path / "operator.log")
    op.start()
    try:
        spared, kubelet = run(kube, namespace, "spared", tmp_path, spares=True)
        plain, plain_kubelet = run(kube, namespace, "plain", tmp_path, spares=False)
        # the same story: one restart of the gang, then success
        for status in (spared, plain):
            assert status["state"] == "Succeeded" and status["restartCount"] == 1, status
        assert reasons(kube, "spared", namespace) == reasons(kube, "plain", namespace), (
            reasons(kube, "spared", namespace), reasons(kube, "plain", namespace))
        assert Reason.WARM_SPARES_NOT_IN_PLACE not in reasons(kube, "spared", namespace)
        # in place: the same two pods throughout (no pod made again), now at attempt 1, each released
        # when the job ended (its entry point exits with the last attempt's code: 0)
        assert len(kubelet.started) == 2 and len(plain_kubelet.started) == 4
        pods = kube.list(Pod, namespace=namespace, labels={LABEL_JOB: "spared"})
        assert sorted((p.metadata.annotations[ANNOTATION_ATTEMPT], p.metadata.annotations[inplace.ANNOTATION_IN_PLACE])
                      for p in pods) == [("1", "true"), ("1", "true")]
        # each second attempt is its pod's spare: another process, started before the first attempt
        # ended, with torch imported ahead; it sees what the first saw, as the plain job's attempts do
        seen, plain_seen = traces(tmp_path / "spared" / "trace"), traces(tmp_path / "plain" / "trace")
        assert sorted(seen) == sorted(plain_seen) == ["0-0", "0-1", "1-0", "1-1"]
        ended = max(seen["0-0"]["at"], seen["1-0"]["at"]) + 3  # rank 0 failed FAIL_AFTER_S after both began
        for rank in "01":
            first, second = seen[f"{rank}-0"], seen[f"{rank}-1"]
            assert second["pid"] != first["pid"] and second["started"] <= ticks(ended), (first, second)
            assert second["torch_ahead"] and not plain_seen[f"{rank}-1"]["torch_ahead"]
            for trace in (first, second, plain_seen[f"{rank}-0"], plain_seen[f"{rank}-1"]):
                for test_only in (MARK, "TORCHJOB_SPARE_AFTER_S", "TORCHJOB_JOB_UID"):  # the job's own uid differs
                    trace["env"].pop(test_only, None)
                assert not [k for k in trace["env"] if k.startswith(("TORCHJOB_INPLACE", "TORCHJOB_SPARE"))]
            assert as_pod(first["env"]) == as_pod(second["env"]) == as_pod(as_spared(plain_seen[f"{rank}-1"]["env"]))
            assert first["argv"] == second["argv"] == ["train.py", "--lr", "0.1"] == plain_seen[f"{rank}-1"]["argv"]
            assert second["file"] == str(tmp_path / "spared" / "train.py")
            assert second["path0"] == str(tmp_path / "spared")
    finally:
        op.stop()
        print(op.log.read_text()[-3000:])


def as_spared(env: dict[str, str]) -> dict[str, str]:
    """The plain job's environment as the spared job's replica sees it (its names, its trace)."""
    return {k: v.replace("plain", "spared") for k, v in env.items()}


def as_pod(env: dict[str, str]) -> dict[str, str]:
    """Paths of what the pod projects as the pod sees them (the same for every pod; the test's kubelet
    gives each its own directory)."""
    return {k: re.sub(r"/pods/[0-9a-f-]{36}/", "/pods/POD/", v) for k, v in env.items()}


def ticks(at: float) -> int:
    """`at` (time.time()) as /proc's clock ticks after boot."""
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return int((at - (time.time() - uptime)) * os.sysconf("SC_CLK_TCK")) + 1


def test_two_annotations_on_the_running_master_of_a_job_without_warm_spares_do_not_end_it(
        kube: Client, namespace: str, operator: Operator) -> None:
    """Issue 43, item 1, as it was reproduced: whoever may patch pods writes `torchjob.dev/in-place` and an
    attempt's end (exit code 0) on the master of a job without warmSpares; the operator, reading the pod
    once it runs, keeps the job Running (its pods do not run the entry point: their spec says so)."""
    create(kube, job_data("forged", workers=1, run_policy={"backoffLimit": 3}), namespace)
    master, worker = sorted(wait_pods(kube, "forged", namespace, 2), key=lambda p: p.metadata.name)
    set_pod(kube, worker, "Running")
    forged = {"attempt": 0, "exitCode": 0, "message": None, "finishedAt": now_iso()}
    kube.patch(Pod, master.metadata.name, {"metadata": {"annotations": {
        inplace.ANNOTATION_IN_PLACE: "true", inplace.ANNOTATION_EXIT: json.dumps(forged)}}}, namespace=namespace)
    set_pod(kube, master, "Running")  # the round that sees the master run sees the annotations too
    status = wait_job(kube, "forged", namespace, lambda s: s.get("state") in ("Running", "Succeeded", "Failed"))
    assert status["state"] == "Running" and status["replicaStatuses"]["Master"]["succeeded"] == 0, status
