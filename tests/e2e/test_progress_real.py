"""Progress and stalls on real pods: real torch replicas report to the operator's endpoint on the
host (HTTPS, each with its pod's projected service-account token), through torchjob's helper copied
alone into the image and through the Kubeflow SDK's `update_trainjob_status`, unchanged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Event

from tests.e2e.conftest import status_of, torchjob, wait_for
from tests.e2e.images import TESTS_IMAGE
from tests.jobs import job_data
from torchjob.kube.clientside.kube_runtime import KubeRuntime

TRAIN = ("python", "/opt/tests/ddp_progress.py")


def progress_job(tmp_path: Path, name: str, args: list[str], **kw: Any) -> Path:
    import yaml

    policies, workers = kw.pop("policies", None), kw.pop("workers", 1)
    data = job_data(name, workers=workers, restart_policy="Never", command=(*TRAIN, *args), **kw)
    if policies:
        data["spec"]["policies"] = policies
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        pod["containers"][0]["image"] = TESTS_IMAGE
        # test plumbing, not the job's: a directory of the host that says which attempt hangs
        pod["containers"][0]["volumeMounts"] = [{"name": "marks", "mountPath": "/marks"}]
        pod["volumes"] = [{"name": "marks", "hostPath": {"path": str(tmp_path / "marks"), "type": "Directory"}}]
    (tmp_path / "marks").mkdir(exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_rank_hung_in_all_reduce_on_real_pods_is_restarted_by_a_stalled_policy(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    path = progress_job(tmp_path, "hung", ["--steps", "30", "--step-time", "0.2", "--hang-replica", "worker-0",
                                           "--hang-at", "5", "--once-dir", "/marks"],
                        # long enough for a restarted attempt's start (torch imported, the process
                        # group made) on a busy machine: 5 s was not, with the suite beside it
                        run_policy={"progressDeadlineSeconds": 15, "backoffLimit": 2},
                        policies=[{"event": "Stalled", "action": "RestartJob"}])
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert status_of(node, "hung", ns)["restartCount"] == 1
    # the last report (at exit) is written within the operator's write interval after the job's end
    progress = wait_for("the last step written", lambda: (p := status_of(node, "hung", ns).get("progress"))
                        and p.get("step") == 30 and p, timeout=30)
    assert progress["percent"] == 100.0, progress
    # worker-0 hangs, and so does the master, waiting for it in the step's all_reduce: either is named
    said = [e for e in node.list(Event, namespace=ns) if e.involvedObject.name == "hung"]
    stalled = [e.message or "" for e in said if e.reason == "Stalled"]
    assert len(stalled) == 1 and "sent no progress report for 15s" in stalled[0], stalled
    assert "master-0" in stalled[0] or "worker-0" in stalled[0], stalled
    # Where each rank was, taken by the operator before the restart stopped them, by default (the job has no
    # annotation): rank 1 (worker-0) in the side group's all_reduce nobody else joins, rank 0 in the step's.
    where = "rank 0 in <module> (ddp_progress.py:51); rank 1 in <module> (ddp_progress.py:50)"
    assert stalled[0].endswith(f"; where the ranks were: {where}"), stalled
    taken = [e.message or "" for e in said if e.reason == "StacksTaken"]
    assert len(taken) == 1 and where in taken[0] and "(2 process(es))" in taken[0], taken
    kept = status_of(node, "hung", ns)["keptStacks"]
    assert [(k["attempts"], k["short"]) for k in kept] == [({"master-0": 0, "worker-0": 0}, where)], kept
    described = torchjob(node_kubeconfig, "describe", "hung", "-n", ns).stdout
    assert "100%" in described and "loss=" in described, described
    assert "StacksTaken" in described and where in described, described
    # the stopped attempt's pod is gone: its logs say where its ranks were, from the status (the lines
    # `torchjob logs --kube hung --replica worker-0 --attempt 0` prints, read in this process: no CLI start)
    logs = "\n".join(KubeRuntime(node_kubeconfig, namespace=ns).logs("hung", replica="worker-0", attempt=0))
    assert "[worker-0] (attempt 0: where every rank was at " in logs, logs
    assert "<module> (/opt/tests/ddp_progress.py:50)" in logs and "all_reduce (" in logs, logs
    print(described, logs, sep="\n")  # shown with -s: the page's real output (docs/how-to/hangs.md)


def test_a_replica_twice_as_slow_on_real_pods_is_named_a_straggler_and_never_a_stall(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    """Issue 42's straggler on real pods: three replicas, worker-1's own work twice as long per step (the others
    wait for it in each step's all_reduce; each reports its own step time). The operator names it once, in an
    event, from the reports alone; the job is not stalled."""
    path = progress_job(tmp_path, "straggle", ["--steps", "100", "--step-time", "0.1", "--slow-replica", "worker-1"],
                        workers=2, run_policy={"progressDeadlineSeconds": 15})
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    said = [e for e in node.list(Event, namespace=ns) if e.involvedObject.name == "straggle"]
    named = [e.message or "" for e in said if e.reason == "Straggler"]
    assert len(named) == 1 and named[0].startswith("worker-1: ") and named[0].endswith(
        "x the median step time over the last minute"), named
    assert 1.5 <= float(named[0].split(": ")[1].split("x")[0]) <= 2.5, named
    assert not [e for e in said if e.reason == "Stalled"], [e.message for e in said]


def test_the_kubeflow_sdk_reports_from_a_real_pod_unchanged(node_kubeconfig: str, node: Client, ns: str,
                                                             tmp_path: Path) -> None:
    path = progress_job(tmp_path, "sdk", ["--steps", "10", "--step-time", "0.3", "--kubeflow"])
    run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    log = "\n".join(node.log("sdk-master-0", namespace=ns))
    assert "kubeflow update_trainjob_status sent at step 1" in log, log
    # The SDK sends at most one update per 5 s: the first step's (Trainer's body, Trainer's variables),
    # and on a machine slow enough that the 10 steps outlast 5 s, one more: the last one sent is the
    # job's progress, once the operator's writer has written it.
    last = int(re.findall(r"kubeflow update_trainjob_status sent at step (\d+)", log)[-1])
    percent = float(int(100 * last / 10))
    progress = wait_for("the last report written", lambda: (p := status_of(node, "sdk", ns).get("progress"))
                        and p.get("percent") == percent and p, timeout=30)
    assert progress["percent"] == percent and progress["reporter"] == "master-0", progress
    assert {m["name"]: m["value"] for m in progress["metrics"]}["accuracy"] == str(0.5 + last / (2 * 10)), progress
