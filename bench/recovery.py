"""How long a DDP job takes to train again after one of its ranks is SIGKILLed.

A job of 4 ranks (1 master + 3 workers: bench/programs/steps.py, a gloo all-reduce per step,
resuming from rank 0's checkpoint) trains; once every rank is past step K, one worker's training
process (locally) or container (on the node) is SIGKILLed. Recovery is the time from the kill to
every rank of the job's world logging a step past k + 1 again, k being the last step any rank had
logged at the kill (the rank logs carry their own wall-clock times: one machine, one clock). The
same trial is run, alternating, on each runtime in one sitting:

  locally   torchjob (`torchjob run`, restartPolicy OnFailure, the default restartScope Job: the
            gang restarts at once, counted once), torchjob with warm spares (the same job with
            `runPolicy.warmSpares: true`: each replica's next attempt is a process started ahead, torch
            imported; the kill waits until every replica's spare is warm, an elastic job's workers' spares
            in its agents too, as they are in a job that has trained a while) and torchrun (`--standalone
            --nproc-per-node 4 --max-restarts 3`, the same script, the same machine);
  --node    torchjob's operator (a process on the host) and the Kubeflow training-operator v1.8.1
            (hack/kubeflow/build.sh), each given the same job as real pods on the dev cluster's real
            node (`scripts/dev-cluster.sh up --real-node`): a TorchJob, and the PyTorchJob a
            Kubeflow user writes (restartPolicy OnFailure); and torchjob's restart in place (the
            TorchJob with `runPolicy.warmSpares: true`: each pod's entry point runs the rank as its
            child and its warm spare becomes the next attempt in the same pod; the kill, aimed at the
            worker's training process inside its container as a crash or the OOM killer would be,
            waits until every pod's spare has imported torch and waits).

Each kind is also run elastic (--elastic): 4 torchrun agents (torchjob: Worker x4, elasticPolicy
min 2 max 4, c10d; torchrun: the same as one torchrun of 4 processes), one worker process killed (its
agent restarts it). Locally torchjob also runs torchrun's own shape and fault ("elastic-1x4": Worker x1,
nprocPerNode 4, one process killed), and the 4-agent job losing a whole agent ("elastic-agent": worker-1's
agent and its processes killed, as its container would be; torchjob restarts the replica; torchrun of one
agent has no such fault to compare: its ratio is torchjob-spares against torchjob).

What the time goes to is printed from the new attempt's own lines (the last rank's process started,
torch imported, rendezvous done, past k + 1) and, on the node, from the pods as polled every 100 ms
(the killed container seen dead, the old pods gone, the new ones made and running).

Usage: python bench/recovery.py [--repeat 3] [--local] [--node] [--elastic] [--only KINDS] [--kubeconfig PATH]
       [--no-spares]
       python bench/recovery.py --nodes 2 [--repeat 1] [--no-kubeflow] [--faults F,...] [--kubeflow-faults F,...]
       a job across two real nodes: a rank killed on the second node with warm spares (spare-kill), the
       second node drained with the ranks saving on notice (drain) and without (drain-no-notice), and
       lost for good (node-lost); the same faults but spare-kill under Kubeflow's training-operator
       (bench/recovery_nodes.py)
With --node and no --kubeconfig it starts a real-node cluster (root) in /tmp/torchjob-bench-recovery
(TORCHJOB_E2E_DEVCLUSTER_DIR to change) on 10.252.0.0/24 (DEVCLUSTER_POD_SUBNET to change) and stops
it at the end. On the node every job trains until the trial has measured (steps.py --stop-file).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from torchjob.local.start.ports import free_port
from torchjob.local.supervisor import pids

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "bench" / "programs" / "steps.py"
PYTHON = sys.executable
STEP_TIME = 0.1
KILL_AT = 15  # every rank past this step: the kill
STEPS = KILL_AT + 20  # the job ends soon after it recovers
LINE = re.compile(r"^@(?P<t>[\d.]+) rank (?P<rank>\d+) (?P<what>\w+)(?: (?P<rest>.*))?$")


# --------------------------------------------------------------------------------- the rank logs


@dataclass
class Line:
    t: float
    rank: int
    what: str
    rest: str


def read_lines(d: Path) -> list[Line]:
    lines = []
    for f in sorted(d.glob("rank-*.log")):
        for raw in f.read_text(errors="replace").splitlines():
            m = LINE.match(raw.strip())
            if m:
                lines.append(Line(float(m["t"]), int(m["rank"]), m["what"], m["rest"] or ""))
    return sorted(lines, key=lambda x: x.t)


def last_steps(lines: list[Line]) -> dict[int, int]:
    steps: dict[int, int] = {}
    for ln in lines:
        if ln.what == "step":
            steps[ln.rank] = int(ln.rest)
    return steps


def wait(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.02) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Trial:
    runtime: str
    kind: str  # ddp | elastic | elastic-1x4
    recovery: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # stage -> seconds after the kill
    note: str = ""


def measure(d: Path, kill: Callable[[list[Line]], float], timeout: float = 300,
            ready: Callable[[], bool] | None = None) -> tuple[float, dict[str, float], int, float]:
    """Wait for every rank past KILL_AT (and `ready`), kill (returns the kill's time), wait for every
    rank of the new world past k + 1; returns (recovery s, stages, k, the kill's time)."""
    world = 4
    wait(f"every rank past step {KILL_AT}",
         lambda: len([s for s in last_steps(read_lines(d)).values() if s > KILL_AT]) >= world, timeout)
    if ready is not None:
        wait("the warm spares", ready, timeout, every=0.2)
    t_kill = kill(read_lines(d))
    # what the ranks logged until the kill had landed (it is not instant: ctr, a process group)
    k = max(last_steps([ln for ln in read_lines(d) if ln.t <= time.time()]).values())
    target = k + 1

    def recovered() -> tuple[float, int] | None:
        after = [ln for ln in read_lines(d) if ln.t > t_kill]
        joined = [ln for ln in after if ln.what == "joined"]
        if not joined:
            return None
        w = int(joined[-1].rest)
        past: dict[int, float] = {}
        started: set[int] = set()  # a rank counts once a process started after the kill trains
        for ln in after:
            if ln.what == "start":
                started.add(ln.rank)
            if ln.what == "step" and ln.rank in started and int(ln.rest) > target and ln.rank not in past:
                past[ln.rank] = ln.t
        if all(r in past for r in range(w)):
            return max(past[r] for r in range(w)), w
        return None

    t_done, w = wait(f"every rank past step {target} again", recovered, timeout)
    after = [ln for ln in read_lines(d) if t_kill < ln.t <= t_done]
    stages: dict[str, float] = {}
    for what, label in (("start", "last process started"), ("imported", "torch imported"),
                        ("joined", "rendezvous done")):
        ts = [ln.t for ln in after if ln.what == what and ln.rank < w]
        if ts:
            stages[label] = max(ts) - t_kill
    stages[f"past step k+1 (world {w})"] = t_done - t_kill
    return t_done - t_kill, stages, k, t_kill


# --------------------------------------------------------------------------------- local


def local_args(d: Path) -> list[str]:
    """The program's arguments locally: it trains until the trial has measured (the stop file), so that a
    job whose spares are still warming is still training when they are warm."""
    return ["--steps", str(100 * STEPS), "--step-time", str(STEP_TIME), "--dir", str(d), "--stop-file", str(d / "stop")]


def local_job(name: str, d: Path, elastic: bool, agents: int = 4, spares: bool = False) -> dict[str, Any]:
    cmd = [PROGRAM.name, *local_args(d)]
    container: dict[str, Any] = {"name": "pytorch", "workingDir": str(PROGRAM.parent)}
    specs: dict[str, Any] = {}
    spec: dict[str, Any] = {"runPolicy": {"backoffLimit": 3}, "pytorchReplicaSpecs": specs}
    if spares:
        spec["runPolicy"]["warmSpares"] = True

    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    if elastic:  # 4 agents of a process each, or torchrun's own shape: one agent of 4 processes
        container["command"] = ["torchrun", *cmd]
        specs["Worker"] = replica(agents)
        spec["nprocPerNode"] = 4 // agents
        spec["elasticPolicy"] = {"minReplicas": min(2, agents), "maxReplicas": agents, "rdzvBackend": "c10d",
                                 "maxRestarts": 3, "rdzvConf": [{"key": "last_call_timeout", "value": "2"}]}
    else:
        container["command"] = ["python", *cmd]
        specs["Master"] = replica(1)
        specs["Worker"] = replica(3)
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name}, "spec": spec}


