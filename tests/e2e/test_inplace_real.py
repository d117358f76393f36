"""A rank restarted in place on the real node (runPolicy.warmSpares, issue 32): real containers whose
PID 1 is the entry point the operator ships in its ConfigMap, real torch, the operator's endpoint
reached over the pods' bridge with their projected tokens. The worker's training process is SIGKILLed
inside its container, as a crash or the OOM killer would; the gang restarts in the same two pods, each
second attempt being the warm spare the pod had started, and training resumes from the checkpoint.
The same job without spares, killed the same way, has its pods made again and ends with the same
status."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod

from tests.e2e.conftest import SOCK, pods, running_container, status_of, torchjob, wait_for
from tests.e2e.images import TESTS_IMAGE
from tests.jobs import job_data
from tests.kube.conftest import REPO
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.front import inplace, stacks
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT
from torchjob.local.supervisor import pids

pytestmark = pytest.mark.kube

# The bench's trainer: a gloo all-reduce per step, rank 0 checkpoints the step it finished and a new
# attempt resumes after it; `--stop-file` ends every rank once the test has seen the recovery.
STEPS = REPO / "bench" / "programs" / "steps.py"
LINE = re.compile(r"^@[\d.]+ rank (\d+) (start pid (\d+)|step (\d+))", re.M)


def job_file(tmp_path: Path, name: str, spares: bool) -> tuple[Path, Path]:
    """The job, and the host directory its ranks share (the checkpoint, the stop file): what a volume
    of the cluster's storage would be."""
    prog, data = tmp_path / name / "prog", tmp_path / name / "data"
    prog.mkdir(parents=True)
    data.mkdir()
    shutil.copy(STEPS, prog / "steps.py")
    job = job_data(name, workers=1, restart_policy="OnFailure", restart_scope=None,
                   # the first rendezvous waits for a slow peer's import (30 s or more under load) rather
                   # than fail: one restart, the kill's, is what the test counts
                   command=("python", "/opt/train/steps.py", "--steps", "100000", "--step-time", "0.2",
                            "--dir", "/data", "--stop-file", "/data/stop", "--timeout", "180"),
                   run_policy={"backoffLimit": 2, **({"warmSpares": True} if spares else {})})
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        c = pod["containers"][0]
        c["image"] = TESTS_IMAGE
        c["volumeMounts"] = [{"name": "train", "mountPath": "/opt/train", "readOnly": True},
                             {"name": "data", "mountPath": "/data"}]
        pod["volumes"] = [{"name": "train", "hostPath": {"path": str(prog), "type": "Directory"}},
                          {"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}]
    path = tmp_path / name / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, data


def pod_log(node: Client, pod: str, ns: str) -> str:
    return "\n".join(node.log(pod, namespace=ns, container="pytorch"))


def attempts(log: str) -> list[tuple[int, list[int]]]:
    """Each attempt the log shows: (its pid in the container, the steps it logged)."""
    found: list[tuple[int, list[int]]] = []
    for m in LINE.finditer(log):
        if m[3]:
            found.append((int(m[3]), []))
        elif found:
            found[-1][1].append(int(m[4]))
    return found


def container_processes(node: Client, pod: str, ns: str, sock: Path = SOCK) -> tuple[str, list[int]]:
    """The pod's training container and the host pids of every process in it (its cgroup, as its
    node's containerd, at `sock`, lists it)."""
    cid = running_container(node.get(Pod, pod, namespace=ns), "pytorch")
    assert cid, f"{pod} has no running training container"
    out = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "tasks", "ps", cid], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return cid, [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]


def ns_pid(pid: int) -> int | None:
    """The process's pid in its innermost pid namespace (the container's)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        return None
    return None


def training_process(node: Client, pod: str, ns: str, uid: str, rank: int,
                     sock: Path = SOCK) -> tuple[int, int | None]:
    """(the host pid of the attempt's training process in the pod's container, the spare's or None):
    a process of that container running the trainer, with the job's uid and the rank in its environment;
    the spare runs it behind the spare launcher; the entry point (the container's PID 1) and the stacks front
    (`python -I -c BOOT python steps.py ...`: the command is its arguments) are neither."""
    _, procs = container_processes(node, pod, ns, sock)
    trainers: list[int] = []
    spares: list[int] = []
    for pid in procs:
        args = pids.cmdline(pid)
        if (not any(inplace.ENTRY in a or a.startswith(stacks.HEAD) for a in args) and "/opt/train/steps.py" in args
                and pids.environ_has(pid, f"TORCHJOB_JOB_UID={uid}") and pids.environ_has(pid, f"RANK={rank}")):
            (spares if any(a.endswith(inplace.LAUNCHER) for a in args) else trainers).append(pid)
    assert len(trainers) == 1 and len(spares) <= 1, (pod, trainers, spares, {p: pids.cmdline(p) for p in procs})
    return trainers[0], (spares[0] if spares else None)


def kill_trainer(node: Client, pod: str, ns: str, uid: str, rank: int, sock: Path = SOCK) -> int:
    """SIGKILL the training process of the pod's container (not its PID 1 when an entry point runs in
    front of it); its pid in the container. Sent through a pidfd to a process checked again as the one
    found: in that container still (its cgroup), the trainer of this job's rank."""
    pid, _ = training_process(node, pod, ns, uid, rank, sock)
    inner, since = ns_pid(pid), pids.started(pid)

    def still(p: int) -> bool:
        return (pids.started(p) == since and p in container_processes(node, pod, ns, sock)[1]
                and pids.environ_has(p, f"TORCHJOB_JOB_UID={uid}") and pids.environ_has(p, f"RANK={rank}"))

    assert inner is not None and pids.send(pid, 9, still), f"the trainer of {pod} (pid {pid}) could not be killed"
    return inner


def run_and_kill(node_kubeconfig: str, node: Client, ns: str, tmp_path: Path, name: str,
                 spares: bool) -> dict[str, Any]:
    path, data = job_file(tmp_path, name, spares)
    assert torchjob(node_kubeconfig, "submit", str(path), "-n", ns).returncode == 0
    master, worker = f"{name}-master-0", f"{name}-worker-0"

    def trained(at: int) -> bool:
        return all(any(s and s[-1] >= at for _, s in attempts(pod_log(node, p, ns))[-1:]) for p in (master, worker))

    wait_for("both ranks training", lambda: trained(5), timeout=150, every=0.5)
    before = {p.metadata.name: p.metadata.uid for p in pods(node, name, ns)}
    uid = str(node.get(TorchJobRes, name, namespace=ns).metadata.uid)
    spare_pids: dict[str, int] = {}
    if spares:  # each pod's spare warm and waiting, as in a job that has trained a while
        def warm() -> bool:
            for pod, rank in ((master, 0), (worker, 1)):
                _, spare = training_process(node, pod, ns, uid, rank)
                if spare is None or not pids.spare_waiting(spare):
                    return False
                inner = ns_pid(spare)
                assert inner is not None
                spare_pids[pod] = inner
            return True

        wait_for("the warm spares", warm, timeout=90, every=0.5)
    killed = kill_trainer(node, worker, ns, uid, 1)

    # every rank resumes in a new attempt (in its pod, or in a pod made again) and trains 3 steps past
    # the checkpoint, then the job stops
    def resumed() -> bool:
        for p in (master, worker):
            runs = attempts(pod_log(node, p, ns))
            new = runs[1:] if node.get(Pod, p, namespace=ns).metadata.uid == before[p] else runs
            if not new or len(new[-1][1]) < 3:
                return False
        return True

    wait_for("training resumed on both ranks", resumed, timeout=120, every=0.5)
    (data / "stop").write_text("")
    # The job's end, and the operator's count of it once no replica runs: the job succeeds when the
    # master does, and the worker's own end comes a moment later or earlier (with or without spares:
    # a status read at the first moment of success counted it either way; seen in a landing run).
    status = wait_for("the job's end", lambda: (s := status_of(node, name, ns)).get("state") in (
        "Succeeded", "Failed") and not any(r.get("active") for r in s.get("replicaStatuses", {}).values())
        and s, timeout=90, every=0.5)
    logs = {p: pod_log(node, p, ns) for p in (master, worker)}
    return {"status": status, "before": before, "killed": killed, "spares": spare_pids, "logs": logs,
            "after": {p.metadata.name: p for p in pods(node, name, ns)}}


def story(node: Client, name: str, ns: str, status: dict[str, Any]) -> dict[str, Any]:
    """What kubectl shows of the job's course, less its name and its times: the status, the events'
    reasons and messages in order, once the event of the job's end is recorded. The operator writes a
    round's events after its status, in a task of their own (reconciler._write): a status read as ended
    says nothing of whether that round's events are in yet. Read once at the end status, the job that
    failed without spares had no BackoffLimitExceeded event beside its Failed status (a landing run:
    its master was counted ended in the round that failed the job, so the status the test waits for
    came with that round's write and not one later, and the events were listed before the round's
    event task had written)."""
    end = next(c["reason"] for c in status["conditions"] if c["type"] in ("Succeeded", "Failed")
               and c["status"] == "True")

    def recorded() -> list[Event] | None:
        found = list(node.list(Event, namespace=ns, fields={"involvedObject.name": name}))
        return found if any(e.reason == end for e in found) else None

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if not k.endswith("Time")}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return re.sub(rf"\b{name}\b", "JOB", value) if isinstance(value, str) else value

    events = sorted(wait_for(f"{name}'s {end} event", recorded, timeout=30, every=0.5),
                    key=lambda e: str(e.eventTime or e.firstTimestamp or e.metadata.creationTimestamp))
    # status.keptTails holds the last lines of pods that are gone: the job without spares has its pods
    # deleted at the restart and keeps theirs; in place no pod goes. The rest of the status is the course.
    told = {k: v for k, v in status.items() if k != "keptTails"}
    return {"status": plain(told), "events": [(e.reason, plain(e.message)) for e in events]}


@pytest.mark.timeout(600)  # two jobs, each bounded by its waits: about 45 s on an idle 2-core machine
def test_a_killed_rank_restarts_in_place_in_its_pods_as_their_spares_and_the_job_goes_as_without(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    spared = run_and_kill(node_kubeconfig, node, ns, tmp_path, "ip", spares=True)
    t_spared = time.monotonic() - t0
    plain = run_and_kill(node_kubeconfig, node, ns, tmp_path, "pl", spares=False)
    print(f"spared job {t_spared:.0f} s, the plain one {time.monotonic() - t0 - t_spared:.0f} s")

    status = spared["status"]
    assert status["state"] == "Succeeded" and status["restartCount"] == 1, status
    # In place: the same two pods throughout, now at attempt 1, their containers never restarted by the
    # kubelet; each entry point ended with its last attempt's code, 0.
    after: dict[str, Pod] = spared["after"]
    assert {n: p.metadata.uid for n, p in after.items()} == spared["before"], (spared["before"], after.keys())
    for name, pod in after.items():
        assert pod.metadata.annotations[ANNOTATION_ATTEMPT] == "1", (name, pod.metadata.annotations)
        assert pod.metadata.annotations[inplace.ANNOTATION_IN_PLACE] == "true"
        assert pod.status.phase == "Succeeded", (name, pod.status)
        cs = next(c for c in pod.status.containerStatuses if c.name == "pytorch")
        term = cs.state.terminated if cs.state else None
        assert cs.restartCount == 0 and term is not None and term.exitCode == 0, (name, cs)
    # the last step rank 0 finished (and checkpointed) before the kill: every rank's second attempt
    # resumes after it
    checkpoint = attempts(spared["logs"]["ip-master-0"])[0][1][-1]
    assert checkpoint >= 5
    for name, log in spared["logs"].items():
        runs = attempts(log)
        assert len(runs) == 2, (name, log)
        (_, first), (second_pid, second) = runs
        # the second attempt is the pod's spare (its pid in the container)
        assert second_pid == spared["spares"][name], (name, second_pid, spared["spares"], log)
        assert first and second and second[0] == checkpoint + 1, (name, first, second)
        assert second == list(range(second[0], second[0] + len(second))), (name, second)
    worker = attempts(spared["logs"]["ip-worker-0"])
    assert worker[0][0] == spared["killed"], (worker, spared["killed"])  # the process killed was the trainer

    # Without spares: the pods are made again, the job's course and end the same.
    assert plain["status"]["state"] == "Succeeded" and plain["status"]["restartCount"] == 1, plain["status"]
    assert not set(p.metadata.uid for p in plain["after"].values()) & set(plain["before"].values())
    for name, log in plain["logs"].items():
        ((_, steps),) = attempts(log)  # the new pod's one attempt, resumed after the checkpoint too
        assert steps and steps[0] > 5, (name, log)
    assert story(node, "ip", ns, status) == story(node, "pl", ns, plain["status"])
    described = torchjob(node_kubeconfig, "describe", "ip", "-n", ns).stdout
    assert "137" in described, described


def failing_job(tmp_path: Path, name: str, spares: bool) -> Path:
    """worker-0 raises under torch's @record at once in every attempt (its error file says why); one
    restart allowed."""
    job = job_data(name, workers=1, restart_policy="OnFailure", restart_scope=None,
                   command=("python", "/opt/tests/ddp_step.py", "--fail-replica", "worker-0", "--raise"),
                   run_policy={"backoffLimit": 1, **({"warmSpares": True} if spares else {})})
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = TESTS_IMAGE
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.timeout(600)
def test_a_rank_that_fails_every_attempt_fails_the_job_in_place_as_without_spares_with_its_error_file(
        node_kubeconfig: str, node: Client, ns: str, tmp_path: Path) -> None:
    ended: dict[str, dict[str, Any]] = {}
    first: dict[str, dict[str, str]] = {}
    for name, spares in (("fip", True), ("fpl", False)):
        assert torchjob(node_kubeconfig, "submit", str(failing_job(tmp_path, name, spares)), "-n", ns).returncode == 0
        wait_for(f"{name}'s pods", lambda: len(pods(node, name, ns)) == 2, timeout=60)  # noqa: B023
        first[name] = {str(p.metadata.name): str(p.metadata.uid) for p in pods(node, name, ns)}
        # the end, counted once no replica runs (the master is stopped when the job fails: read at the first
        # moment of failure it was counted active or not, with or without spares; seen in a clean-clone run)
        ended[name] = wait_for(f"{name}'s end", lambda: (s := status_of(node, name, ns)).get(  # noqa: B023
            "state") in ("Succeeded", "Failed") and not any(
            r.get("active") for r in s.get("replicaStatuses", {}).values()) and s, timeout=180, every=0.5)
    status = ended["fip"]
    assert status["state"] == "Failed" and status["restartCount"] == 1, status
    failure = status["failure"]
    assert failure["replica"] == "worker-0" and failure["exitCode"] == 1, failure
    assert "could not load its shard" in failure["message"], failure
    # In place: no pod made again; the worker's entry point, released once the job had failed, ended
    # its container with the last attempt's code and left its error file as the termination message.
    worker = wait_for("the worker's container ended", lambda: (p := node.get(Pod, "fip-worker-0", namespace=ns))
                      .status.phase in ("Failed", "Succeeded") and p, timeout=60)
    # (the master's attempt still ran: it is stopped with its pod deleted, as without spares)
    now = {str(p.metadata.name): str(p.metadata.uid) for p in pods(node, "fip", ns)}
    assert now["fip-worker-0"] == first["fip"]["fip-worker-0"] and now.items() <= first["fip"].items(), (now, first)
    assert worker.metadata.annotations[ANNOTATION_ATTEMPT] == "1"
    term = next(c for c in worker.status.containerStatuses if c.name == "pytorch").state.terminated
    assert term is not None and term.exitCode == 1 and "could not load its shard" in (term.message or ""), term
    assert "could not load its shard" in pod_log(node, "fip-worker-0", ns)
    # Without spares: the same story. (Less the master's count in replicaStatuses: stopped when the job
    # failed, it is counted failed or not at all depending on whether its pod was seen ended before it
    # was gone, with or without spares; seen both ways here.)
    spared, plain = story(node, "fip", ns, status), story(node, "fpl", ns, ended["fpl"])
    for told in (spared, plain):
        told["status"]["replicaStatuses"]["Master"].pop("failed")
    assert spared == plain
    described = torchjob(node_kubeconfig, "describe", "fip", "-n", ns).stdout
    assert "could not load its shard" in described, described
