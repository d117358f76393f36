"""The CLI with --kube against a real kube-apiserver and the operator, and two operators sharing
the work through leader election."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod

from tests.jobs import job_data
from tests.kube.conftest import REPO, Operator, job_status, set_pod, wait_job
from tests.kube.test_operator import create, pods_of, wait_pods
from torchjob.kube.clientside.kube_runtime import logs as kube_logs
from torchjob.kube.controller.process.operator import LEASE_NAME
from torchjob.kube.machinery.client import TorchJobRes

pytestmark = pytest.mark.kube
EXAMPLE = REPO / "examples" / "ddp" / "job.yaml"


def torchjob(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchjob", *args, "--kube", "--kubeconfig", kubeconfig],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_submit_list_describe_suspend_resume_delete(kubeconfig: str, kube: Client, namespace: str,
                                                     operator: Operator) -> None:
    out = torchjob(kubeconfig, "submit", str(EXAMPLE), "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert f"job ddp-example submitted to {namespace}" in out.stdout
    wait_pods(kube, "ddp-example", namespace, 3)

    again = torchjob(kubeconfig, "submit", str(EXAMPLE), "-n", namespace)
    assert again.returncode != 0 and "exists" in again.stderr and "Traceback" not in again.stderr

    listed = torchjob(kubeconfig, "list", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [(j["name"], j["namespace"], j["replicas"]) for j in json.loads(listed.stdout)] == [
        ("ddp-example", namespace, 3)]
    table = torchjob(kubeconfig, "list", "-A").stdout.splitlines()
    assert table[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert any(line.split()[:2] == [namespace, "ddp-example"] for line in table[1:])

    described = torchjob(kubeconfig, "describe", "ddp-example", "-n", namespace)
    assert described.returncode == 0, described.stderr
    assert "ddp-example" in described.stdout and "master-0" in described.stdout

    assert torchjob(kubeconfig, "suspend", "ddp-example", "-n", namespace).returncode == 0
    wait_job(kube, "ddp-example", namespace, lambda s: s.get("state") == "Suspended")
    wait_pods(kube, "ddp-example", namespace, 0)
    assert torchjob(kubeconfig, "resume", "ddp-example", "-n", namespace).returncode == 0
    wait_pods(kube, "ddp-example", namespace, 3)

    assert torchjob(kubeconfig, "delete", "ddp-example", "-n", namespace).returncode == 0
    with pytest.raises(ApiError):
        kube.get(TorchJobRes, "ddp-example", namespace=namespace)
    missing = torchjob(kubeconfig, "describe", "ddp-example", "-n", namespace)
    assert missing.returncode != 0 and "no job named 'ddp-example'" in missing.stderr


def test_only_the_leader_acts_and_another_takes_over_when_it_dies(kubeconfig: str, kube: Client, namespace: str,
                                                                  tmp_path: Path) -> None:
    args = ("--leader-elect", "--lease-namespace", namespace, "--lease-duration", "3")
    ops = [Operator(kubeconfig, tmp_path / f"op{i}.log", args) for i in range(2)]
    for op in ops:
        op.start()
    try:
        create(kube, job_data("led", workers=1), namespace)
        wait_pods(kube, "led", namespace, 2)
        holder = kube.get(Lease, LEASE_NAME, namespace=namespace).spec.holderIdentity
        leaders = [op for op in ops if f"became the leader as {holder}" in op.log.read_text()]
        assert len(leaders) == 1, [op.log.read_text() for op in ops]
        follower = next(op for op in ops if op is not leaders[0])
        assert "caches synced" not in follower.log.read_text()  # it waits, watching nothing

        leaders[0].stop(kill=True)
        create(kube, job_data("after", workers=1), namespace)
        wait_pods(kube, "after", namespace, 2, timeout=30)  # the follower took the Lease and acts
        assert kube.get(Lease, LEASE_NAME, namespace=namespace).spec.holderIdentity != holder
        assert len(pods_of(kube, "led", namespace)) == 2  # and adopted the first job: no duplicate
        assert job_status(kube, "after", namespace)["state"] in ("Created", "Running")
    finally:
        for op in ops:
            op.stop()


def test_a_leader_stopped_by_sigterm_gives_up_the_lease_and_the_next_leads_at_once(
        kubeconfig: str, kube: Client, namespace: str, tmp_path: Path) -> None:
    args = ("--leader-elect", "--lease-namespace", namespace, "--lease-duration", "60")
    first, second = (Operator(kubeconfig, tmp_path / f"op{i}.log", args) for i in range(2))
    first.start()
    try:
        create(kube, job_data("handover", workers=1), namespace)
        wait_pods(kube, "handover", namespace, 2)
        first.stop()  # SIGTERM, as a rollout or a drain of its node sends
        log = first.log.read_text()
        assert first.proc is not None and first.proc.returncode == 0, log
        assert "gave up the lease" in log and "stopped (SIGTERM)" in log and "Traceback" not in log
        assert not kube.get(Lease, LEASE_NAME, namespace=namespace).spec.holderIdentity

        second.start()
        start = time.monotonic()
        while "became the leader" not in second.log.read_text():
            assert time.monotonic() - start < 20, second.log.read_text()  # not the 60 s of an expired lease
            time.sleep(0.2)
        kube.delete(Pod, "handover-worker-0", namespace=namespace, grace_period=0)
        wait_pods(kube, "handover", namespace, 2)  # the new leader acts
    finally:
        first.stop()
        second.stop()


def running_on_kwok(kube: Client, name: str, namespace: str) -> None:
    """A master and a worker scheduled onto a KWOK node, whose kubelet server (scripts/dev-cluster.sh)
    answers every container's log with the same two lines; returns once the job is Running."""
    data = job_data(name, workers=1)
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                                                    "effect": "NoSchedule"}]
    create(kube, data, namespace)
    wait_job(kube, name, namespace, lambda s: s.get("state") == "Running")


