"""The operator as a cluster runs it, read by the client: whether its Deployment is Ready (what
`torchjob install` waits for), what its pods say when it is not (an image that cannot be pulled, a
container that crashes), and which version it runs (`torchjob version --kube`, from its image's tag).

`diagnose` and `image_version` are pure (a pod's and a Deployment's documents in, words out); `wait_ready`
and `find_operator` read the cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchjob.kube.objects.install import NAME

# The image is not there to run: a pull that failed (or is backing off), a name that cannot be parsed, a
# pull policy of Never for an image the node lacks. kubelet's reasons (pkg/kubelet/images/types.go).
PULL_FAILED = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                         "RegistryUnavailable"})
BUILD_AND_PUSH = ("build the image from the repository (the Dockerfile, or `scripts/dev-cluster.sh operator-image "
                  "--push REGISTRY/torchjob-operator:VERSION` without a Docker engine), push it to a registry the "
                  "cluster's nodes pull from, and install with `torchjob install --image REGISTRY/torchjob-operator:"
                  "VERSION` (Helm: --set image.repository=REGISTRY/torchjob-operator); docs/operator/install.md")
CRASH_LOOPS = 2  # restarts after which a container that keeps exiting is taken as crashing, not starting


@dataclass(frozen=True)
class Trouble:
    """Why the operator is not Ready, and what to do: a pod's words, said for a person."""

    pod: str
    what: str
    fix: str


def diagnose(pods: Sequence[dict[str, Any]], image: str) -> Trouble | None:
    """The first pod (of the operator's, as dicts) whose container cannot start: its image cannot be
    pulled, or it keeps exiting. None while every pod may still come up."""
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        status = pod.get("status") or {}
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            waiting = (c.get("state") or {}).get("waiting") or {}
            reason, message = waiting.get("reason", ""), waiting.get("message", "")
            if reason in PULL_FAILED:
                said = f": {message}" if message else ""
                what = f"the operator's image {c.get('image') or image} cannot be pulled ({reason}{said})"
                return Trouble(name, what, BUILD_AND_PUSH)
            last = (c.get("lastState") or {}).get("terminated") or (c.get("state") or {}).get("terminated") or {}
            if reason == "CrashLoopBackOff" or (last and c.get("restartCount", 0) >= CRASH_LOOPS):
                code = last.get("exitCode")
                how = f"exit code {code}" if code is not None else "it exits"
                if last.get("reason") and last.get("reason") != "Error":
                    how += f", {last['reason']}"
                restarts = c.get("restartCount", 0)
                return Trouble(name, f"the operator's container keeps exiting ({how}; restarted {restarts} "
                                     f"time{'' if restarts == 1 else 's'})",
                               f"read why: kubectl logs -n {pod.get('metadata', {}).get('namespace', '')} {name} "
                               "--previous; an image of another version than this client's "
                               "(`torchjob version --kube`) or a wrong --operator-arg is the usual cause")
            if reason in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
                return Trouble(name, f"the operator's container cannot be created ({reason}: {message})",
                               f"kubectl describe pod -n {pod.get('metadata', {}).get('namespace', '')} {name}")
    return None


def is_ready(deployment: dict[str, Any]) -> bool:
    """Rolled out and available, as `kubectl rollout status` says: the newest spec observed, every
    replica of it updated and available."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    want = spec.get("replicas", 1)
    generation = deployment.get("metadata", {}).get("generation", 0)
    return bool(status.get("observedGeneration", 0) >= generation and status.get("updatedReplicas", 0) >= want
            and status.get("availableReplicas", 0) >= want and status.get("replicas", 0) <= want)


def pending_reason(pods: Sequence[dict[str, Any]]) -> str:
    """What the operator's pods are doing, in a few words (for a wait that ran out)."""
    words = []
    for pod in pods:
        status = pod.get("status") or {}
        state = status.get("phase", "?")
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                state += f" (not scheduled: {cond.get('message', cond.get('reason', ''))})"
        for c in status.get("containerStatuses") or []:
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                state += f" ({waiting['reason']})"
            elif "running" in (c.get("state") or {}) and not c.get("ready"):
                state += " (running, not Ready yet)"
        words.append(f"{pod.get('metadata', {}).get('name', '?')}: {state}")
    return "; ".join(words) or "no pod of it exists yet"


