"""`bench/recovery.py --nodes 2`: recovery of a job whose ranks span two real nodes, one fault a run.

The job is bench/recovery.py's 1 master + 3 workers TorchJob (bench/programs/steps.py: a gloo
all-reduce per step, rank 0 saves the step it finished after every step, a new attempt resumes after
it), its four pods two and two on real-node-0 and real-node-1 (a topology spread constraint), on a
two-node dev cluster (`scripts/dev-cluster.sh up --real-nodes 2`). Once every rank is past step 15:

  spare-kill   with `runPolicy.warmSpares: true`, once every pod's spare is warm, the training process
               of a worker on real-node-1 is SIGKILLed through real-node-1's containerd: the ranks
               restart in place, in their pods on both nodes;
  drain        without spares, `kubectl drain real-node-1 --ignore-daemonsets --delete-emptydir-data`:
               its two pods are evicted with their grace (the notice: SIGTERM); the ranks save on
               notice (steps.py --save-on-notice: torchjob.report.stopping(), every rank stops at the
               same step, rank 0 saves it, all exit 143), the operator restarts the gang and the
               scheduler puts every pod on real-node-0 (node 1 is uncordoned after);
  drain-no-notice  the same drain of a job whose program does not call stopping(): the ranks go on
               until their pods end, and the job resumes from its last periodic checkpoint;
  node-lost    real-node-1 dies as a machine does (tests/e2e/daemons.py kill_node: its kubelet and
               containerd SIGKILLed and held down, every process of its containers killed); the
               node controller marks it NotReady after its node-monitor-grace-period (50 s), the
               operator force-deletes its pods --force-delete-after (60 s, its default) past their
               grace, and makes them again on real-node-0. Node 1 is started again after.

Every fault but spare-kill runs a job that checkpoints every CKPT_EVERY steps (steps.py
--ckpt-every), so a fault without notice loses the steps since the last one.

The drains and the lost node are also run against Kubeflow's training-operator v1.8.1
(hack/kubeflow/build.sh; a process on the host, as bench/recovery.py --node runs it) in the same
run: the PyTorchJob a Kubeflow user writes for the same job (bench/recovery.py's node_job,
restartPolicy OnFailure), spread the same way. Kubeflow makes each evicted pod again alone; the
ranks left fail in their collective and their containers are restarted in place by the kubelet. A
lost node's pods it leaves Terminating: its node-lost run is given KUBEFLOW_LOST_S. The ratio of
each fault's recoveries is printed.

Printed per fault, as bench/recovery.py does: seconds from the fault to every rank of the new world
past step k + 1 (k: the last step any rank had logged at the fault), where the time went, the steps
lost (the last step the old world logged minus the step the new one resumed after), the pods made
again and where the pods ran.

It uses a two-node cluster already up in TORCHJOB_E2E_TWO_NODES_DIR (default
/tmp/torchjob-bench-two-nodes) or starts one there on TORCHJOB_E2E_TWO_NODES_SUBNETS (default
"10.253.0.0/24 10.253.1.0/24") and stops it at the end. Root. Without the Kubeflow operator's binary
(or with --no-kubeflow) torchjob's operator only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import recovery as rec

sys.path.insert(0, str(rec.REPO))
from tests.e2e.daemons import kill_node, start_daemon

STATE = Path(os.environ.get("TORCHJOB_E2E_TWO_NODES_DIR", "/tmp/torchjob-bench-two-nodes"))
SUBNETS = os.environ.get("TORCHJOB_E2E_TWO_NODES_SUBNETS", "10.253.0.0/24 10.253.1.0/24")
NODES = ("real-node-0", "real-node-1")
FAULTS = ("spare-kill", "drain", "drain-no-notice", "node-lost")
CKPT_EVERY = 10  # steps between periodic checkpoints (1 s at bench/recovery.py's STEP_TIME)
# Kubeflow's operator leaves a lost node's pods Terminating (kubeflow/trainer #2072, #2185): its
# node-lost run is given this long, the node controller's grace and the taint's 300 s toleration short of it
KUBEFLOW_LOST_S = 240
OURS, KUBEFLOW = "torchjob-operator", f"kubeflow-{rec.KUBEFLOW_VERSION}"
LABELS = {"torchjob": "torchjob.dev/job-name", "kubeflow": "training.kubeflow.org/job-name"}
NAME = "rec"


def devcluster(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNETS": SUBNETS}
    return subprocess.run(["bash", str(rec.REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def sock(node: str) -> str:
    """The node's containerd socket (scripts/real-node.sh: node i's state is realnode-i, node 0's realnode)."""
    i = NODES.index(node)
    return str(STATE / f"realnode{f'-{i}' if i else ''}" / "containerd" / "containerd.sock")


