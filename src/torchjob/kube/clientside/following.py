"""What following a job on a cluster (`run --kube`: kube_runtime.follow) adds to its events: the
replicas' output as it comes, each started pod's log followed on a thread of its own; the bound on
an image that cannot be pulled, and what is said then; what Ctrl-C says."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lightkube import Client

from torchjob.api.errors import UserError
from torchjob.kube.objects.labels import replica_name

# A pod whose image cannot be pulled (ErrImagePull, ImagePullBackOff) for this long ends `run --kube`:
# the kubelet retries for ever, and a name that does not resolve or a registry the node cannot reach
# does not mend on its own. The job stays on the cluster (its pods wait), as `run` says.
PULL_BOUND_S = 60.0
PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
STREAM_DRAIN_S = 5.0  # at most this long, once the job ended, for the replicas' last lines to arrive

Stream = Callable[[str, str], None]  # (replica, one line of its output)


STREAMED_KEPT = 200  # lines of each replica's stream remembered: a root cause quoting them says "above" instead


def recording(say: Stream, into: dict[str, Any]) -> Stream:
    """`say`, remembering each replica's last STREAMED_KEPT lines in `into` (replica -> deque): `run
    --kube` then quotes no line of its root cause that was just streamed (torch_errors.brief)."""
    from collections import deque

    def stream(replica: str, line: str) -> None:
        into.setdefault(replica, deque(maxlen=STREAMED_KEPT)).append(line)
        say(replica, line)

    return stream


class Interrupted(UserError):
    """Ctrl-C in `run --kube`: the job goes on on the cluster."""

    exit_code = 130


def unpullable(pod: Any) -> tuple[str, str, str] | None:
    """(container, image, the kubelet's words) of a container of the pod whose image cannot be pulled."""
    status = pod.status
    if status is None:
        return None
    for cs in [*(status.initContainerStatuses or []), *(status.containerStatuses or [])]:
        w = cs.state.waiting if cs.state else None
        if w is not None and w.reason in PULL_REASONS:
            return cs.name, cs.image, f"{w.reason}: {w.message}" if w.message else str(w.reason)
    return None


def pull_refusal(name: str, replica: str, found: tuple[str, str, str], waited_s: float) -> UserError:
    container, image, why = found
    return UserError(
        f"job {name}: {replica}'s image {image} (container {container}) cannot be pulled ({why}); "
        f"gave up after {waited_s:.0f} s. The job is still on the cluster, its pods waiting",
        fix=f"name an image the nodes can pull (its name and tag; a private registry's imagePullSecrets); on "
            f"the dev cluster nothing is pulled: scripts/dev-cluster.sh example-images loads the docs' examples' "
            f"images, scripts/dev-cluster.sh image SPEC.json yours; then delete the job "
            f"(torchjob delete --kube {name}) and run it again")


class Streams:
    """The replicas' output as it comes: each started pod's log followed on a thread of its own, each
    line told to `say` with its replica; a pod once (its attempt: a pod is made again per attempt)."""

    def __init__(self, kube: Client, say: Stream) -> None:
        import threading

        self.kube, self.say = kube, say
        self.threads: dict[str, threading.Thread] = {}

    def watch(self, pods_: list[Any]) -> None:
        import threading

        from torchjob.api.pod import training_index

        for p in pods_:
            uid = p.metadata.uid or p.metadata.name
            phase = p.status.phase if p.status else None
            if uid in self.threads or phase not in ("Running", "Succeeded", "Failed"):
                continue
            names = [c.name for c in p.spec.containers]
            container = names[training_index(names)]
            t = threading.Thread(target=self._follow, daemon=True, name=f"log-{p.metadata.name}",
                                 args=(p.metadata.name, p.metadata.namespace, container,
                                       str(replica_name(p.metadata.labels))))
            self.threads[uid] = t
            t.start()

    def _follow(self, pod: str, namespace: str, container: str, replica: str) -> None:
        try:
            for line in self.kube.log(pod, namespace=namespace, container=container, follow=True):
                self.say(replica, line.rstrip("\n"))
        except Exception:  # the pod deleted, its node gone: its lines end here (logs --kube reads them)
            return

    def drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self.threads.values():
            t.join(max(0.0, deadline - time.monotonic()))
