"""A seeded chaos run on the dev cluster's real node: a mix of jobs trains as real pods while a
fault injector breaks things, and invariants are checked throughout and at the end.

The operator runs as installed (--operator chart, the default): charts/torchjob by real Helm, its
image built on the node, two replicas as pods (one leads, one waits on the Lease); or as two
`--leader-elect` processes on the host (--operator processes). Jobs, each resubmitted when it ends
until --duration is over: a DDP job (1 master + 1 worker, OnFailure), an elastic job (2 torchrun
agents, min 1), a job whose worker's script exits 3 (restartPolicy Never: it must fail), a job
suspended 10 s after it starts and resumed 10 s later, a Kubeflow PyTorchJob (kubeflow.org/v1,
served by the same operator), and a victim that the injector deletes while it restarts.

The injector draws its schedule from --seed (printed; the same seed replays the same faults at the
same offsets, each on the candidate of the same index when it fires): SIGKILL a training container
(`ctr tasks kill`), delete a pod, SIGKILL the operator's leader (its container, which the kubelet
starts again; a process is started again 2 s later), SIGSTOP a
container and SIGCONT it 8 s later (a hang), delete a job while it restarts, restart the
kube-apiserver (`dev-cluster.sh restart-apiserver`), SIGKILL the kubelet or containerd and start it
again.

Watched every 0.5 s, from the node (containerd's running tasks, by pod uid) and the API server:
  - replicas that ever had two live pods at once (two pod uids of one replica name with a running
    container on the node at one moment): must be 0;
  - the longest time a job's status said Running while none of its containers ran on the node.
At the end: jobs that ended as their script and policy imply / all; pods or Services left after
their job went (must be 0); jobs whose restartCount went past backoffLimit (must be 0). It exits 1
when an invariant is broken.

Usage: python bench/chaos.py [--duration 600] [--seed N] [--operator chart|processes] [--kubeconfig PATH]
                            [--state DIR]
Without --kubeconfig it brings a real-node cluster up (root) in --state (default
/tmp/torchjob-bench-chaos) on DEVCLUSTER_POD_SUBNET (default 10.249.0.0/24) and takes it down after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the stand-in image of the real-node tests (tests/e2e/images.py)
from bench.chaos_operators import ChartOperators, ProcessOperators  # noqa: E402

INIT_IMAGE = "localhost/torchjob-e2e:dev"
LIVE_BOUND = 0.5  # the watchers' period (s)

FAULTS = ("sigkill", "delete_pod", "kill_leader", "sigstop", "delete_restarting", "restart_apiserver",
          "restart_kubelet", "restart_containerd")
KINDS = ("ddp", "elastic", "failing", "suspend", "kubeflow", "victim")
TERMINAL = ("Succeeded", "Failed")


def dict_of(obj: Any) -> Any:
    """A generic resource, typed loosely (its status is a plain dict)."""
    return obj


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------- the schedule


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start
    kind: str
    pick: int  # which candidate (sorted by name) it hits when it fires


def schedule(seed: int, duration: float, every: tuple[float, float] = (6.0, 12.0),
             kinds: tuple[str, ...] = FAULTS) -> list[Fault]:
    """The faults of a run: a pure function of the seed. The first comes after 20 s (the jobs'
    pods are up), the last 20 s before the end; each kind at least once when the run is long
    enough (the first len(kinds) are a shuffle of them)."""
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    out: list[Fault] = []
    t = 20.0
    while t < duration - 20:
        kind = order.pop(0) if order else rng.choice(kinds)
        out.append(Fault(round(t, 2), kind, rng.randrange(1000)))
        t += rng.uniform(*every)
    return out


# --------------------------------------------------------------------------------- the jobs


def job_doc(kind: str, name: str, ns: str, image: str, sleep: float) -> dict[str, Any]:
    def rep(n: int, policy: str, command: list[str]) -> dict[str, Any]:
        c = {"name": "pytorch", "image": image, "imagePullPolicy": "IfNotPresent", "command": command}
        return {"replicas": n, "restartPolicy": policy, "template": {"spec": {"containers": [c]}}}

    ddp = ["python", "/opt/tests/ddp_step.py", "--sleep", str(sleep)]
    run: dict[str, Any] = {"backoffLimit": 6}
    specs: dict[str, Any]
    spec: dict[str, Any] = {"runPolicy": run}
    if kind == "elastic":
        specs = {"Worker": rep(2, "OnFailure", ["torchrun", "/opt/tests/elastic.py", str(int(sleep * 4)), "0.25"])}
        spec.update(nprocPerNode="1", elasticPolicy={"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d",
                                                   "maxRestarts": 6})
    elif kind == "failing":
        specs = {"Master": rep(1, "Never", ddp),
                 "Worker": rep(1, "Never", ["python", "/opt/tests/ddp_step.py", "--fail-replica", "worker-0",
                                            "--fail-code", "3"])}
    else:
        specs = {"Master": rep(1, "OnFailure", ddp), "Worker": rep(1, "OnFailure", ddp)}
    spec["pytorchReplicaSpecs"] = specs
    if kind == "kubeflow":
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns},
                "spec": spec}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


@dataclass
class Job:
    kind: str
    name: str
    submitted: float
    backoff: int = 6
    suspended_at: float = 0.0
    resumed_at: float = 0.0
    end: str = ""  # Succeeded | Failed | Deleted
    reason: str = ""
    restarts: int = 0
    deleted_at: float = 0.0  # when the injector (or the end) deleted it

    def expected(self) -> bool:
        """Did it end as its script and its policy imply?"""
        if self.kind == "victim" and self.deleted_at:  # deleted (while it restarts, or at the end)
            return self.end == "Deleted"
        if self.kind == "failing":  # worker-0 exits 3 under Never: the job fails
            return self.end == "Failed"
        # A restartable script (a victim no fault reached is a DDP job): it succeeds, unless the
        # faults used up backoffLimit (then it fails
        # saying so): the policy implies that too.
        return self.end == "Succeeded" or (self.end == "Failed" and self.restarts >= self.backoff
                                           and "ackoff" in self.reason)


# --------------------------------------------------------------------------------- the run


@dataclass
class Findings:
    doubles: dict[str, list[str]] = field(default_factory=dict)  # replica -> pod uids seen live together
    wrong: dict[str, float] = field(default_factory=dict)  # job -> longest Running-with-nothing-running (s)
    leftovers: list[str] = field(default_factory=list)
    past_backoff: list[str] = field(default_factory=list)
    faults_done: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # jobs the API server refused (the bench's bug)
    operator_exits: list[str] = field(default_factory=list)  # exits the injector did not cause


class Chaos:
    def __init__(self, kubeconfig: str, state: Path, seed: int, duration: float, logs: Path,
                 faults: tuple[str, ...] = FAULTS, host: str = "127.0.0.1", operator: str = "chart",
                 subnet: str = "10.249.0.0/24") -> None:
        from lightkube import Client, KubeConfig

        self.kubeconfig, self.state, self.seed, self.duration, self.logs = kubeconfig, state, seed, duration, logs
        self.faults = faults
        self.host, self.operator, self.subnet = host, operator, subnet
        self.sock = str(state / "realnode" / "containerd" / "containerd.sock")
        self.client = Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-chaos")
        self.ns = f"chaos-{seed}-{uuid.uuid4().hex[:4]}"
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.found = Findings()
        self.stop = threading.Event()
        self.operators: ProcessOperators | ChartOperators | None = None
        self.t0 = 0.0
        self.serial = 0
        self.stop_submitting: set[str] = set()
        self.container_info: dict[str, dict[str, str]] = {}  # containerd id -> its CRI labels
        self.pod_job: dict[str, str] = {}  # pod uid -> job name (from the API)
        self.running_since: dict[str, float] = {}  # job -> when its status said Running with nothing running

    # ----------------------------------------------------------------- the operator (bench/chaos_operators.py)

    def make_operators(self) -> ProcessOperators | ChartOperators:
        if self.operator == "processes":
            return ProcessOperators(self.kubeconfig, self.logs, self.client, self.host, INIT_IMAGE, log)
        return ChartOperators(self.kubeconfig, self.logs, self.client, INIT_IMAGE, log,
                              lambda *args, timeout=900: devcluster(self.state, self.subnet, *args, timeout=timeout))

    # ----------------------------------------------------------------- node and API views

    def ctr(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", self.sock, "-n", "k8s.io", *args], capture_output=True,
                              text=True, timeout=timeout)

    def live_containers(self) -> list[dict[str, str]]:
        """The node's running containers of this run's namespace (not sandboxes), with their pod."""
        out = self.ctr("tasks", "ls").stdout
        live = []
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 3 or parts[-1] not in ("RUNNING", "PAUSED"):
                continue
            cid = parts[0]
            if cid not in self.container_info:
                info = self.ctr("containers", "info", cid)
                if info.returncode != 0:
                    continue
                labels = json.loads(info.stdout).get("Labels") or {}
                self.container_info[cid] = {
                    "pod": labels.get("io.kubernetes.pod.name", ""), "uid": labels.get("io.kubernetes.pod.uid", ""),
                    "ns": labels.get("io.kubernetes.pod.namespace", ""),
                    "container": labels.get("io.kubernetes.container.name", ""),
                    "sandbox": labels.get("io.cri-containerd.kind", "")}
            c = self.container_info[cid]
            if c["ns"] == self.ns and c["sandbox"] != "sandbox":
                live.append({**c, "id": cid})
        return live

    def watch(self) -> None:
        from lightkube.resources.core_v1 import Pod

        from torchjob.kube.machinery.client import PyTorchJobRes, TorchJobRes
        from torchjob.kube.objects.labels import LABEL_JOB

        while not self.stop.is_set():
            now = time.monotonic()
            try:
                live = self.live_containers()
                by_pod: dict[str, set[str]] = {}
                for c in live:
                    by_pod.setdefault(c["pod"], set()).add(c["uid"])
                for pod, uids in by_pod.items():
                    if len(uids) > 1:
                        with self.lock:
                            seen = self.found.doubles.setdefault(pod, [])
                            for u in uids - set(seen):
                                seen.append(u)
                        log(f"INVARIANT: replica {pod} has {len(uids)} live pods at once: {sorted(uids)}")
                for p in self.client.list(Pod, namespace=self.ns):
                    job = (p.metadata.labels or {}).get(LABEL_JOB) if p.metadata else None
                    if job and p.metadata and p.metadata.uid:
                        self.pod_job[p.metadata.uid] = job
                running_jobs = {self.pod_job.get(c["uid"], "") for c in live}
                for res in (TorchJobRes, PyTorchJobRes):
                    for j in self.client.list(res, namespace=self.ns):
                        j = dict_of(j)
                        name = str(j.metadata.name)
                        conds = {c["type"]: c for c in (j.status or {}).get("conditions", []) if c["status"] == "True"}
                        says_running = "Running" in conds and not set(TERMINAL) & conds.keys() \
                            and "Suspended" not in conds and not j.metadata.deletionTimestamp
                        if says_running and name not in running_jobs:
                            since = self.running_since.setdefault(name, now)
                            with self.lock:
                                self.found.wrong[name] = max(self.found.wrong.get(name, 0.0), now - since)
                        else:
                            self.running_since.pop(name, None)
            except Exception as e:  # the API server restarting, say: the next look sees
                log(f"watch: {type(e).__name__}: {str(e)[:120]}")
            self.stop.wait(LIVE_BOUND)

    # ----------------------------------------------------------------- jobs

    def submit(self, kind: str) -> None:
        from lightkube import codecs

        self.serial += 1
        name = f"{kind}-{self.serial}"
        sleep = 25.0 if kind != "suspend" else 30.0
        doc = job_doc(kind, name, self.ns, self.image, sleep)
        self.client.create(codecs.from_dict(doc))
        with self.lock:
            self.jobs[name] = Job(kind, name, time.monotonic(), backoff=doc["spec"]["runPolicy"]["backoffLimit"])

    def res(self, job: Job) -> Any:
        from torchjob.kube.machinery.client import PyTorchJobRes, TorchJobRes

        return PyTorchJobRes if job.kind == "kubeflow" else TorchJobRes

    def tend(self, submitting: bool) -> None:
        """Record the jobs that ended, suspend and resume, and keep one job of each kind going."""
        from lightkube.core.exceptions import ApiError
        from lightkube.types import PatchType

        for job in [j for j in self.jobs.values() if not j.end]:
            try:
                obj = self.client.get(self.res(job), job.name, namespace=self.ns)
            except ApiError as e:
                if e.status.code == 404:
                    job.end = "Deleted"
                continue
            status = obj.status or {}
            job.restarts = int(status.get("restartCount", 0) or 0)
            conds = {c["type"]: c for c in status.get("conditions", []) if c["status"] == "True"}
            for t in TERMINAL:
                if t in conds:
                    job.end, job.reason = t, f"{conds[t].get('reason', '')}: {conds[t].get('message', '')}"
                    log(f"{job.name} ended {t} ({job.reason[:100]}), restarts {job.restarts}")
            now = time.monotonic()
            if job.kind == "suspend" and not job.end:
                if not job.suspended_at and "Running" in conds:
                    self.patch_suspend(job, True, PatchType)
                    job.suspended_at = now
                elif job.suspended_at and not job.resumed_at and now - job.suspended_at > 10:
                    self.patch_suspend(job, False, PatchType)
                    job.resumed_at = now
        if submitting:
            for kind in KINDS:
                if kind not in self.stop_submitting and not any(j.kind == kind and not j.end
                                                                 for j in self.jobs.values()):
                    try:
                        self.submit(kind)
                    except ApiError as e:  # a job the API refuses is the bench's own bug: say so, fail
                        if e.status.code == 422 and not any(kind in x for x in self.found.refused):
                            self.found.refused.append(f"{kind}: {str(e)[:200]}")
                        if e.status.code == 422:
                            self.stop_submitting.add(kind)
                        log(f"submit {kind}: {str(e)[:160]}")

    def patch_suspend(self, job: Job, on: bool, patch_type: Any) -> None:
        self.client.patch(self.res(job), job.name, {"spec": {"runPolicy": {"suspend": on}}}, namespace=self.ns,
                          patch_type=patch_type.MERGE)
        log(f"{job.name} {'suspended' if on else 'resumed'}")

    # ----------------------------------------------------------------- faults

    def pick(self, items: list[Any], fault: Fault) -> Any:
        return items[fault.pick % len(items)] if items else None

    def inject(self, fault: Fault) -> str:
        from lightkube.resources.core_v1 import Pod

        live = sorted(self.live_containers(), key=lambda c: (c["pod"], c["container"]))
        training = [c for c in live if c["container"] == "pytorch"]
        if fault.kind == "sigkill":
            c = self.pick(training, fault)
            if not c:
                return "no training container"
            self.ctr("tasks", "kill", "-s", "SIGKILL", c["id"])
            return f"SIGKILL {c['pod']}"
        if fault.kind == "sigstop":
            c = self.pick(training, fault)
            if not c:
                return "no training container"
            self.ctr("tasks", "kill", "-s", "SIGSTOP", c["id"])
            threading.Timer(8.0, lambda: self.ctr("tasks", "kill", "-s", "SIGCONT", c["id"])).start()
            return f"SIGSTOP {c['pod']} (SIGCONT in 8 s)"
        if fault.kind == "delete_pod":
            pods = sorted(str(p.metadata.name) for p in self.client.list(Pod, namespace=self.ns)
                          if p.metadata and not p.metadata.deletionTimestamp)
            name = self.pick(pods, fault)
            if not name:
                return "no pod"
            self.client.delete(Pod, name, namespace=self.ns)
            return f"deleted pod {name}"
        if fault.kind == "kill_leader":
            return self.operators.kill_leader() if self.operators else "no operators"
        if fault.kind == "delete_restarting":
            victims = sorted(j.name for j in self.jobs.values() if j.kind == "victim" and not j.end)
            name = self.pick(victims, fault)
            c = next((c for c in training if self.pod_job.get(c["uid"]) == name), None)
            if not name or not c:
                return "no running victim"
            self.ctr("tasks", "kill", "-s", "SIGKILL", c["id"])  # a restart begins...
            time.sleep(1.0)
            self.delete_job(self.jobs[name])  # ...and the job is deleted while it restarts
            return f"SIGKILL {c['pod']}, deleted {name} 1 s later"
        if fault.kind == "restart_apiserver":
            r = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "restart-apiserver"],
                               capture_output=True, text=True, timeout=180,
                               env={**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(self.state)})
            return f"kube-apiserver restarted (rc {r.returncode})"
        if fault.kind in ("restart_kubelet", "restart_containerd"):
            return self.restart_daemon(fault.kind.removeprefix("restart_"))
        raise ValueError(fault.kind)

    def restart_daemon(self, name: str) -> str:
        """SIGKILL the node's kubelet or containerd and start it again 1 s later (containerd's shims
        outlive it: the containers keep running, and containerd finds them again when it starts)."""
        from tests.e2e.daemons import kill_daemon, start_daemon

        kill_daemon(self.state, name)
        time.sleep(1.0)
        return f"{name} SIGKILLed and started again (pid {start_daemon(self.state, name)})"

    def delete_job(self, job: Job) -> None:
        from lightkube.core.exceptions import ApiError

        if not job.end:  # a job that had ended (a victim no fault reached succeeds) is judged by how it ended
            job.deleted_at = time.monotonic()
        try:
            self.client.delete(self.res(job), job.name, namespace=self.ns)
        except ApiError as e:
            if e.status.code != 404:
                raise

    # ----------------------------------------------------------------- the run

    def run(self, image: str) -> Findings:
        from lightkube.core.exceptions import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace, Pod, Service

        from torchjob.kube.objects.labels import LABEL_JOB

        self.image = image
        for name in (self.ns, "torchjob-system"):
            try:
                self.client.create(Namespace(metadata=ObjectMeta(name=name)))
            except ApiError as e:
                if e.status.code != 409:
                    raise
        plan = [f for f in schedule(self.seed, self.duration) if f.kind in self.faults]
        log(f"seed {self.seed}: {len(plan)} faults over {self.duration:.0f} s in namespace {self.ns}: "
            + ", ".join(f"{f.at:.0f}s {f.kind}" for f in plan))
        self.operators = self.make_operators()
        self.operators.start()
        watcher = threading.Thread(target=self.watch, daemon=True)
        self.t0 = time.monotonic()
        watcher.start()
        try:
            while time.monotonic() - self.t0 < self.duration:
                elapsed = time.monotonic() - self.t0
                while plan and plan[0].at <= elapsed:
                    f = plan.pop(0)
                    try:
                        what = self.inject(f)
                    except Exception as e:
                        what = f"failed: {type(e).__name__}: {str(e)[:160]}"
                    self.found.faults_done.append(f"{f.at:.0f}s {f.kind}: {what}")
                    log(f"fault {f.kind} at {elapsed:.0f}s: {what}")
                self.operators.supervise()
                try:
                    self.tend(submitting=True)
                except Exception as e:
                    log(f"tend: {type(e).__name__}: {str(e)[:160]}")
                time.sleep(1.0)
            log("faults over; waiting for the jobs to end (victims deleted)")
            for j in self.jobs.values():
                if j.kind == "victim" and not j.end:
                    self.delete_job(j)
            end = time.monotonic() + 240
            while time.monotonic() < end and any(not j.end for j in self.jobs.values()):
                self.operators.supervise()
                try:
                    self.tend(submitting=False)
                except Exception as e:
                    log(f"tend: {type(e).__name__}: {str(e)[:160]}")
                time.sleep(1.0)
            for j in self.jobs.values():
                if not j.end:
                    j.end = "still running"
                    self.describe(j)
            # Every job goes; nothing of any of them may be left.
            for j in self.jobs.values():
                if j.end != "Deleted":
                    self.delete_job(j)

            def left() -> list[str]:
                names = set(self.jobs)
                objs: list[Any] = [*self.client.list(Pod, namespace=self.ns),
                                   *self.client.list(Service, namespace=self.ns)]
                return [f"{type(o).__name__} {o.metadata.name}" for o in objs
                        if o.metadata and (o.metadata.labels or {}).get(LABEL_JOB) in names]

            end = time.monotonic() + 120
            while left() and time.monotonic() < end:
                time.sleep(1.0)
            self.found.leftovers = left()
        finally:
            # However the run ends (an invariant broken, a timeout, an error of the bench), the
            # operators go with it and the events stay for the reader.
            self.stop.set()
            watcher.join(timeout=30)
            if self.operators is not None:
                self.operators.stop()
                self.found.operator_exits = self.operators.exits
            self.write_events()
        self.found.past_backoff = [f"{j.name} ({j.restarts} > {j.backoff})" for j in self.jobs.values()
                                   if j.restarts > j.backoff]
        try:
            self.client.delete(Namespace, self.ns)
        except ApiError:
            pass
        return self.found

    def write_events(self) -> None:
        """The run's events, oldest first, in events.txt: for the reader of a broken run."""
        from lightkube.resources.core_v1 import Event

        try:
            events: list[Any] = list(self.client.list(Event, namespace=self.ns))
            (self.logs / "events.txt").write_text("".join(
                f"{e.lastTimestamp or e.eventTime} {e.involvedObject.name} {e.reason}: {e.message}\n"
                for e in sorted(events, key=lambda e: str(e.lastTimestamp or e.eventTime))))
        except Exception as e:
            log(f"events: {type(e).__name__}: {str(e)[:120]}")

    def describe(self, job: Job) -> None:
        """Log what a job that did not end in time looks like: its conditions and its pods' phases."""
        from lightkube.resources.core_v1 import Pod

        from torchjob.kube.objects.labels import LABEL_JOB

        try:
            status = self.client.get(self.res(job), job.name, namespace=self.ns).status or {}
            conds = [f"{c['type']}={c['status']} ({c.get('reason', '')})" for c in status.get("conditions", [])]
            pods = [f"{p.metadata.name}:{p.status.phase if p.status else '?'}"
                    + (" (deleting)" if p.metadata.deletionTimestamp else "")
                    for p in self.client.list(Pod, namespace=self.ns, labels={LABEL_JOB: job.name}) if p.metadata]
            log(f"{job.name} still running: {', '.join(conds) or 'no conditions'}; pods {', '.join(pods) or 'none'}")
        except Exception as e:
            log(f"{job.name} still running (could not read it: {type(e).__name__})")

    def report(self) -> bool:
        """Print the figures; True when every invariant holds."""
        f = self.found
        jobs = list(self.jobs.values())
        good = [j for j in jobs if j.expected()]
        print(f"\nChaos run: seed {self.seed}, {self.duration:.0f} s, {len(f.faults_done)} faults")
        for line in f.faults_done:
            print(f"  {line}")
        print("\nJobs")
        for j in jobs:
            mark = "ok " if j.expected() else "BAD"
            print(f"  {mark} {j.name:14} {j.end or '-':13} restarts {j.restarts}/{j.backoff}  {j.reason[:90]}")
        longest = max(f.wrong.items(), key=lambda kv: kv[1], default=("-", 0.0))
        print("\nFigures")
        print(f"  jobs that ended as their script and policy imply: {len(good)} / {len(jobs)}")
        print(f"  replicas that ever had two live pods at once: {len(f.doubles)}"
              + (f" {f.doubles}" if f.doubles else ""))
        print(f"  pods or Services left after their job went: {len(f.leftovers)}"
              + (f" {f.leftovers}" if f.leftovers else ""))
        print(f"  jobs whose restarts went past backoffLimit: {len(f.past_backoff)}"
              + (f" {f.past_backoff}" if f.past_backoff else ""))
        print(f"  longest time a job's status said Running with none of its containers running: "
              f"{longest[1]:.1f} s ({longest[0]})")
        print(f"  operator exits the injector did not cause (each started again): {len(f.operator_exits)}"
              + (f" {f.operator_exits}" if f.operator_exits else ""))
        if f.refused:
            print(f"  jobs the API server refused (a bug of the bench): {f.refused}")
        ok = len(good) == len(jobs) and not f.doubles and not f.leftovers and not f.past_backoff and not f.refused
        print(f"\n{'all invariants hold' if ok else 'AN INVARIANT IS BROKEN'} (seed {self.seed})")
        return ok