def spread(job: dict[str, Any], label: str) -> dict[str, Any]:
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            # a drained node (cordoned: tainted unschedulable) is no domain to spread over, else its
            # peers' pods wait Pending for it (docs/how-to/preemption.md)
            "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": {label: NAME}}}]
    return job


def steps_lost(d: Path, t_fault: float) -> int:
    """The last step the old world logged (a step may end just after the fault) minus the step the new
    world resumed after (its first step after its rendezvous, less one): the steps trained twice."""
    lines = rec.read_lines(d)
    joined = max(ln.t for ln in lines if ln.what == "joined" and ln.t > t_fault)
    last = max(int(ln.rest) for ln in lines if ln.what == "step" and ln.t < joined)
    first = min(int(ln.rest) for ln in lines if ln.what == "step" and ln.t > joined)
    return last - (first - 1)


def run_fault(runtime: str, fault: str, client: Any, kubectl: str, kubeconfig: str) -> rec.Trial:
    """One fault to one job: `runtime` torchjob (a TorchJob, torchjob's operator) or kubeflow (a
    PyTorchJob, Kubeflow's training-operator)."""
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod

    spares = fault == "spare-kill"
    ns = f"rec2-{uuid.uuid4().hex[:6]}"
    client.create(Namespace(metadata=ObjectMeta(name=ns)))
    d = rec.HOST_DIR / ns
    d.mkdir(parents=True, exist_ok=True)
    label = LABELS[runtime]
    res = (create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs") if runtime == "torchjob" else
           create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"))
    job = spread(rec.node_job(runtime, NAME, ns, False, ns, spares), label)
    if not spares:  # a periodic checkpoint; the notice saved on where the program reads it
        for rspec in job["spec"]["pytorchReplicaSpecs"].values():
            rspec["template"]["spec"]["containers"][0]["command"] += (
                ["--ckpt-every", str(CKPT_EVERY)] + (["--save-on-notice"] if fault == "drain" else []))
    created = client.create(res.from_dict(job))
    uid = str(created.metadata.uid)
    replicas = [f"{NAME}-master-0", *(f"{NAME}-worker-{i}" for i in range(3))]
    clock: rec.PodClock | None = None
    drain: threading.Thread | None = None

    def where() -> dict[str, str]:
        return {p.metadata.name: p.spec.nodeName for p in client.list(Pod, namespace=ns, labels={label: None})
                if not p.metadata.deletionTimestamp}

    def warm() -> bool:  # every pod's spare warm and waiting, each seen through its own node's containerd
        started, at = rec.attempt_pids(rec.read_lines(d)), where()
        for pod in replicas:
            attempt = started.get(pod.removeprefix(f"{NAME}-"))
            _, trainer, spare = rec.in_pod(client, ns, pod, sock(at[pod]), uid, attempt)
            if trainer is None or spare is None or not rec.pids.spare_waiting(spare):
                return False
        return True

    def kill(lines: list[rec.Line]) -> float:
        nonlocal clock, drain
        clock = rec.PodClock(client, ns, label)
        time.sleep(0.3)  # its first poll has the pods as they were
        if fault == "node-lost":
            t = time.time()
            kill_node(STATE, 1)
            return t
        if not spares:
            drain = threading.Thread(target=subprocess.run, daemon=True, kwargs={
                "args": [kubectl, "--kubeconfig", kubeconfig, "drain", NODES[1], "--ignore-daemonsets",
                         "--delete-emptydir-data", "--timeout", "180s"], "capture_output": True, "timeout": 240})
            t = time.time()
            drain.start()
            return t
        victim = min(p for p, n in where().items() if n == NODES[1] and "worker" in p)
        s = sock(NODES[1])
        attempt = rec.attempt_pids(lines).get(victim.removeprefix(f"{NAME}-"))
        cid, pid, _ = rec.in_pod(client, ns, victim, s, uid, attempt)
        assert pid is not None, f"no training process in {victim}"
        since = rec.pids.started(pid)

        def still(p: int) -> bool:  # the same process, still in that container, still this job's
            return (rec.pids.started(p) == since and p in rec.container_pids(s, cid)
                    and rec.pids.environ_has(p, f"TORCHJOB_JOB_UID={uid}"))

        t = time.time()
        assert rec.pids.send(pid, signal.SIGKILL, still), f"the training process of {victim} could not be killed"
        return t

    before = {}
    try:
        rec.wait("the pods on both nodes", lambda: len(set(where().values())) == 2, 300, every=0.5)
        before = where()
        timeout = KUBEFLOW_LOST_S if (runtime, fault) == ("kubeflow", "node-lost") else 600
        recovery, stages, k, t_fault = rec.measure(d, kill, timeout=timeout, ready=warm if spares else None)
        lost = steps_lost(d, t_fault)
        after = where()
        (d / "stop").write_text("")  # measured: the job ends
        assert clock is not None
        stages.update(clock.stages(t_fault))
        in_place = sum(int(s.get("restarts", 0)) for s in clock.seen.values())
        note = (f"k={k}, steps lost {lost}, {clock.made_again(t_fault)} pods made again"
                + (f", {in_place} containers restarted in place" if in_place else "")
                + f"; pods on {sorted(before.values())} then {sorted(after.values())}")
        return rec.Trial(name_of(runtime, fault), "ddp", recovery, stages, note)
    except TimeoutError as e:
        stuck = sorted(p.metadata.name for p in client.list(Pod, namespace=ns, labels={label: None})
                       if p.metadata.deletionTimestamp)
        return rec.Trial(name_of(runtime, fault), "ddp", float("nan"), {},
                         f"no recovery: {e}; pods {before} -> {where()}, terminating {stuck}")
    finally:
        if fault == "node-lost":
            node_back(client)
        if drain is not None:
            drain.join(timeout=240)
            subprocess.run([kubectl, "--kubeconfig", kubeconfig, "uncordon", NODES[1]], capture_output=True, timeout=60)
        client.delete(Namespace, ns)
        shutil.rmtree(d, ignore_errors=True)


def node_back(client: Any) -> None:
    """real-node-1 started again after a node-lost fault (its containerd, then its kubelet), and Ready."""
    from lightkube.resources.core_v1 import Node

    start_daemon(STATE, "containerd-1")
    start_daemon(STATE, "kubelet-1")

    def ready() -> bool:
        n = client.get(Node, NODES[1])
        return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))

    rec.wait(f"{NODES[1]} Ready again", ready, 180, every=1)


