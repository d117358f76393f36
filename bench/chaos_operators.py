"""The two operators a chaos run (bench/chaos.py) runs its jobs under, in one of two ways:

- `chart`: as platform engineers install it: charts/torchjob by real Helm, the operator's image
  built on the node (`scripts/dev-cluster.sh operator-image`), two replicas as pods in a namespace
  enforcing Pod Security `restricted`. The leader's kill is a SIGKILL of its container; the kubelet
  starts it again.
- `processes`: two `torchjob operator --leader-elect` processes on the host, started again by the
  bench (as a Deployment's kubelet would) when they exit.

Both count the exits the injector did not cause: an operator's own answer to a fault."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchjob.local.start.ports import free_port

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SYSTEM = "torchjob-system"
RELEASE = "torchjob"
OPERATOR_IMAGE = "localhost/torchjob-operator:dev"
NAME = "torchjob-operator"  # the chart's Deployment, its pods' app.kubernetes.io/name, the Lease
LEASE_S = 6  # a killed leader is taken over within about 6 s (docs/operator/install.md)

Log = Callable[[str], None]


def die_with_parent() -> None:
    """Run in the child before exec: the kernel SIGKILLs it when the thread that forked it ends, so an
    operator that outlived a killed bench once acted beside a test suite's own operator (Linux's
    PR_SET_PDEATHSIG). Fork from a thread that lives as long as the run (the main one)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def lease_holder(client: Any) -> str:
    from lightkube.resources.coordination_v1 import Lease

    try:
        lease: Any = client.get(Lease, NAME, namespace=SYSTEM)
        return str(lease.spec.holderIdentity or "")
    except Exception:
        return ""