def test_logs_come_through_the_api_server_from_the_node(kubeconfig: str, kube: Client, namespace: str,
                                                        operator: Operator) -> None:
    running_on_kwok(kube, "lg", namespace)
    out = torchjob(kubeconfig, "logs", "lg", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[master-0] fake container output from KWOK (scripts/dev-cluster.sh)", "[master-0] second line",
        "[worker-0] fake container output from KWOK (scripts/dev-cluster.sh)", "[worker-0] second line"]
    one = torchjob(kubeconfig, "logs", "lg", "--replica", "worker-0", "-n", namespace)
    assert one.stdout.splitlines() == ["[worker-0] fake container output from KWOK (scripts/dev-cluster.sh)",
                                       "[worker-0] second line"]
    missing = torchjob(kubeconfig, "logs", "lg", "--replica", "worker-7", "-n", namespace)
    assert missing.returncode != 0 and "worker-7" in missing.stderr and "Traceback" not in missing.stderr


def test_a_pod_deleted_while_logs_reads_them_is_said_and_the_others_shown(
        kube: Client, namespace: str, operator: Operator) -> None:
    # A job that ends stops its other pods (CompleteJob, cleanPodPolicy): one may go between the
    # listing of the job's pods and the read of its logs. The API server answers 404 for real here.
    running_on_kwok(kube, "gonelog", namespace)
    operator.stop()  # else it makes master-0 again at once, and the read may reach the new pod's logs

    class DeletesMasterFirst(Client):  # the timing of the race, made certain: the delete comes just before
        def log(self, name: str, **kw: object) -> object:  # type: ignore[override]
            if name == "gonelog-master-0":
                kube.delete(Pod, name, namespace=namespace, grace_period=0)
            return super().log(name, **kw)  # type: ignore[arg-type]

    client = DeletesMasterFirst(config=kube.config, field_manager="torchjob-tests")
    said = list(kube_logs(client, "gonelog", namespace))
    assert said == ["[master-0] (no logs: the pod was deleted while they were read)",
                    "[worker-0] fake container output from KWOK (scripts/dev-cluster.sh)", "[worker-0] second line"]


def run_in_background(kubeconfig: str, path: Path, namespace: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "torchjob", "run", str(path), "--kube", "--kubeconfig", kubeconfig,
                             "-n", namespace], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("exit_code", [0, 3])
