"""Each job's pods, as the pod informer has them, split the way a round needs them: the job's own,
those an earlier job of its name left, those that are nobody's business of ours, and those deleted
since (kept in the job's memory until core has decided on them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.core.round.initializers import step
from torchjob.core.shape.topology import replicas
from torchjob.kube.controller.memory import JobMemory
from torchjob.kube.controller.observe import observe_pod
from torchjob.kube.machinery.informer import Key
from torchjob.kube.objects.inplace import Seal
from torchjob.kube.objects.labels import pod_name
from torchjob.kube.objects.ownership import controller_of, left_by_earlier, owned_by


def controller_uid(obj: dict[str, Any]) -> str | None:
    owner = controller_of(obj)
    return owner.get("uid") if owner is not None else None


@dataclass
class PodIndex:
    """The pods of each job, from the pod informer: their names by job, the pods themselves read
    from its cache (packed: not held twice). Those deleted since are in the job's memory, kept until
    core has decided on them."""

    pods: Mapping[Key, dict[str, Any]]  # the pod informer's cache
    live: dict[Key, set[str]] = field(default_factory=dict)

    def split(self, job: TorchJob, key: Key, memory: JobMemory) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                        list[dict[str, Any]], list[dict[str, Any]]]:
        """The job's pods; pods of an earlier job of the same name and kind, named as this job's
        (left by it); pods labelled as the job's that are neither (not ours to touch); the job's pods
        deleted since."""
        pods: list[dict[str, Any]] = []
        stale: list[dict[str, Any]] = []
        foreign: list[dict[str, Any]] = []
        here = {name: self.pods[(key[0], name)] for name in self.live.get(key, ()) if (key[0], name) in self.pods}
        names = {pod_name(job, r) for r in [*replicas(job), *(step(s.name) for s in job.spec.initializers or [])]}
        for p in here.values():
            if owned_by(p, job):
                pods.append(p)
            elif left_by_earlier(p, job) and p["metadata"]["name"] in names:
                stale.append(p)
            else:
                foreign.append(p)
        since, memory.gone = memory.gone, {}
        gone = [p for name, p in since.items() if name not in here and controller_uid(p) == job.metadata.uid]
        return pods, stale, foreign, gone

    @staticmethod
    def keep_undecided(decided: TorchJob, memory: JobMemory, gone: list[dict[str, Any]], seal: Seal) -> None:
        """A deleted pod whose attempt the decision did not move on (a policy's timeout holds it
        back) is shown to core again on the next reconcile; one that was decided on is dropped."""
        status = decided.status
        if status is None or status.finished:
            return
        kept = {}
        for p in gone:
            obs = observe_pod(decided, p, seal)
            current = status.replicas.get(obs.replica.name) if obs is not None else None
            if obs is not None and current is not None and current.attempt == obs.attempt:
                kept[p["metadata"]["name"]] = p
        memory.gone.update(kept)  # beside any deleted since this reconcile began (it awaited in between)
