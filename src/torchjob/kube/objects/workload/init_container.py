"""The init container torchjob adds to a worker (wait-for-master: until the master's port accepts
connections), which pods get it, and the securityContext of a container torchjob adds to a pod."""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

from torchjob.api.defaults import ADDED_USER, INIT_RESOURCES
from torchjob.api.model import WORKER, TorchJob
from torchjob.core.shape.topology import Placement, ReplicaId, has_master

ANNOTATION_WAIT = "torchjob.dev/wait-for-master"  # "false" turns the init container off for a job
WAIT_CONTAINER = "wait-for-master"


def added_security(pod_context: Mapping[str, Any] | None, *, windows: bool = False) -> dict[str, Any]:
    """The securityContext of a container torchjob adds to a pod: what Pod Security `restricted`
    asks of it (no privilege escalation, every capability dropped, RuntimeDefault seccomp, a non-root
    user) and a read-only root. It never contradicts the pod's own securityContext: where the pod
    names a user (and group), the container runs as the pod says, one identity per pod, as a
    platform's policy sees it (runAsNonRoot only when that user is not root: the kubelet would refuse
    to start it otherwise); where it names none, as ADDED_USER. A seccomp profile the pod sets is
    inherited, not overridden. A Windows pod gets only what Windows has (the rest is refused there)."""
    pod_context = pod_context or {}
    if windows:
        return {"runAsNonRoot": True} if pod_context.get("runAsUser") != 0 else {}
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                          "readOnlyRootFilesystem": True}
    user = pod_context.get("runAsUser")
    if user is None:
        sc["runAsUser"] = ADDED_USER
        if pod_context.get("runAsGroup") is None:
            sc["runAsGroup"] = ADDED_USER
    if user != 0:
        sc["runAsNonRoot"] = True
    if "seccompProfile" not in pod_context:
        sc["seccompProfile"] = {"type": "RuntimeDefault"}
    return sc


def is_windows(spec: Mapping[str, Any]) -> bool:
    return bool((spec.get("os") or {}).get("name") == "windows")


def wait_for_master(job: TorchJob, where: Placement, image: str,
                    pod_context: Mapping[str, Any] | None = None, windows: bool = False) -> dict[str, Any]:
    """Waits until the master's port accepts connections, not only until its name resolves
    (pytorch-operator #333: DNS answers before the master listens); with `waitForMaster.timeoutSeconds`
    it gives up after that long and the worker fails (Volcano's `--wait-master-timeout`). It probes
    with `nc -z`, else bash's `/dev/tcp` (Volcano's plugin falls back to it too), so an image with
    either works; with neither it fails at once, saying so. POSIX sh around them."""
    host, port = where.master_addr, where.master_port
    wait = job.spec.waitForMaster
    timeout = wait.timeoutSeconds if wait else None
    # The values go in once, quoted, as variables; the script only ever expands them in double quotes
    # (the host comes from the job's name and the port from its spec: never code, whatever they hold).
    lines = [
        f"host={shlex.quote(str(host))} port={int(port)}",
        'has() { command -v "$1" >/dev/null 2>&1; }',
        "if ! has nc && ! has bash; then",
        '  echo "wait-for-master: this image has neither nc nor bash (for /dev/tcp), so it cannot probe port $port '
        'of $host; use an image with one of them (spec.waitForMaster.image, or the operator --init-image)"; exit 1',
        "fi",
        'probe() { { has nc && nc -z -w 2 "$host" "$port"; } || '
        """{ has bash && bash -c ': > "/dev/tcp/$0/$1"' "$host" "$port"; }; }""",
    ]
    if timeout is not None:
        lines += [f"timeout={int(timeout)}", f"end=$(( $(date +%s) + {int(timeout)} ))"]
    lines.append("until probe 2>/dev/null; do")
    if timeout is not None:
        lines.append('  if [ "$(date +%s)" -ge "$end" ]; then '
                     'echo "gave up waiting for $host $port after ${timeout}s"; exit 1; fi')
    lines += ['  echo "waiting for $host $port"; sleep 1', "done"]
    return {"name": WAIT_CONTAINER, "image": wait.image if wait and wait.image else image,
            "command": ["sh", "-c", "\n".join(lines)],
            "securityContext": added_security(pod_context, windows=windows),
            "resources": copy.deepcopy(INIT_RESOURCES)}


def waits_for_master(job: TorchJob, rid: ReplicaId, meta: dict[str, Any], default: bool,
                     attempt: int = 0) -> bool:
    """Whether this pod gets the wait-for-master init container: workers of a job with a master, unless
    the job (`waitForMaster.enabled`) or its template (annotation) says otherwise; else the operator's
    default, for a first attempt only (a job's `waitForMaster` holds for every attempt). A restarted
    worker starts at once, beside its restarted master: torch's store client retries a name that does
    not resolve yet and a port that refuses until its timeout, so the wait only serialised the two
    torch imports and a 1 s probe (bench/recovery.py: seconds of a gang restart on the real node)."""
    if rid.rtype != WORKER or not has_master(job) or meta.get("annotations", {}).get(ANNOTATION_WAIT) == "false":
        return False
    if job.spec.waitForMaster is not None:  # the job asked: every attempt waits as it says
        return job.spec.waitForMaster.enabled
    return default and attempt == 0