def test_run_follows_the_job_on_the_cluster_to_its_end(kubeconfig: str, kube: Client, namespace: str,
                                                       operator: Operator, tmp_path: Path, exit_code: int) -> None:
    path = tmp_path / "job.yaml"
    data = job_data("rk", workers=1)
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    path.write_text(json.dumps(data))
    proc = run_in_background(kubeconfig, path, namespace)
    try:
        pods = wait_pods(kube, "rk", namespace, 2)
        for p in pods:
            set_pod(kube, p, "Running")
        wait_job(kube, "rk", namespace, lambda s: any(c["type"] == "Running" and c["status"] == "True"
                                                      for c in s.get("conditions", [])))
        set_pod(kube, next(p for p in pods if p.metadata.name == "rk-master-0"),
                "Succeeded" if exit_code == 0 else "Failed", exit_code)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "Traceback" not in err
    lines = err.rstrip().splitlines()
    assert lines[0] == f"torchjob: job rk created in {namespace}"
    # the events in the order the operator decided them, whatever the second they were recorded in
    assert lines.index("torchjob: job rk created with 2 replicas") < lines.index("torchjob: every replica is running")
    if exit_code == 0:
        assert proc.returncode == 0, err
        assert lines[-1].startswith("torchjob: job rk succeeded in ")
    else:
        assert proc.returncode == 1, err
        assert "torchjob: master-0 failed with exit code 3 (restartPolicy Never)" in lines
        # then the root cause's block, as locally, and the end
        block = lines[lines.index("torchjob: master-0 failed with exit code 3 (restartPolicy Never)") + 1:]
        assert block[:2] == ["=" * 72, "rk FAILED: ReplicaFailed"] and block[-2] == "=" * 72, block
        assert "  replica   : master-0 (attempt 0, node rank 0, pod rk-master-0)" in block
        assert lines[-1].startswith("torchjob: job rk failed in ")
        assert "`torchjob describe --kube rk`" in err


