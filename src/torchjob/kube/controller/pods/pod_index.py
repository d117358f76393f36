"""Each job's pods, as the pod informer has them, split the way a round needs them: the job's own,
those an earlier job of its name left, those that are nobody's business of ours, and those deleted
since (kept in the job's memory until core has decided on them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from torchjob.api.model import TorchJob
from torchjob.core.round.initializers import step
from torchjob.core.shape.topology import replicas
from torchjob.kube.controller.pods.seen_pods import KEEP_FROM, JobPods, JobSeen, Whose, see
from torchjob.kube.controller.round.memory import JobMemory
from torchjob.kube.controller.round.observe import observe_pod
from torchjob.kube.machinery.informer import Key, Packed, unpack
from torchjob.kube.objects.front.inplace import Seal
from torchjob.kube.objects.labels import pod_name
from torchjob.kube.objects.labels.ownership import controller_of


def controller_uid(obj: dict[str, Any]) -> str | None:
    owner = controller_of(obj)
    return owner.get("uid") if owner is not None else None


@dataclass
class PodIndex:
    """The pods of each job, from the pod informer: their names by job, the pods themselves read
    from its cache (packed: not held twice), and for a big job what its last round saw of each
    (seen_pods.py: only those changed since are read again). Those deleted since are in the job's
    memory, kept until core has decided on them."""

    pods: Packed  # the pod informer's cache
    live: dict[Key, set[str]] = field(default_factory=dict)
    kept: dict[Key, JobSeen] = field(default_factory=dict)  # a big job's pods as seen (KEEP_FROM)

    def changed(self, key: Key, name: str) -> None:
        """A pod of the job changed, came or went (the controller's pod events): read again next round."""
        seen = self.kept.get(key)
        if seen is not None:
            seen.dirty.add(name)

    def drop(self, key: Key) -> None:
        """The job has no pod left (or is forgotten): nothing kept of its pods."""
        self.kept.pop(key, None)

    def split(self, raw: dict[str, Any], job: TorchJob, key: Key, memory: JobMemory, seal: Seal) -> JobPods:
        """The job's pods; pods of an earlier job of the same name and kind, named as this job's
        (left by it); pods labelled as the job's that are neither (not ours to touch); the job's pods
        deleted since. Read from what the last round saw of them, the changed ones read again."""
        live = self.live.get(key, set())
        shape = (job.metadata.uid, msgspec.json.encode(raw.get("spec")))
        seen = self.kept.pop(key, None)
        if seen is None or seen.shape != shape:
            seen, dirty = JobSeen(shape), live
        else:
            dirty, seen.dirty = seen.dirty, set()
        names: set[str] = set()

        def job_names() -> set[str]:  # asked only of an earlier job's pod, once a round
            if not names:
                made = [*replicas(job), *(step(s.name) for s in job.spec.initializers or [])]
                names.update(pod_name(job, r) for r in made)
            return names

        for name in dirty:
            blob = self.pods.blob((key[0], name)) if name in live else None
            seen.read(name, blob, lambda b: see(job, unpack(b), b, seal, job_names))
        if len(live) >= KEEP_FROM:
            self.kept[key] = seen
        since, memory.gone = memory.gone, {}
        gone = [p for name, p in since.items() if name not in live and controller_uid(p) == job.metadata.uid]
        others = [(s.whose, unpack(s.blob)) for s in seen.others.values()]
        return JobPods(seen.own, [p for w, p in others if w is Whose.STALE],
                       [p for w, p in others if w is Whose.FOREIGN], gone)

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