def store_host(agent: int) -> bool:
    """Whether this torchrun agent serves its elastic rendezvous's store (listens on PET_RDZV_ENDPOINT's
    port): losing it is losing the rendezvous itself, every agent's failure (torch's design), not an agent."""
    try:
        env = dict(item.split("=", 1) for item in Path(f"/proc/{agent}/environ").read_text().split("\0") if "=" in item)
        port = int(env["PET_RDZV_ENDPOINT"].rpartition(":")[2])
        sockets = {Path(f"/proc/{agent}/fd/{fd}").readlink().name for fd in os.listdir(f"/proc/{agent}/fd")}
    except (OSError, KeyError, ValueError):
        return False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port and f"socket:[{f[9]}]" in sockets:
                return True
    return False


def kill_local(trial: Path, victim: str, group: bool, rank: int | None = None,
               agent: bool = False) -> Callable[[list[Line]], float]:
    """Kill the latest process whose start line names replica `victim` (and `rank`, when given; its
    process group when `group`; with `agent`, the torchrun agent's group and every group of the agent's
    children too, the replica as a whole as a container's kill would: `victim`'s agent, or the next
    replica's where `victim`'s serves the rendezvous's store)."""
    def kill(lines: list[Line]) -> float:
        starts = [ln for ln in lines if ln.what == "start" and rank in (None, ln.rank)]
        if agent:  # the latest start of each replica; victim's first, then the others in their order
            latest = {ln.rest.rsplit(" ", 1)[1]: ln for ln in starts}
            order = sorted(latest, key=lambda r: (r != victim, r))
            bosses = [(r, pids.parent(int(latest[r].rest.split()[1]))) for r in order]
            chosen = next(((r, b) for r, b in bosses if b is not None and not store_host(b)), None)
            assert chosen is not None, "no agent to lose but the rendezvous's store host"
            starts, boss = [latest[chosen[0]]], chosen[1]
        else:
            starts = [ln for ln in starts if ln.rest.endswith(f"replica {victim}")]
        fields = starts[-1].rest.split()
        pid, pgid = int(fields[1]), int(fields[3])
        groups = {pgid}
        if agent:
            groups = {g for p in pids.all_pids() if p == boss or pids.parent(p) == boss
                      if (g := pids.process_group(p)) is not None}
        t = time.time()
        # Checked through its pidfd as this trial's (the trial's directory is in its command line); a
        # group's members each so.
        members = [p for p in pids.all_pids() if pids.process_group(p) in groups] if group else [pid]
        for p in members:
            pids.send(p, signal.SIGKILL, lambda q: any(str(trial) in a for a in pids.cmdline(q)))
        return t
    return kill