def local(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchjob", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, "TORCHJOB_HOME": str(home)}, cwd=REPO)


def test_both_runtimes_give_the_same_answer_to_the_same_request(kubeconfig: str, kube: Client, namespace: str,
                                                               operator: Operator, tmp_path: Path) -> None:
    home = tmp_path / "home"
    # A job that has ended: on the cluster (its master's pod succeeded) and on this machine.
    create(kube, job_data("done", workers=0), namespace)
    set_pod(kube, wait_pods(kube, "done", namespace, 1)[0], "Succeeded", 0)
    wait_job(kube, "done", namespace, lambda s: s.get("state") == "Succeeded")
    path = tmp_path / "done.yaml"
    path.write_text(json.dumps(job_data("done", workers=0, command=("python", "-c", "pass"))))
    assert local(home, "run", str(path)).returncode == 0
    for verb in ("suspend", "resume"):
        on_cluster = torchjob(kubeconfig, verb, "done", "-n", namespace)
        here = local(home, verb, "done")
        assert on_cluster.returncode == here.returncode == 2, (on_cluster.stderr, here.stderr)
        assert on_cluster.stderr == here.stderr == "error: job 'done' has already succeeded\n" \
                                                   "    fix: run it again instead\n"
    assert kube.get(TorchJobRes, "done", namespace=namespace).spec.get("runPolicy", {}).get("suspend") is not True

    # A job that runs: resume is refused (it is not suspended), on both.
    create(kube, job_data("live", workers=0), namespace)
    set_pod(kube, wait_pods(kube, "live", namespace, 1)[0], "Running")
    wait_job(kube, "live", namespace, lambda s: s.get("state") == "Running")
    path = tmp_path / "live.yaml"
    live = job_data("live", workers=0, command=("python", "-c", "import time; time.sleep(60)"))
    # an image, or the cluster's side refuses the document before it asks whether the name is taken
    live["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    path.write_text(json.dumps(live))
    assert local(home, "submit", "--grace-period", "2", str(path)).returncode == 0
    try:
        end = time.monotonic() + 30
        while not any(c["type"] == "Running" and c["status"] == "True" for c in json.loads(
                local(home, "describe", "live", "-o", "json").stdout or "{}").get("status", {}).get("conditions", [])):
            assert time.monotonic() < end, local(home, "describe", "live").stdout
            time.sleep(0.2)
        on_cluster = torchjob(kubeconfig, "resume", "live", "-n", namespace)
        here = local(home, "resume", "live")
        assert on_cluster.returncode == here.returncode == 2, (on_cluster.stderr, here.stderr)
        assert on_cluster.stderr == here.stderr == "error: job 'live' is not suspended\n" \
                                                   "    fix: suspend it first: torchjob suspend live\n"
        # A second job of a running one's name, and a replica it does not have.
        job_file = tmp_path / "live.yaml"
        on_cluster = subprocess.run([sys.executable, "-m", "torchjob", "submit", str(job_file), "--kube",
                                     "--kubeconfig", kubeconfig, "-n", namespace], capture_output=True, text=True,
                                    timeout=60, stdin=subprocess.DEVNULL)
        here = local(home, "submit", str(job_file))
        assert on_cluster.returncode == here.returncode == 2, (on_cluster.stderr, here.stderr)
        assert unplaced(on_cluster.stderr, namespace) == here.stderr == (
            "error: a job named 'live' exists and is running\n"
            "    fix: wait for it, delete it with `torchjob delete live`, or change metadata.name\n")
        on_cluster = torchjob(kubeconfig, "logs", "live", "--replica", "worker-7", "-n", namespace)
        here = local(home, "logs", "live", "--replica", "worker-7")
        assert on_cluster.returncode == here.returncode == 2, (on_cluster.stderr, here.stderr)
        assert on_cluster.stderr == here.stderr == "error: job 'live' has no replica 'worker-7' with output\n" \
                                                   "    fix: use one of ['master-0']\n"
    finally:
        local(home, "delete", "live")

    # A job that does not exist: the same words (the cluster's says where it looked).
    for verb in ("describe", "logs", "delete", "suspend", "resume"):
        on_cluster = torchjob(kubeconfig, verb, "nope", "-n", namespace)
        here = local(home, verb, "nope")
        assert on_cluster.returncode == here.returncode == 2, (verb, on_cluster.stderr, here.stderr)
        assert on_cluster.stderr.startswith(f"error: no job named 'nope' in {namespace}\n"), on_cluster.stderr
        assert here.stderr.startswith("error: no job named 'nope'\n"), here.stderr


def unplaced(message: str, namespace: str) -> str:
    """A message of the cluster's runtime without where it looked (` in NAMESPACE`, ` --kube`)."""
    return message.replace(f" in {namespace}", "").replace(" --kube", "")


def test_render_kube_shows_the_pods_the_operator_makes(kubeconfig: str, kube: Client, namespace: str,
                                                       operator: Operator, tmp_path: Path) -> None:
    data = job_data("same", workers=2)
    data["metadata"]["namespace"] = namespace
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    path = tmp_path / "same.yaml"
    path.write_text(json.dumps(data))
    rendered = subprocess.run([sys.executable, "-m", "torchjob", "render", "--kube", "-o", "json", str(path)],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    shown = {o["metadata"]["name"]: o for o in json.loads(rendered) if o["kind"] == "Pod"}
    assert torchjob(kubeconfig, "submit", str(path), "-n", namespace).returncode == 0
    made = {p.metadata.name: p.to_dict() for p in wait_pods(kube, "same", namespace, 3)}
    assert set(made) == set(shown) == {"same-master-0", "same-worker-0", "same-worker-1"}
    differ = {"TORCHJOB_JOB_UID", "KUBEFLOW_TRAINER_SERVER_URL"}  # the uid is the server's; the URL the operator's
    for name, pod in shown.items():
        want, got = pod["spec"]["containers"][0], made[name]["spec"]["containers"][0]
        assert (want["command"], want.get("args")) == (got["command"], got.get("args"))
        assert [e for e in want["env"] if e["name"] not in differ] == [e for e in got["env"]
                                                                         if e["name"] not in differ], name
        assert pod["metadata"]["labels"] == made[name]["metadata"]["labels"]
        assert pod["spec"]["hostname"] == made[name]["spec"]["hostname"]
        assert [c["name"] for c in pod["spec"].get("initContainers", [])] == [
            c["name"] for c in made[name]["spec"].get("initContainers", [])]