def devcluster(state: Path, subnet: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(state), "DEVCLUSTER_KWOK": "0",
           "DEVCLUSTER_POD_SUBNET": subnet}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def prepare(kubeconfig: str, state: Path, subnet: str, logs: Path) -> str:
    """CRDs (both APIs) and the stand-in image with the tests' programs; returns the image."""
    from lightkube import Client, KubeConfig
    from tests.e2e.images import STANDINS, TESTS_IMAGE
    from tests.kube.conftest import wait_established

    from torchjob.kube.objects.install import apply, kubeflow_crd
    from torchjob.kube.objects.install.crd import CRD_NAME, crd

    apply([crd(), kubeflow_crd.crd()], kubeconfig)
    for name in (CRD_NAME, kubeflow_crd.CRD_NAME):
        wait_established(Client(config=KubeConfig.from_file(kubeconfig)), name)
    spec = logs / "images.json"
    spec.write_text(json.dumps([i for i in STANDINS if i["name"] == TESTS_IMAGE]))
    built = devcluster(state, subnet, "image", str(spec))
    if built.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh image failed:\n{built.stderr[-3000:]}")
    return TESTS_IMAGE


def main(argv: list[str] | None = None, run: Callable[..., Any] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of faults (jobs then finish)")
    ap.add_argument("--seed", type=int, default=None, help="the injector's seed (printed; the same seed replays)")
    ap.add_argument("--kubeconfig", default=None, help="a real-node cluster already up (else one is started)")
    ap.add_argument("--state", default=os.environ.get("TORCHJOB_DEVCLUSTER_DIR", "/tmp/torchjob-bench-chaos"),
                    help="the real-node cluster's state dir")
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"the kinds of fault to draw from ({','.join(FAULTS)})")
    ap.add_argument("--operator", choices=("chart", "processes"), default="chart",
                    help="the operator as installed (the chart's two pods) or two processes on the host")
    ap.add_argument("--logs", default=None, help="where the operators' logs go (a temporary dir)")
    a = ap.parse_args(argv)
    faults = tuple(x for x in a.faults.split(",") if x)
    bad = [x for x in faults if x not in FAULTS]
    if bad or a.duration <= 0:
        print(f"chaos.py: error: --faults {','.join(bad)}: not a fault kind (known: {','.join(FAULTS)})" if bad
              else "chaos.py: error: --duration must be a positive number of seconds", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1_000_000)
    # SIGTERM (a test's timeout, a CI runner stopping) ends the run through its cleanup: the
    # operators stopped, the events written, the namespace deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    subnet = os.environ.get("DEVCLUSTER_POD_SUBNET", "10.249.0.0/24")
    state = Path(a.state)
    logs = Path(a.logs) if a.logs else Path(f"/tmp/chaos-logs-{seed}-{uuid.uuid4().hex[:4]}")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"seed {seed} (replay: --seed {seed}); logs in {logs}", flush=True)
    kubeconfig, started = a.kubeconfig, False
    if kubeconfig is None:
        up = devcluster(state, subnet, "up", "--real-node", timeout=3600)
        if up.returncode != 0:
            print(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-3000:]}", file=sys.stderr)
            return 1
        kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
        started = "already up" not in up.stderr
    try:
        image = prepare(kubeconfig, state, subnet, logs)
        chaos = Chaos(kubeconfig, state, seed, a.duration, logs, faults, host=subnet.rsplit(".", 1)[0] + ".1",
                      operator=a.operator, subnet=subnet)
        chaos.run(image)
        return 0 if chaos.report() else 1
    finally:
        if started:
            devcluster(state, subnet, "down", timeout=300)


if __name__ == "__main__":
    sys.exit(main())
