"""Playing the kubelet with real processes: each pod of a job runs its training container's command as
a local process (the entry point of a pod restarting in place included, from the namespace's ConfigMap
as the pod projects it), with the pod's environment, its projected token and CA, and its termination
log; its status follows the process (Running, then Succeeded or Failed with the exit code and the
termination message); a pod being deleted gets SIGTERM, SIGKILL after its grace, and is then removed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Pod
from lightkube.types import PatchType

from tests.kube.reporting import ca_file, pod_token
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.workload.reporting import PROGRESS_DIR

TERMINATION_LOG = "/dev/termination-log"
MARK = "TORCHJOB_TEST_POD"  # in each process of a pod (its entry point's children inherit it): its uid


def kill_marked(uid: str) -> None:
    """SIGKILL every process of the pod `uid` (its entry point's children are in sessions of their own):
    each through a pidfd opened before its environment is read, so a pid used again is never signalled."""
    mark = f"{MARK}={uid}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fd = os.pidfd_open(int(pid))
        except OSError:
            continue
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """`sig` to the group of a process of ours, only while poll() finds it unreaped (its group is its own)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    """Runs the pods of job `job` in `namespace` while started; `cwd`: where their commands run (the
    image's working directory); `extra_env`: added to each process's environment (test knobs)."""

    def __init__(self, kube: Client, namespace: str, job: str, root: Path, cwd: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.kube, self.namespace, self.job, self.root, self.cwd = kube, namespace, job, root, cwd
        self.extra_env = extra_env or {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # by pod uid
        self.started: list[str] = []  # pod uids, in the order they started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{job}", daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(30)
        for uid, proc in self.procs.items():
            signal_group(proc, signal.SIGKILL)
            proc.wait(10)
            kill_marked(uid)

    def _run(self) -> None:
        deleting: dict[str, float] = {}  # pod uid -> when its grace ends
        while not self._stop.is_set():
            pods = list(self.kube.list(Pod, namespace=self.namespace, labels={LABEL_JOB: self.job}))
            for uid in set(self.procs) - {p.metadata.uid for p in pods}:  # deleted at once (no node): ended
                self._kill(uid, deleting, 3)
            for pod in pods:
                uid = pod.metadata.uid
                if pod.metadata.deletionTimestamp:
                    self._delete(pod, deleting)
                elif uid not in self.procs:
                    self._start(pod)
                elif self.procs[uid].poll() is not None and (pod.status.phase or "") == "Running":
                    self._ended(pod, self.procs[uid].returncode)
            time.sleep(0.05)

    def _files(self, pod: Any) -> dict[str, str]:
        """What the pod projects, as local paths: its entry point, its token and CA, its termination log."""
        here = self.root / pod.metadata.uid
        (here / "inplace").mkdir(parents=True)
        (here / "progress").mkdir()
        if (pod.metadata.annotations or {}).get(inplace.ANNOTATION_IN_PLACE) == "true":
            data = self.kube.get(ConfigMap, inplace.CONFIGMAP, namespace=self.namespace).data or {}
            for name, text in data.items():
                (here / "inplace" / name).write_text(text)
        (here / "progress" / "token").write_text(pod_token(self.kube, pod, self.job))
        ca = ca_file(self.kube, self.namespace, here)
        (here / "progress" / "ca.crt").write_text(ca.read_text())
        (here / "termination-log").touch()
        return {inplace.DIR: str(here / "inplace"), PROGRESS_DIR: str(here / "progress"),
                TERMINATION_LOG: str(here / "termination-log")}

    def _start(self, pod: Any) -> None:
        paths = self._files(pod)

        def local(text: str) -> str:
            for where, there in paths.items():
                text = text.replace(where, there)
            return text

        c = pod.spec.containers[0]
        argv = [local(a) for a in [*(c.command or []), *(c.args or [])]]
        env = {e.name: local(e.value or "") for e in c.env or [] if e.valueFrom is None}
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env, **self.extra_env,
               MARK: pod.metadata.uid}
        self.procs[pod.metadata.uid] = subprocess.Popen(argv, env=env, cwd=self.cwd, start_new_session=True,
                                                        stdin=subprocess.DEVNULL)
        self.started.append(pod.metadata.uid)
        self._status(pod, {"phase": "Running", "containerStatuses": [
            {"name": c.name, "image": c.image or "x", "imageID": "", "ready": True, "restartCount": 0,
             "state": {"running": {"startedAt": now_iso()}}}]})

    def _ended(self, pod: Any, returncode: int) -> None:
        code = returncode if returncode >= 0 else 128 - returncode
        log = self.root / pod.metadata.uid / "termination-log"
        terminated = {"exitCode": code, "finishedAt": now_iso(), "reason": "Completed" if code == 0 else "Error"}
        if log.exists() and log.read_text():
            terminated["message"] = log.read_text()[-4096:]
        c = pod.spec.containers[0]
        self._status(pod, {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
            {"name": c.name, "image": c.image or "x", "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": terminated}}]})

    def _delete(self, pod: Any, deleting: dict[str, float]) -> None:
        if self._kill(pod.metadata.uid, deleting, pod.metadata.deletionGracePeriodSeconds or 0):
            with contextlib.suppress(ApiError):
                self.kube.delete(Pod, pod.metadata.name, namespace=self.namespace, grace_period=0)

    def _kill(self, uid: str, deleting: dict[str, float], grace_s: float) -> bool:
        """SIGTERM the pod's process, SIGKILL after its grace; whether it has ended."""
        proc = self.procs.get(uid)
        if proc is None or proc.poll() is not None:
            return True
        if uid not in deleting:
            deleting[uid] = time.monotonic() + grace_s
            signal_group(proc, signal.SIGTERM)
        if time.monotonic() < deleting[uid]:
            return False
        signal_group(proc, signal.SIGKILL)
        proc.wait(10)
        kill_marked(uid)  # what a container's end kills: every process of it
        return True

    def _status(self, pod: Any, status: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.kube.patch(Pod.Status, pod.metadata.name, {"status": status}, namespace=self.namespace,
                            patch_type=PatchType.MERGE)