def spares_warm(home: Path, job: str, replicas: int) -> Callable[[], bool]:
    """Whether every replica's warm spare is ready (the supervisor's SpareReady events)."""
    from torchjob.local.store.store import Store

    def probe() -> bool:
        if not (home / "state.db").exists():
            return False
        store = Store(home)
        try:
            return len({e.message.split("'")[0] for e in store.events(job) if e.reason == "SpareReady"}) >= replicas
        finally:
            store.close()
    return probe


def worker_spares_waiting(trial: Path, n: int) -> bool:
    """Whether `n` of this trial's torchrun workers' warm spares (an agent's, local/spares/workers.py: the spare
    launcher running the script, not an agent) have imported torch and wait."""
    found = 0
    for p in pids.all_pids():
        argv = pids.cmdline(p)
        if any(a.endswith("torchjob_spare.py") for a in argv) and str(trial) in " ".join(argv) \
                and not any("loopback_torchrun" in a for a in argv) and pids.spare_waiting(p):
            found += 1
    return found >= n


def local_kind(elastic: bool, agents: int, lose_agent: bool) -> str:
    return ("elastic-agent" if lose_agent else "elastic" if agents == 4 else "elastic-1x4") if elastic else "ddp"


def run_local(runtime: str, elastic: bool, keep: Path, agents: int = 4, lose_agent: bool = False) -> Trial:
    """One local trial. `agents` 1 (torchjob, elastic): torchrun's own shape and fault, one agent of
    4 processes and one process killed, beside the 4-agent job that loses one worker process, or
    (`lose_agent`) a whole agent."""
    kind = local_kind(elastic, agents, lose_agent)
    d = Path(tempfile.mkdtemp(prefix=f"recovery-{runtime}-{kind}-", dir=keep))
    out = (d / "runtime.out").open("w")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    ready: Callable[[], bool] | None = None
    if runtime.startswith("torchjob"):
        job = d / "job.yaml"
        name = f"rec-{uuid.uuid4().hex[:6]}"
        spares = runtime == "torchjob-spares"
        job.write_text(yaml.safe_dump(local_job(name, d, elastic, agents, spares)))
        cmd = [PYTHON, "-m", "torchjob", "run", str(job), "-q"]
        env["TORCHJOB_HOME"] = str(d / "home")
        victim, group, rank = ("worker-1", True, None) if agents == 4 else ("worker-0", False, 2)
        if spares:
            replicas_warm = spares_warm(d / "home", name, 4 if agents == 4 else 1)
            # an elastic job's agents restart their workers from their own spares: those warm too, as in a
            # job that has trained a while (started SPARE_AFTER_S after the workers, they import torch beside them)
            ready = (lambda: replicas_warm() and worker_spares_waiting(d, 4)) if elastic else replicas_warm
        if lose_agent:
            victim, group, rank = "worker-1", True, None
    else:
        cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "--max-restarts", "3",
               str(PROGRAM), *local_args(d)]
        # without it torchrun's restart meets its shared rendezvous store (issue 22): fails or hangs
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        victim, group, rank = ("proc-2", False, None)
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=d, start_new_session=True)
    try:
        recovery, stages, k, _ = measure(d, kill_local(d, victim, group, rank, lose_agent), ready=ready)
        (d / "stop").write_text("")
        rc = proc.wait(timeout=120)
        note = f"k={k}, exit {rc}"
        if rc != 0:
            note += f" (FAILED: {(d / 'runtime.out').read_text()[-400:]!r})"
        return Trial(runtime, kind, recovery, stages, note)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --------------------------------------------------------------------------------- the node

