"""Jobs as real pods on the dev cluster's real node: containers started by containerd, names
resolved by CoreDNS, process groups over the pod network, exits and kills that really happen."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Pod, Service

from tests.e2e.conftest import (
    HOST,
    kill_container,
    node_tasks,
    pods,
    running_container,
    status_of,
    torchjob,
    wait_for,
)
from tests.e2e.images import TESTS_IMAGE
from tests.jobs import job_data
from tests.kube.conftest import REPO
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT

pytestmark = pytest.mark.kube


def job_file(tmp_path: Path, data: dict[str, Any], image: str = TESTS_IMAGE) -> Path:
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = image
    path = tmp_path / f"{data['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions", []) if c["status"] == "True"}


def ended(node: Client, job: str, ns: str) -> dict[str, Any] | None:
    status = status_of(node, job, ns)
    return status if {"Succeeded", "Failed"} & conditions(status).keys() else None


def pod_log(node: Client, pod: str, ns: str, container: str | None = None) -> str:
    return "\n".join(node.log(pod, namespace=ns, container=container))


def test_the_example_ddp_job_trains_as_real_pods(node_kubeconfig: str, node: Client, ns: str) -> None:
    # The README's job, unchanged: its image stands in for the user's (tests/e2e/images.py).
    t0 = time.monotonic()
    run = torchjob(node_kubeconfig, "run", str(REPO / "examples" / "ddp" / "job.yaml"), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "torchjob: job ddp-example succeeded" in run.stderr
    # the replicas' lines streamed as they came, each tagged with its replica, as a local run shows them
    for rank, replica in enumerate(("master-0", "worker-0", "worker-1")):
        assert re.search(rf"^\[{replica}\] rank {rank} epoch 5/5 loss 0\.0\d+$", run.stdout, re.M), run.stdout
    logs = torchjob(node_kubeconfig, "logs", "ddp-example", "-n", ns)
    assert logs.returncode == 0, logs.stderr
    assert "world size 3, master ddp-example-master-0.ddp-example:23456" in logs.stdout
    for rank in range(3):
        assert re.search(rf"rank {rank} epoch 5/5 loss 0\.0\d+", logs.stdout), logs.stdout
    ips = [p.status.podIP for p in pods(node, "ddp-example", ns)]
    assert ips and all(ip.startswith(HOST.rsplit(".", 1)[0] + ".") for ip in ips), ips  # the CNI bridge's
    print(f"example job: run --kube to succeeded in {time.monotonic() - t0:.1f}s")
    # then the tutorial's next block as written (docs/tutorials/to-a-cluster.md), on the job it just ran
    t1 = time.monotonic()
    page = (REPO / "docs" / "tutorials" / "to-a-cluster.md").read_text()
    block = page.split("torchjob run --kube examples/ddp/job.yaml", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    said = {}
    for line in block.splitlines():
        args = [a for a in shlex.split(line, comments=True) if a != "--kube"]
        assert args[0] == "torchjob", line
        said[args[1]] = torchjob(node_kubeconfig, *args[1:], "-n", ns)
        assert said[args[1]].returncode == 0, line + said[args[1]].stderr
    assert list(said) == ["list", "describe", "logs", "delete"], block
    assert re.search(r"^ddp-example\s+Succeeded", said["list"].stdout, re.M), said["list"].stdout
    assert "Succeeded" in said["describe"].stdout and "worker-1" in said["describe"].stdout, said["describe"].stdout
    assert re.search(r"^\[worker-1\] rank 2 epoch 5/5 loss 0\.0\d+$", said["logs"].stdout, re.M), said["logs"].stdout
    wait_for("the job deleted", lambda: not list(node.list(TorchJobRes, namespace=ns)) or None, timeout=60)
    print(f"the tutorial's list, describe, logs and delete: {time.monotonic() - t1:.1f}s")


def test_torchrun_with_two_processes_per_node(node_kubeconfig: str, node: Client, ns: str,
                                              tmp_path: Path) -> None:
    data = job_data("tr", workers=1, nproc_per_node="2", restart_policy="Never",
                    command=("torchrun", "/opt/tests/ddp_step.py"))
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    out = pod_log(node, "tr-master-0", ns) + pod_log(node, "tr-worker-0", ns)
    assert out.count("all-reduce ok: 10") == 4, out  # 2 pods x 2 processes: ranks 1..4 sum to 10


def test_an_elastic_job_keeps_training_when_a_worker_container_is_killed(node_kubeconfig: str, node: Client,
                                                                         ns: str, tmp_path: Path) -> None:
    data = job_data("el", master=False, workers=3, restart_policy="OnFailure", nproc_per_node=1,
                    # round 0 trains 100 s, killed mid-way whatever the node's pace (a whole-suite run's
                    # kill once came after a 30 s round 0 had ended); the round after it, 10 s
                    command=("torchrun", "/opt/tests/elastic.py", "400", "0.25", "40"),
                    elastic={"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d", "maxRestarts": 3,
                             # a lost node's survivors go on without waiting 30 s for it
                             "rdzvConf": [{"key": "last_call_timeout", "value": "2"}]})
    # The round with the pod made again is the short one (elastic.py): each pod is told its attempt.
    attempt = {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_ATTEMPT}']"}}
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "POD_ATTEMPT", "valueFrom": attempt}]
    sub = torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns)
    assert sub.returncode == 0, sub.stderr

    def logs() -> dict[str, str]:
        return {f"el-worker-{i}": pod_log(node, f"el-worker-{i}", ns) for i in range(3)}

    # Every node trains in one world of 3 (the rendezvous on el-worker-0.el resolved from each); the
    # group's rank 0, whichever node it is, prints every step.
    wait_for("a world of 3", lambda: any(re.search(r"round \d+ world 3 step 5\n", log) for log in logs().values()),
             timeout=180)
    survivors = {p.metadata.name: p.metadata.uid for p in pods(node, "el", ns) if p.metadata.name != "el-worker-2"}
    before = node.get(Pod, "el-worker-2", namespace=ns)
    kill_container(running_container(before))  # not worker-0: its agent holds the c10d rendezvous store
    # The survivors' agents restart their workers in a new rendezvous round, with the pod made for the
    # lost one, and training goes on: no survivor's pod is made again. (Their restart count says
    # nothing here: a new node's arrival is a membership change torchrun does not count as a restart;
    # each worker process a new round starts prints its step 0.)
    status = wait_for("the job's end", lambda: ended(node, "el", ns), timeout=240)
    assert "Succeeded" in conditions(status), status
    for name, uid in survivors.items():
        assert node.get(Pod, name, namespace=ns).metadata.uid == uid, f"{name} was made again"
        log = pod_log(node, name, ns)
        assert len(re.findall(rf"node {name[-1]} rank \d+ round \d+ world [1-3] step 0\n", log)) >= 2, (name, log)
        assert re.search(r"world [1-3] done\n", log), (name, log)
    # The killed replica failed with 137 and was made again (OnFailure), counted as its restart only.
    assert status["restartCount"] == 1 and status["replicas"]["worker-2"]["restarts"] == 1, status
    assert node.get(Pod, "el-worker-2", namespace=ns).metadata.uid != before.metadata.uid
    described = torchjob(node_kubeconfig, "describe", "el", "-n", ns).stdout
    assert "worker-2" in described and "137" in described, described


def test_a_failing_worker_under_never_fails_the_job_and_leaves_no_pod_running(node_kubeconfig: str, node: Client,
                                                                             ns: str, tmp_path: Path) -> None:
    data = job_data("nv", workers=2, restart_policy="Never",
                    command=("python", "/opt/tests/ddp_step.py", "--fail-replica", "worker-1", "--fail-code", "3"))
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns)
    assert run.returncode == 1, run.stdout + run.stderr
    status = status_of(node, "nv", ns)
    assert status["failure"]["replica"] == "worker-1" and status["failure"]["exitCode"] == 3, status
    # Nothing of the job runs on: the master and worker-0, stuck in init_process_group, are stopped.
    wait_for("no running pod", lambda: all(p.status.phase not in ("Running", "Pending") or p.metadata.deletionTimestamp
                                           for p in pods(node, "nv", ns)), timeout=60)
    wait_for("no container left", lambda: not any(
        running_container(p) for p in pods(node, "nv", ns)), timeout=60)


def test_exit_code_137_from_a_real_sigkill_recreates_the_pod(node_kubeconfig: str, node: Client, ns: str,
                                                             tmp_path: Path) -> None:
    data = job_data("ec", workers=1, restart_policy="ExitCode", command=("sleep", "300"))
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "40"]
    no_wait = {"annotations": {"torchjob.dev/wait-for-master": "false"}}  # the master does not listen
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = no_wait
    sub = torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns)
    assert sub.returncode == 0, sub.stderr
    first = wait_for("worker-0 running", lambda: running_container(node.get(Pod, "ec-worker-0", namespace=ns)))
    uid = node.get(Pod, "ec-worker-0", namespace=ns).metadata.uid
    kill_container(first)
    # Exit 137 is retryable under ExitCode: the pod is made again (a new uid), and counted.
    wait_for("worker-0 made again and running", lambda: (p := node.get(Pod, "ec-worker-0", namespace=ns))
             .metadata.uid != uid and running_container(p), timeout=60)
    status = status_of(node, "ec", ns)
    assert status["restartCount"] == 1, status
    described = torchjob(node_kubeconfig, "describe", "ec", "-n", ns)
    assert "137" in described.stdout, described.stdout
    assert torchjob(node_kubeconfig, "delete", "ec", "-n", ns).returncode == 0


def test_the_init_container_waits_for_a_master_that_starts_late(node_kubeconfig: str, node: Client, ns: str,
                                                                tmp_path: Path) -> None:
    data = job_data("late", workers=1, restart_policy="Never", command=("python", "/opt/tests/ddp_step.py"))
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"] = [
        "sh", "-c", "sleep 8; exec python /opt/tests/ddp_step.py"]
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns)
    assert run.returncode == 0, run.stdout + run.stderr
    worker = node.get(Pod, "late-worker-0", namespace=ns)
    init = worker.status.initContainerStatuses[0]
    assert init.name == "wait-for-master" and init.state.terminated.exitCode == 0
    waited = (init.state.terminated.finishedAt - init.state.terminated.startedAt).total_seconds()
    assert waited >= 4, waited  # the master listened only after its 8 s sleep
    assert "waiting for late-master-0.late 23456" in pod_log(node, "late-worker-0", ns, "wait-for-master")
    assert "all-reduce ok: 3" in pod_log(node, "late-worker-0", ns)


def test_torch_error_file_reaches_the_termination_message_and_the_root_cause(node_kubeconfig: str, node: Client,
                                                                             ns: str, tmp_path: Path) -> None:
    data = job_data("boom", workers=1, restart_policy="Never",
                    command=("python", "/opt/tests/ddp_step.py", "--fail-replica", "worker-0", "--raise"))
    run = torchjob(node_kubeconfig, "run", str(job_file(tmp_path, data)), "-n", ns)
    assert run.returncode == 1, run.stdout + run.stderr
    worker = node.get(Pod, "boom-worker-0", namespace=ns)
    term = next(cs for cs in worker.status.containerStatuses if cs.name == "pytorch").state.terminated
    assert "could not load its shard" in (term.message or ""), term  # torch's error file, via /dev/termination-log
    failure = status_of(node, "boom", ns)["failure"]
    assert failure["replica"] == "worker-0" and "could not load its shard" in failure["message"], failure
    described = torchjob(node_kubeconfig, "describe", "boom", "-n", ns)
    assert "could not load its shard" in described.stdout, described.stdout


def test_suspend_resume_and_delete_with_real_pods(node_kubeconfig: str, node: Client, ns: str,
                                                  tmp_path: Path) -> None:
    data = job_data("sr", workers=1, restart_policy="OnFailure",
                    command=("python", "/opt/tests/ddp_step.py", "--sleep", "300"))
    assert torchjob(node_kubeconfig, "submit", str(job_file(tmp_path, data)), "-n", ns).returncode == 0

    def both_running() -> bool:
        return len([p for p in pods(node, "sr", ns) if running_container(p)]) == 2

    wait_for("both pods running", both_running)
    wait_for("the all-reduce", lambda: "all-reduce ok: 3" in pod_log(node, "sr-master-0", ns))
    containers = {running_container(p) for p in pods(node, "sr", ns)}
    assert torchjob(node_kubeconfig, "suspend", "sr", "-n", ns).returncode == 0
    wait_for("no pods", lambda: not pods(node, "sr", ns), timeout=60)
    # their containers are gone from the node: the pod objects go first, the tasks on the node after
    wait_for("no containers on the node", lambda: not containers & set(node_tasks()), timeout=60)
    assert torchjob(node_kubeconfig, "resume", "sr", "-n", ns).returncode == 0
    wait_for("both pods running again", both_running)
    wait_for("the all-reduce again", lambda: "all-reduce ok: 3" in pod_log(node, "sr-master-0", ns))
    containers = {running_container(p) for p in pods(node, "sr", ns)}

    assert torchjob(node_kubeconfig, "delete", "sr", "-n", ns).returncode == 0
    wait_for("no pods", lambda: not pods(node, "sr", ns), timeout=60)
    # the garbage collector deletes the job's pods and its Service in no set order
    wait_for("no Service", lambda: not list(node.list(Service, namespace=ns)), timeout=60)
    assert not list(node.list(TorchJobRes, namespace=ns))
    wait_for("no containers on the node", lambda: not containers & set(node_tasks()), timeout=60)