def name_of(runtime: str, fault: str) -> str:
    return f"{OURS if runtime == 'torchjob' else KUBEFLOW} {fault}"


def main(repeat: int, logs: Path, src: Path, kubeflow: bool = True, faults: tuple[str, ...] = FAULTS,
         kubeflow_faults: tuple[str, ...] = FAULTS[1:]) -> tuple[list[rec.Trial], list[Any]]:
    """One run of each fault per repeat (`faults` for torchjob, `kubeflow_faults` for Kubeflow's
    operator: it has no spares), on the two-node cluster (started if none is up); the trials and the
    pairs whose ratio bench/recovery.py's report prints."""
    for f in (*faults, *kubeflow_faults):
        if f not in FAULTS or (f == "spare-kill" and f in kubeflow_faults):
            raise SystemExit(f"unknown fault {f!r}: torchjob's are {', '.join(FAULTS)}, "
                             "Kubeflow's the same but spare-kill")
    up = devcluster("up", "--real-nodes", "2")
    if up.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh up --real-nodes 2 failed:\n{up.stderr[-3000:]}")
    kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    started = "already up" not in up.stderr
    kubectl = str(Path(devcluster("bin").stdout.strip()) / "kubectl")
    # bench/recovery.py's Node on this cluster: its images in both nodes, the operator on the host, which
    # the pods of either node reach at node 0's bridge address
    rec.CLUSTER_DIR, rec.SUBNET = str(STATE), SUBNETS.split()[0]
    os.environ["DEVCLUSTER_POD_SUBNETS"] = SUBNETS
    node = rec.Node(kubeconfig, logs, src, kubeflow=kubeflow)
    runs = [("torchjob", f) for f in faults] + ([("kubeflow", f) for f in kubeflow_faults] if node.kubeflow else [])
    if kubeflow and not node.kubeflow:
        print(f"no Kubeflow training-operator at {rec.KUBEFLOW_BIN}: bash hack/kubeflow/build.sh builds it")
    trials: list[rec.Trial] = []
    try:
        for i in range(repeat):
            for runtime, fault in (runs if i % 2 == 0 else runs[::-1]):
                t = run_fault(runtime, fault, node.client, kubectl, kubeconfig)
                print(f"two nodes, {t.runtime}: {t.recovery:.2f}s {t.note} {t.stages}", flush=True)
                trials.append(t)
    finally:
        node.close()
        if started:
            devcluster("down", timeout=300)
        print(f"operators' logs: {logs}")
    peers = [(name_of("torchjob", f), name_of("kubeflow", f), {}) for f in faults
             if f in kubeflow_faults] if node.kubeflow else []
    return trials, peers