SUBNET = os.environ.get("DEVCLUSTER_POD_SUBNET", "10.252.0.0/24")
CLUSTER_DIR = os.environ.get("TORCHJOB_E2E_DEVCLUSTER_DIR", "/tmp/torchjob-bench-recovery")
IMAGE = "localhost/torchjob-recovery:dev"
INIT_IMAGE = "localhost/torchjob-e2e:dev"
# Kubeflow v1.8.1 gives each worker an init container `alpine:3.10` that loops on `nslookup MASTER`
# (pkg/controller.v1/pytorch/initcontainer.go); nothing can be pulled here, so a stand-in of that
# name answers `nslookup` with getent, as alpine's busybox would.
ALPINE = "docker.io/library/alpine:3.10"
KUBEFLOW_BACKOFF = 20
HOST_DIR = Path("/tmp/torchjob-bench-recovery-data")
KUBEFLOW_VERSION = "v1.8.1"
CACHE = Path(os.environ.get("TORCHJOB_CACHE", Path.home() / ".cache" / "torchjob"))
KUBEFLOW_BIN = CACHE / "kubeflow" / KUBEFLOW_VERSION / "bin" / "training-operator.v1"
KUBEFLOW_CRD = CACHE / "kubeflow" / KUBEFLOW_VERSION / "kubeflow.org_pytorchjobs.yaml"
KUBEFLOW_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # v1.8.1 pkg/cert/cert.go
IN_PLACE = "torchjob-in-place"  # the TorchJob with warmSpares: its ranks restart in their pods


def devcluster(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": CLUSTER_DIR, "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNET": SUBNET}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def images() -> list[dict[str, Any]]:
    nslookup = '#!/bin/sh\nexec getent hosts "$1"\n'
    return [{"name": IMAGE, "rootfs": True, "python": True,
             # torchjob.report copied alone (a namespace package), as a user would: steps.py --save-on-notice
             "files": [{"path": "/opt/bench/steps.py", "source": str(PROGRAM)},
                       {"path": "/opt/bench/torchjob/report.py",
                        "source": str(REPO / "src" / "torchjob" / "report.py")}],
             "config": {"WorkingDir": "/opt/bench"}},
            {"name": ALPINE, "rootfs": True, "files": [{"path": "/usr/bin/nslookup", "text": nslookup, "mode": 0o755}]}]


def node_job(kind: str, name: str, ns: str, elastic: bool, sub: str, spares: bool = False) -> dict[str, Any]:
    """The TorchJob (`spares`: with warm spares, restarting in place), or the PyTorchJob a Kubeflow user
    writes: the same replicas and command. It trains until the trial has measured (the stop file), so
    that a job whose spares are still warming is still training when they are warm."""
    cmd = ["/opt/bench/steps.py", "--steps", str(100 * STEPS), "--step-time", str(STEP_TIME), "--dir", f"/data/{sub}",
           "--stop-file", f"/data/{sub}/stop"]

    def template() -> dict[str, Any]:
        c: dict[str, Any] = {"name": "pytorch", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                             "command": ["torchrun", *cmd] if elastic else ["python", *cmd],
                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
        return {"spec": {"containers": [c], "volumes": [{"name": "data", "hostPath": {"path": str(HOST_DIR)}}]}}

    specs: dict[str, Any] = {}
    spec: dict[str, Any] = {"runPolicy": {"backoffLimit": 3}, "pytorchReplicaSpecs": specs}
    if spares:
        spec["runPolicy"]["warmSpares"] = True
    if elastic:
        specs["Worker"] = {"replicas": 4, "restartPolicy": "OnFailure", "template": template()}
        spec["nprocPerNode"] = 1
        spec["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 3,
                                 "rdzvConf": [{"key": "last_call_timeout", "value": "2"}]}
    else:
        specs["Master"] = {"replicas": 1, "restartPolicy": "OnFailure", "template": template()}
        specs["Worker"] = {"replicas": 3, "restartPolicy": "OnFailure", "template": template()}
    if kind == "kubeflow":
        # Kubeflow counts every container restart of an OnFailure job against backoffLimit, and the
        # peers' gloo errors that follow a kill restart too: backoffLimit 3 fails the job at the
        # first kill (seen here), so its job gets room for them.
        spec["runPolicy"]["backoffLimit"] = KUBEFLOW_BACKOFF
        if elastic:
            spec["elasticPolicy"]["nProcPerNode"] = 1
            del spec["nprocPerNode"]
            spec["elasticPolicy"]["rdzvConf"] = [{"key": "last_call_timeout", "value": "2"}]
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns},
                "spec": spec}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


