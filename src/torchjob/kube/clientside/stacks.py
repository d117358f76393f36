"""`torchjob stacks --kube NAME` and a cluster job's `handle.stacks()`: the stacks of every rank of a job whose pods
were made to give them (kube/objects/front/stacks.py: by default, unless the job's annotation torchjob.dev/stacks says
"false"). Each running pod
is asked by a new value of its annotation torchjob.dev/stacks-request; its watcher (kube/inpod/torchjob_stacks.py)
signals the pod's rank processes and writes their dumps to the container's log, read back here. What this needs of
RBAC: get and list on pods, patch on pods, get on pods/log (no pods/exec). core.stacks reads and groups them."""

from __future__ import annotations

import time
import uuid
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from torchjob.api.errors import UserError
from torchjob.core.diagnosis.stacks import PodAnswer, ProcessStacks, Stacks, answer_in
from torchjob.kube.clientside.job_pods import pods
from torchjob.kube.machinery.client import status_code, to_dict
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.kube.objects.labels import replica_name

# How long the pods get to answer: the kubelet writes the pod's new annotation to its downward API file within
# a second or two of the patch (0.5 to 1 s measured on the dev cluster's node), then the watcher takes up to 3 s.
WAIT_S = 20.0
POLL_S = 0.3


def take(kube: Client, data: dict[str, Any], wait_s: float = WAIT_S) -> Stacks:
    t0 = time.monotonic()
    name, ns = data["metadata"]["name"], data["metadata"].get("namespace") or "default"
    running = [p for p in pods(kube, data)
               if p.status is not None and p.status.phase == "Running" and not p.metadata.deletionTimestamp]
    if not running:
        raise UserError(f"job {name} has no running pod to take stacks from",
                        fix=f"torchjob describe --kube {name} says where its pods are")
    made = [(p, pod_stacks.container_of(to_dict(p))) for p in running]
    if all(c is None for _, c in made):
        if pod_stacks.wanted(data["metadata"].get("annotations")):
            raise UserError(f"job {name}'s pods run without torchjob's front, which gives their stacks: their "
                            "command does not start with a Python interpreter running a script or a module "
                            "(torchrun, bash -c, python -c), they restart in place (runPolicy.warmSpares), they "
                            "run Windows, or the job runs in debug mode",
                            fix="start the command with python (python -m torch.distributed.run for torchrun), "
                                "without warmSpares: see docs/how-to/hangs.md")
        raise UserError(f'job {name} opted out of stacks (its annotation {pod_stacks.ANNOTATION}: "false"): its pods '
                        "were made without torchjob's front",
                        fix=f"remove the job's metadata.annotations {pod_stacks.ANNOTATION} (its pods are then made "
                            "with torchjob's front in front of a command run by python), and submit it again: see "
                            "docs/how-to/hangs.md")
    request = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    asked: dict[str, tuple[str, str]] = {}  # pod -> (replica, container)
    missing: list[str] = []
    for p, container in made:
        replica = replica_name(p.metadata.labels or {}) or p.metadata.name
        if container is None:
            missing.append(f"{replica} (its pod was made without stacks)")
            continue
        try:
            kube.patch(Pod, p.metadata.name, pod_stacks.request_note(request), namespace=ns,
                       patch_type=PatchType.MERGE)
        except ApiError as e:
            if status_code(e) == 404:
                continue  # gone since it was listed
            if status_code(e) == 403:
                raise UserError(f"the API server forbids asking {p.metadata.name} for its stacks: {e.status.message}",
                                fix="taking stacks needs patch on pods and get on pods/log in the namespace")
            raise
        asked[p.metadata.name] = (replica, container)
    answers: dict[str, PodAnswer] = {}
    while len(answers) < len(asked) and time.monotonic() - t0 < wait_s:
        for pod, (_, container) in asked.items():
            if pod in answers:
                continue
            since = int(time.monotonic() - t0) + 10  # the log since just before the request, and a margin
            try:
                got = answer_in(kube.log(pod, namespace=ns, container=container, since=since), request)
            except ApiError as e:
                if status_code(e) != 404:
                    raise
                got = None
            if got is not None:
                answers[pod] = got
        if len(answers) < len(asked):
            time.sleep(POLL_S)
    processes: list[ProcessStacks] = []
    for pod, (replica, _) in asked.items():
        got = answers.get(pod)
        if got is None:
            missing.append(f"{replica} ({_silent(kube, pod, ns, asked[pod][1], wait_s)})")
            continue
        for rank, pid, threads in got.processes:
            processes.append(ProcessStacks(replica, rank, pid or 0, tuple(threads)))
        missing += [f"{replica} pid {pid}" for pid in got.missing]
    dirs = tuple(sorted({a.stdlib for a in answers.values() if a.stdlib}))
    return Stacks(processes, missing, dirs, time.monotonic() - t0)


def _silent(kube: Client, pod: str, ns: str, container: str, wait_s: float) -> str:
    """Why a pod did not answer: its front did not start (the ConfigMap's program was missing or not the one the
    pod was made for: its command runs alone, saying so first in its log), or it did not answer in time."""
    try:
        for n, line in enumerate(kube.log(pod, namespace=ns, container=container)):
            if pod_stacks.UNBOOTED in line and line.startswith("torchjob-stacks: "):
                return (f"its pod runs without torchjob's front: the ConfigMap {inplace.CONFIGMAP} in namespace {ns} "
                        "was missing or not torchjob's when it started; its next pods have it (the operator makes it)")
            if n >= 20:  # the front's first words come first
                break
    except ApiError:
        pass
    return f"its pod did not answer within {wait_s:g} s"