def image_version(image: str) -> str:
    """The version an image reference's tag says (`repo:0.1.0` -> 0.1.0, `repo:v0.1.0` -> 0.1.0); the
    tag itself when it is no version (`dev`); `unknown` for a reference by digest or without a tag."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return "unknown"
    tag = last.rsplit(":", 1)[1]
    return tag[1:] if tag[:1] == "v" and tag[1:2].isdigit() else tag


@dataclass(frozen=True)
class Operator:
    namespace: str
    image: str
    replicas: int
    ready: int

    @property
    def version(self) -> str:
        return image_version(self.image)


def _operator_of(d: dict[str, Any]) -> Operator:
    containers = d["spec"]["template"]["spec"]["containers"]
    image = next((c["image"] for c in containers if c.get("name") == "operator"), containers[0]["image"])
    return Operator(d["metadata"]["namespace"], image, d["spec"].get("replicas", 1),
                    (d.get("status") or {}).get("readyReplicas", 0))


def find_operator(client: Any, namespace: str | None = None) -> list[Operator]:
    """The operator Deployments (`torchjob install`'s or the chart's: both are torchjob-operator) in a
    namespace, or in every namespace."""
    from lightkube.resources.apps_v1 import Deployment

    selector = {"app.kubernetes.io/name": NAME}
    found = client.list(Deployment, namespace=namespace or "*", labels=selector)
    return [_operator_of(d.to_dict()) for d in found]


def wait_ready(client: Any, namespace: str, image: str, timeout: float, poll: float = 1.0,
               on_wait: Callable[[str], None] | None = None) -> Trouble | None:
    """Until the operator's Deployment is Ready (None), one of its pods shows it cannot start (that
    Trouble), or `timeout` runs out (a Trouble saying what its pods do)."""
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Pod

    deadline = time.monotonic() + timeout
    said = ""
    while True:
        pods: list[dict[str, Any]] = []
        try:
            deployment = client.get(Deployment, NAME, namespace=namespace).to_dict()
            if is_ready(deployment):
                return None
            labels = deployment["spec"]["selector"].get("matchLabels") or {"app.kubernetes.io/name": NAME}
            pods = [p.to_dict() for p in client.list(Pod, namespace=namespace, labels=labels)]
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        except ApiError as e:
            if e.status.code != 404:
                raise
        trouble = diagnose(pods, image)
        if trouble is not None:
            return _with_last_words(client, namespace, trouble)
        now = pending_reason(pods)
        if on_wait is not None and now != said:
            on_wait(now)
            said = now
        if time.monotonic() >= deadline:
            return Trouble(NAME, f"the operator was not Ready within {timeout:g} s ({now})",
                           f"kubectl describe deployment -n {namespace} {NAME}; a slower cluster: --timeout")
        time.sleep(poll)


def _with_last_words(client: Any, namespace: str, trouble: Trouble) -> Trouble:
    """A crashing container's last lines, where the cluster gives them (a container waiting to be
    started again answers with its last run's log)."""
    if "keeps exiting" not in trouble.what:
        return trouble
    try:
        lines = [line.rstrip() for line in client.log(trouble.pod, namespace=namespace, container="operator",
                                                      tail_lines=5)]
    except Exception:  # no log to read (the kubelet away, RBAC): the advice stands without it
        return trouble
    said = "\n".join(f"      {line}" for line in lines if line)
    return Trouble(trouble.pod, f"{trouble.what}; its last lines:\n{said}" if said else trouble.what, trouble.fix)