class PodClock:
    """Polls a job's pods every 100 ms: when each pod uid was first seen, its training container
    first seen running, seen dead, and the pod seen gone."""

    def __init__(self, client: Any, ns: str, label: str) -> None:
        self.client, self.ns, self.label = client, ns, label
        self.seen: dict[str, dict[str, float]] = {}
        self.names: dict[str, str] = {}
        self.attempts: dict[str, str | None] = {}  # each pod's attempt annotation when first seen
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        from lightkube.resources.core_v1 import Pod

        while not self.stop.is_set():
            now = time.time()
            try:
                listed = list(self.client.list(Pod, namespace=self.ns, labels={self.label: None}))
            except Exception:
                time.sleep(0.1)
                continue
            alive = set()
            for p in listed:
                uid = p.metadata.uid
                alive.add(uid)
                self.names[uid] = p.metadata.name
                s = self.seen.setdefault(uid, {"made": now})
                notes = p.metadata.annotations or {}
                attempt = notes.get("torchjob.dev/attempt")
                self.attempts.setdefault(uid, attempt)
                if attempt != self.attempts[uid] and "next attempt" not in s:  # raised in place
                    s["next attempt"] = now
                if "torchjob.dev/in-place-exit" in notes and "exit reported" not in s:
                    s["exit reported"] = now
                if p.metadata.deletionTimestamp and "deleting" not in s:
                    s["deleting"] = now
                if p.spec and p.spec.nodeName and "bound" not in s:
                    s["bound"] = now
                for ic in (p.status.initContainerStatuses or []) if p.status else []:
                    if ic.state and ic.state.terminated and "init done" not in s:
                        s["init done"] = now
                for cs in (p.status.containerStatuses or []) if p.status else []:
                    if cs.name != "pytorch":
                        continue
                    if cs.state and cs.state.running and "running" not in s:
                        s["running"] = now
                    if cs.state and cs.state.terminated and "dead" not in s:
                        s["dead"] = now
                    if cs.restartCount and "restarted" not in s:
                        s["restarted"] = now
                    s["restarts"] = max(s.get("restarts", 0), cs.restartCount or 0)
            for uid, s in self.seen.items():
                if uid not in alive and "gone" not in s:
                    s["gone"] = now
            time.sleep(0.1)

    def stages(self, t_kill: float) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        old = {u: s for u, s in self.seen.items() if s["made"] <= t_kill}
        new = {u: s for u, s in self.seen.items() if s["made"] > t_kill}
        out: dict[str, float] = {}
        dead = [s["dead"] for s in old.values() if "dead" in s and s["dead"] > t_kill]
        if dead:
            out["killed container seen dead"] = min(dead) - t_kill
        deleting = [s["deleting"] for s in old.values() if "deleting" in s and s["deleting"] > t_kill]
        if deleting:
            out["old pods deleted (first)"] = min(deleting) - t_kill
        gone = [s["gone"] for s in old.values() if "gone" in s and s["gone"] > t_kill]
        if gone:
            out["old pods gone"] = max(gone) - t_kill
        if new:
            out["new pods made"] = max(s["made"] for s in new.values()) - t_kill
            out["new pods made (first)"] = min(s["made"] for s in new.values()) - t_kill
            bound = [s.get("bound", 0) for s in new.values()]
            if all(bound):
                out["new pods bound"] = max(bound) - t_kill
            init = [s["init done"] for s in new.values() if "init done" in s]
            if init:
                out["workers' wait-for-master done"] = max(init) - t_kill
            for u, s in new.items():
                if self.names.get(u, "").endswith("master-0") and "running" in s:
                    out["new master running"] = s["running"] - t_kill
            run = [s.get("running", 0) for s in new.values()]
            if all(run):
                out["new pods' containers running"] = max(run) - t_kill
        restarted = [s["restarted"] for s in old.values() if s.get("restarted", 0) > t_kill]
        if restarted:
            out["containers restarted in place"] = max(restarted) - t_kill
        reported = [s["exit reported"] for s in old.values() if s.get("exit reported", 0) > t_kill]
        if reported:
            out["attempt's end reported (in place, first)"] = min(reported) - t_kill
        nxt = [s["next attempt"] for s in old.values() if s.get("next attempt", 0) > t_kill]
        if nxt:
            out["next attempts noted in the pods"] = max(nxt) - t_kill
        return out

    def made_again(self, t_kill: float) -> int:
        return sum(1 for s in self.seen.values() if s["made"] > t_kill)


def container_pids(sock: str, cid: str) -> list[int]:
    """The host pids of every process in a container (its cgroup, as its containerd lists it)."""
    out = subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "tasks", "ps", cid], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]