class ProcessOperators:
    """Two operator processes on the host with --leader-elect."""

    def __init__(self, kubeconfig: str, logs: Path, client: Any, host: str, init_image: str, log: Log) -> None:
        self.kubeconfig, self.logs, self.client, self.host, self.init_image = kubeconfig, logs, client, host, init_image
        self.log = log
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.restart_at: dict[int, float] = {}  # slots the injector killed, and when each starts again
        self.exits: list[str] = []
        self.t0 = time.monotonic()

    def start(self) -> None:
        self.t0 = time.monotonic()
        for slot in (0, 1):
            self.start_one(slot)

    def start_one(self, slot: int) -> None:
        port = free_port()
        self.procs[slot] = subprocess.Popen(
            [PYTHON, "-m", "torchjob", "operator", "--kubeconfig", self.kubeconfig, "--leader-elect",
             "--lease-duration", str(LEASE_S), "--init-image", self.init_image, "--kubeflow-api", "on",
             "--metrics-port", str(free_port()), "--health-port", "0", "--workers", "4", "--progress-port", str(port),
             "--progress-url", f"https://{self.host}:{port}"],
            stdout=(self.logs / f"operator-{slot}.log").open("ab"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            preexec_fn=die_with_parent)
        self.restart_at.pop(slot, None)

    def leader_slot(self) -> int | None:
        """The process holding the Lease: its identity is host-uuid, so ask each log."""
        holder = lease_holder(self.client)
        for slot in self.procs:
            if holder and holder in (self.logs / f"operator-{slot}.log").read_text(errors="replace"):
                return slot
        return None

    def kill_leader(self) -> str:
        slot = self.leader_slot()
        if slot is None:
            return "no leader found"
        # Started again from the main thread (supervise): PR_SET_PDEATHSIG fires when the forking
        # thread ends, so one a timer's thread started died with the timer.
        self.restart_at[slot] = time.monotonic() + 2.0
        self.procs[slot].send_signal(signal.SIGKILL)
        self.procs[slot].wait()
        return f"SIGKILL operator {slot} (the leader; started again in 2 s)"

    def supervise(self) -> None:
        """Start again an operator that exited by itself, as its Deployment's kubelet would, and count it."""
        for slot, p in list(self.procs.items()):
            if slot in self.restart_at:
                if time.monotonic() >= self.restart_at[slot]:
                    self.start_one(slot)
                continue
            if p.poll() is None:
                continue
            self.exits.append(f"operator {slot} exited {p.returncode} at {time.monotonic() - self.t0:.0f}s")
            self.log(f"operator {slot} exited by itself (rc {p.returncode}); starting it again")
            self.start_one(slot)

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


class ChartOperators:
    """charts/torchjob installed by real Helm: two replicas as pods on the node."""

    def __init__(self, kubeconfig: str, logs: Path, client: Any, init_image: str, log: Log,
                 devcluster: Callable[..., subprocess.CompletedProcess[str]]) -> None:
        self.kubeconfig, self.logs, self.client = kubeconfig, logs, client
        self.init_image, self.log, self.devcluster = init_image, log, devcluster
        self.kills = 0
        self.exits: list[str] = []
        self.helm = ""

    def pods(self) -> list[Any]:
        from lightkube.resources.core_v1 import Pod

        return [p for p in self.client.list(Pod, namespace=SYSTEM, labels={"app.kubernetes.io/name": NAME})
                if p.metadata and not p.metadata.deletionTimestamp]

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              stdin=subprocess.DEVNULL, env={**os.environ, "KUBECONFIG": self.kubeconfig})

    def start(self) -> None:
        """Build the image on the node, adopt a Kubeflow CRD made by another installer, install, wait for
        two pods running and one Ready (the leader)."""
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
        from lightkube.resources.core_v1 import Namespace
        from lightkube.types import PatchType

        built = self.devcluster("operator-image", timeout=1800)
        if built.returncode != 0:
            raise RuntimeError(f"dev-cluster.sh operator-image failed:\n{built.stderr[-3000:]}")
        self.helm = self.devcluster("helm", timeout=1800).stdout.strip().splitlines()[-1]
        self.client.patch(Namespace, SYSTEM, {"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}}, patch_type=PatchType.MERGE)
        try:  # Helm adopts what carries its release's marks (Helm >= 3.2)
            self.client.patch(CustomResourceDefinition, "pytorchjobs.kubeflow.org", {"metadata": {
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": SYSTEM}}},
                patch_type=PatchType.MERGE)
        except ApiError as e:
            if e.status.code != 404:
                raise
        out = self.run(self.helm, "install", RELEASE, str(REPO / "charts" / "torchjob"), "-n", SYSTEM,
                       "--set", "image.repository=" + OPERATOR_IMAGE.split(":")[0], "--set", "image.tag=dev",
                       "--set", "image.pullPolicy=Never", "--set", "replicaCount=2",
                       "--set", "kubeflowApi.enabled=true", "--set", f"operator.initImage={self.init_image}",
                       "--set", f"operator.leaseDuration={LEASE_S}")
        if out.returncode != 0:
            raise RuntimeError(f"helm install failed: {out.stdout}{out.stderr}")
        end = time.monotonic() + 180
        while time.monotonic() < end:
            pods = self.pods()
            running = [p for p in pods if p.status and p.status.phase == "Running"]
            ready = [p for p in running if any(c.type == "Ready" and c.status == "True"
                                               for c in (p.status.conditions or []))]
            if len(running) == 2 and len(ready) == 1:
                self.log(f"chart installed: {', '.join(p.metadata.name for p in running)}; "
                         f"{ready[0].metadata.name} leads")
                return
            time.sleep(1.0)
        raise RuntimeError("the chart's two operator pods were not running, one Ready, within 180 s")

    def kill_leader(self) -> str:
        from tests.e2e.conftest import kill_container, running_container

        name = lease_holder(self.client).rsplit("-", 1)[0]  # the pod's hostname, then a per-process suffix
        pod = next((p for p in self.pods() if p.metadata.name == name), None)
        cid = running_container(pod, "operator") if pod is not None else ""
        if not cid:
            return "no leader found"
        kill_container(cid)
        self.kills += 1
        return f"SIGKILL the leader's container ({name}; its kubelet starts it again)"

    def supervise(self) -> None:
        """The kubelet does it."""

    def stop(self) -> None:
        """Count the restarts the injector did not cause, keep the pods' logs, uninstall."""
        try:
            pods = self.pods()
            restarts = sum(cs.restartCount for p in pods for cs in (p.status.containerStatuses or []) if p.status)
            if restarts > self.kills:
                last = [f"{p.metadata.name} last exit {t.exitCode} ({t.reason}) at {t.finishedAt:%H:%M:%S}"
                        for p in pods for cs in (p.status.containerStatuses or []) if p.status
                        if cs.lastState and (t := cs.lastState.terminated) and t.finishedAt]
                self.exits.append(f"{restarts - self.kills} container restart(s) of the {len(pods)} operator pods "
                                  f"beyond the {self.kills} kill(s) injected: {'; '.join(last)}")
            kubectl = Path(self.devcluster("bin").stdout.strip()) / "kubectl"
            for p in pods:
                for flag in ("", "--previous"):
                    out = self.run(str(kubectl), "logs", "-n", SYSTEM, p.metadata.name, *([flag] if flag else []))
                    (self.logs / f"{p.metadata.name}{flag.replace('--', '-')}.log").write_text(out.stdout + out.stderr)
        except Exception as e:
            self.log(f"operator pods: {type(e).__name__}: {str(e)[:160]}")
        out = self.run(self.helm, "uninstall", RELEASE, "-n", SYSTEM, "--wait", timeout=180)
        if out.returncode != 0:
            self.log(f"helm uninstall: {out.stderr[-400:]}")