def ns_pid(pid: int) -> int | None:
    """The process's pid in its innermost pid namespace (its container's)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[-1]) for line in f if line.startswith("NSpid:")), None)
    except OSError:
        return None


def attempt_pids(lines: list[Line]) -> dict[str, int]:
    """Each replica's latest attempt's pid in its container, as its start line says."""
    return {ln.rest.split()[-1]: int(ln.rest.split()[1]) for ln in lines if ln.what == "start"}


def in_pod(client: Any, ns: str, pod: str, sock: str, job_uid: str,
           attempt: int | None) -> tuple[str, int | None, int | None]:
    """A pod restarting in place: (its training container, the host pid of its attempt's training process,
    its spare's), each a process of that container running the bench's program with the job's uid in its
    environment; the entry point (the container's PID 1) is neither. The attempt's is the one whose pid in
    the container is `attempt` (its start line's; a spare that became the attempt still runs the spare
    launcher); the spare is another running the launcher."""
    from lightkube.resources.core_v1 import Pod

    p = client.get(Pod, pod, namespace=ns)
    cid = next((str(cs.containerID).removeprefix("containerd://") for cs in (p.status.containerStatuses or [])
                if cs.name == "pytorch" and cs.state and cs.state.running and cs.containerID), "")
    trainer = spare = None
    for pid in container_pids(sock, cid) if cid else []:
        args = pids.cmdline(pid)
        if ("/opt/bench/steps.py" not in args or any("torchjob_inplace.py" in a for a in args)
                or not pids.environ_has(pid, f"TORCHJOB_JOB_UID={job_uid}")):
            continue
        if ns_pid(pid) == attempt:
            trainer = pid
        elif any(a.endswith("torchjob_spare.py") for a in args):
            spare = pid
    return cid, trainer, spare


def run_node(runtime: str, elastic: bool, client: Any, kubeconfig: str, sock: str, spares: bool = False) -> Trial:
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod

    kind = "elastic" if elastic else "ddp"
    ns = f"rec-{uuid.uuid4().hex[:6]}"
    client.create(Namespace(metadata=ObjectMeta(name=ns)))
    sub = ns
    d = HOST_DIR / sub
    d.mkdir(parents=True, exist_ok=True)
    name = "rec"
    if runtime == "torchjob":
        res = create_namespaced_resource("torchjob.dev", "v1", "TorchJob", "torchjobs")
        label = "torchjob.dev/job-name"
    else:
        res = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
        label = "training.kubeflow.org/job-name"
    created = client.create(res.from_dict(node_job(runtime, name, ns, elastic, sub, spares)))
    job_uid = str(created.metadata.uid)
    clock: PodClock | None = None
    replicas = [f"{name}-master-0", *(f"{name}-worker-{i}" for i in range(3))]

    def warm() -> bool:
        """Every pod's spare is warm and waiting (as in a job that has trained a while)."""
        started = attempt_pids(read_lines(d))
        for pod in replicas:
            _, trainer, spare = in_pod(client, ns, pod, sock, job_uid, started.get(pod.removeprefix(f"{name}-")))
            if trainer is None or spare is None or not pids.spare_waiting(spare):
                return False
        return True

    def kill(lines: list[Line]) -> float:
        nonlocal clock
        clock = PodClock(client, ns, label)
        time.sleep(0.3)  # its first poll has the pods as they were
        if spares:  # the worker's training process, a child of the pod's entry point: not the container
            victim = f"{name}-worker-1"
            cid, pid, _ = in_pod(client, ns, victim, sock, job_uid, attempt_pids(lines).get("worker-1"))
            assert pid is not None, f"no training process in {victim}"
            since = pids.started(pid)

            def still(p: int) -> bool:  # the same process, still in that container, still this job's
                return (pids.started(p) == since and p in container_pids(sock, cid)
                        and pids.environ_has(p, f"TORCHJOB_JOB_UID={job_uid}"))

            t = time.time()
            assert pids.send(pid, signal.SIGKILL, still), f"the training process of {victim} could not be killed"
            return t
        pod = client.get(Pod, f"{name}-worker-1", namespace=ns)
        cid = next(str(cs.containerID).removeprefix("containerd://") for cs in pod.status.containerStatuses
                   if cs.name == "pytorch" and cs.state and cs.state.running)
        t = time.time()
        subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid],
                       check=True, capture_output=True, timeout=30)
        return t

    try:
        recovery, stages, k, t_kill = measure(d, kill, timeout=600, ready=warm if spares else None)
        (d / "stop").write_text("")  # measured: the job ends
        assert clock is not None
        stages.update(clock.stages(t_kill))

        def ended() -> str:
            st = client.get(res, name, namespace=ns).status or {}
            for c in st.get("conditions") or []:
                if c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True":
                    return str(c["type"])
            return ""

        end = wait("the job's end", ended, 240, every=0.5)
        st = client.get(res, name, namespace=ns).status or {}
        restarts = st.get("restartCount")
        note = f"k={k}, {end}" + (f", restartCount {restarts}" if restarts is not None else "")
        in_place = sum(int(s.get("restarts", 0)) for s in clock.seen.values())
        if in_place:
            note += f", {in_place} container restarts in place"
        note += f", {clock.made_again(t_kill)} pods made again"
        return Trial(runtime, kind, recovery, stages, note)
    except TimeoutError as e:
        seen = [(p.metadata.name, p.status.phase if p.status else None,
                 [(c.name, c.restartCount) for c in (p.status.containerStatuses or [])] if p.status else None)
                for p in client.list(Pod, namespace=ns)]
        tail = "\n".join(f"{ln.t:.3f} rank {ln.rank} {ln.what} {ln.rest}" for ln in read_lines(d)[-12:])
        note = f"no recovery: {e}; pods {seen}; last lines:\n{tail}"
        return Trial(runtime, kind, float("nan"), {}, note)
    finally:
        client.delete(Namespace, ns)
        shutil.rmtree(d, ignore_errors=True)



class Node:
    """The real-node cluster with both operators running as processes on the host: torchjob's
    (TorchJobs) and Kubeflow's (PyTorchJobs, its own CRD); each sees only its own kind."""

    def __init__(self, kubeconfig: str | None, logs: Path, src: Path, kubeflow: bool) -> None:
        from lightkube import Client, KubeConfig

        self.started = kubeconfig is None
        if kubeconfig is None:
            up = devcluster("up", "--real-node")
            if up.returncode != 0:
                raise RuntimeError(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-3000:]}")
            kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
        self.kubeconfig = kubeconfig
        self.sock = str(Path(CLUSTER_DIR) / "realnode" / "containerd" / "containerd.sock")
        spec = logs / "images.json"
        spec.write_text(json.dumps(images()))
        built = devcluster("image", str(spec), timeout=900)
        if built.returncode != 0:
            raise RuntimeError(f"dev-cluster.sh image failed:\n{built.stderr[-3000:]}")
        self.client = Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-bench")
        HOST_DIR.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.procs: list[subprocess.Popen[bytes]] = []
        run = subprocess.run([PYTHON, "-m", "torchjob", "install", "--crd-only", "--kubeconfig", kubeconfig],
                             capture_output=True, text=True, env=env, timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"torchjob install --crd-only failed: {run.stderr[-2000:]}")
        host = SUBNET.rsplit(".", 1)[0] + ".1"
        port = free_port()
        self.procs.append(subprocess.Popen(
            [PYTHON, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig, "--no-leader-elect",
             "--init-image", INIT_IMAGE, "--metrics-port", str(free_port()), "--health-port", "0", "--workers", "4",
             # PyTorchJobs are Kubeflow's operator's here, whoever applied their CRD last (auto would serve
             # them where torchjob's CRD had been applied, and two operators would make the same pods)
             "--kubeflow-api", "off",
             "--progress-port", str(port), "--progress-url", f"https://{host}:{port}"],
            stdout=(logs / "torchjob-operator.log").open("ab"), stderr=subprocess.STDOUT, env=env))
        self.kubeflow = kubeflow and KUBEFLOW_BIN.exists()
        if self.kubeflow:
            self.start_kubeflow(logs)

    def start_kubeflow(self, logs: Path) -> None:
        from lightkube import codecs
        from lightkube.core.exceptions import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace, Secret

        self.client.apply(codecs.from_dict(yaml.safe_load(KUBEFLOW_CRD.read_text())), force=True)
        for obj in (Namespace(metadata=ObjectMeta(name="kubeflow")),
                    Secret(metadata=ObjectMeta(name="training-operator-webhook-cert", namespace="kubeflow"))):
            try:
                self.client.create(obj)
            except ApiError as e:
                if e.status.code != 409:
                    raise
        self.procs.append(subprocess.Popen(
            [str(KUBEFLOW_BIN), "--kubeconfig", self.kubeconfig, "--enable-scheme=pytorchjob",
             f"--metrics-bind-address=127.0.0.1:{free_port()}", f"--health-probe-bind-address=127.0.0.1:{free_port()}",
             f"--webhook-server-port={free_port()}", f"--pytorch-init-container-image={ALPINE}"],
            stdout=(logs / "kubeflow-operator.log").open("ab"), stderr=subprocess.STDOUT,
            env={**os.environ, "MY_POD_NAMESPACE": "kubeflow", "TMPDIR": "/tmp"}))

        # Its cert rotator fills the Secret; a kubelet would mount it where v1.8.1 waits for files.
        def filled() -> dict[str, str] | None:
            data = self.client.get(Secret, "training-operator-webhook-cert", namespace="kubeflow").data or {}
            return data if data.get("tls.crt") and data.get("tls.key") else None

        data = wait("the training-operator's webhook cert", filled, 120, every=0.5)
        KUBEFLOW_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (KUBEFLOW_CERT_DIR / key).write_bytes(base64.b64decode(value))
        time.sleep(5)  # its manager starts once the cert is there

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.started:
            devcluster("down", timeout=300)


# --------------------------------------------------------------------------------- report


def report(trials: list[Trial], peers: list[tuple[str, str, float | dict[str, float]]]) -> None:
    groups: dict[tuple[str, str], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.runtime, t.kind), []).append(t)
    print("\nRecovery: from the SIGKILL to every rank past step k+1 again (s), median of the trials")
    print(f"{'runtime':<22} {'job':<11} {'median':>7} {'min':>6} {'max':>6}  trials")
    for (rt, kind), ts in groups.items():
        r = [t.recovery for t in ts]
        print(f"{rt:<22} {kind:<11} {statistics.median(r):7.2f} {min(r):6.2f} {max(r):6.2f}  "
              + "; ".join(f"{t.recovery:.2f} ({t.note})" for t in ts))
    print("\nRatios (median / median of the peer in the same run)")
    for ours, peer, goal in peers:
        for kind in ("ddp", "elastic", "elastic-1x4", "elastic-agent"):
            if isinstance(goal, dict) and kind not in goal:
                continue
            a, b = groups.get((ours, kind)), groups.get((peer, kind.removesuffix("-1x4")))
            if a and b:
                ra = statistics.median(t.recovery for t in a)
                rb = statistics.median(t.recovery for t in b)
                want = goal if isinstance(goal, float) else goal.get(kind)
                print(f"  {ours} / {peer} ({kind}): {ra / rb:.2f}x" + (f" (goal <= {want:g}x)" if want else ""))
    print("\nWhere the time goes (seconds after the kill, median over trials)")
    for (rt, kind), ts in groups.items():
        labels: list[str] = []
        for t in ts:
            labels += [k for k in t.stages if k not in labels]
        parts = []
        for label in sorted(labels, key=lambda k: statistics.median(t.stages[k] for t in ts if k in t.stages)):
            parts.append(f"{label} {statistics.median(t.stages[label] for t in ts if label in t.stages):.2f}")
        print(f"  {rt} {kind}: " + ", ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--local", action="store_true", help="torchjob vs torchrun on this machine")
    parser.add_argument("--node", action="store_true", help="torchjob vs Kubeflow on the real node (root)")
    parser.add_argument("--elastic", action="store_true", help="also the elastic job")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                        help="2: the job across two real nodes, one fault a run (bench/recovery_nodes.py)")
    parser.add_argument("--kubeconfig", help="a real-node cluster already up (its containerd under "
                                             "TORCHJOB_E2E_DEVCLUSTER_DIR)")
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()), help="where the trials' logs go")
    parser.add_argument("--no-kubeflow", action="store_true", help="on the node, torchjob alone")
    parser.add_argument("--faults", default="spare-kill,drain,drain-no-notice,node-lost",
                        help="--nodes 2: torchjob's faults, comma-separated")
    parser.add_argument("--kubeflow-faults", default="drain,drain-no-notice,node-lost",
                        help="--nodes 2: Kubeflow's faults, comma-separated (no spare-kill: it has no spares)")
    parser.add_argument("--no-spares", action="store_true",
                        help="not torchjob with warm spares (locally; on the node, its restart in place)")
    parser.add_argument("--only", default="", help="locally, only these jobs, comma-separated (ddp, elastic, "
                                                   "elastic-1x4, elastic-agent; --elastic for the elastic ones)")
    parser.add_argument("--src", type=Path, default=REPO / "src",
                        help="the torchjob source tree whose operator runs (another tree's: before/after)")
    args = parser.parse_args()
    if args.nodes == 2:
        import recovery_nodes

        report(*recovery_nodes.main(args.repeat, Path(tempfile.mkdtemp(prefix="recovery-nodes-", dir=args.keep)),
                                    args.src, not args.no_kubeflow, tuple(filter(None, args.faults.split(","))),
                                    tuple(filter(None, args.kubeflow_faults.split(",")))))
        return
    if not (args.local or args.node):
        args.local = True
    kinds = [False, True] if args.elastic else [False]
    only = set(filter(None, args.only.split(",")))
    trials: list[Trial] = []
    peers: list[tuple[str, str, float | dict[str, float]]] = []
    if args.local:
        peers.append(("torchjob", "torchrun", {"ddp": 1.2, "elastic": 1.0, "elastic-1x4": 1.2}))
        if not args.no_spares:
            peers.append(("torchjob-spares", "torchrun", {"ddp": 0.5, "elastic": 0.5}))
            peers.append(("torchjob-spares", "torchjob", {"elastic-agent": 0.5}))
        for i in range(args.repeat):
            for elastic in kinds:
                runs = [("torchjob", 4, False), ("torchrun", 4, False)] \
                    + ([] if args.no_spares else [("torchjob-spares", 4, False)]) \
                    + ([("torchjob", 1, False), ("torchjob", 4, True)] if elastic else []) \
                    + ([("torchjob-spares", 4, True)] if elastic and not args.no_spares else [])
                for rt, agents, lose in (runs if i % 2 == 0 else runs[::-1]):
                    if only and local_kind(elastic, agents, lose) not in only:
                        continue
                    t = run_local(rt, elastic, args.keep, agents, lose)
                    print(f"local {rt} {t.kind}: {t.recovery:.2f}s {t.note} {t.stages}", flush=True)
                    trials.append(t)
    if args.node:
        logs = Path(tempfile.mkdtemp(prefix="recovery-node-", dir=args.keep))
        node = Node(args.kubeconfig, logs, args.src, not args.no_kubeflow)
        try:
            rts = ["torchjob-operator", "kubeflow-v1.8.1"] if node.kubeflow else ["torchjob-operator"]
            if not args.no_spares:  # the restart in place: a python command's (not torchrun's, not elastic)
                rts.append(IN_PLACE)
                peers.append((IN_PLACE, "torchjob-operator", {}))
            if args.no_kubeflow:
                pass
            elif node.kubeflow:
                peers.append(("torchjob-operator", "kubeflow-v1.8.1", 0.5))
                if not args.no_spares:
                    peers.append((IN_PLACE, "kubeflow-v1.8.1", {}))
            else:
                print(f"no Kubeflow training-operator at {KUBEFLOW_BIN}: bash hack/kubeflow/build.sh builds it")
            for i in range(args.repeat):
                for elastic in kinds:
                    for rt in (rts if i % 2 == 0 else rts[::-1]):
                        if elastic and rt == IN_PLACE:
                            continue
                        t = run_node("torchjob" if rt.startswith("torchjob") else "kubeflow", elastic, node.client,
                                     node.kubeconfig, node.sock, spares=rt == IN_PLACE)
                        t.runtime = rt
                        print(f"node {rt} {t.kind}: {t.recovery:.2f}s {t.note} {t.stages}", flush=True)
                        trials.append(t)
        finally:
            node.close()
            print(f"operators' logs: {logs}")
    report(trials, peers)


if __name__ == "__main__":
    main()
