"""A job's pods as its last round saw them, kept between rounds for a big job, so that a round reads
again only the pods that changed since: a round after one pod event of a job of 4,096 pods unpacks
and observes that pod, not 4,096 (docs/explanation/performance.md, "One job of 4,096 pods").

What is kept of each pod depends on the pod and the job's spec only (whose it is, how core sees it,
whether it is leaving or stopping in place), so it holds until the pod's next event (its name
marked by the controller: `JobSeen.dirty`) or a change of the job's spec or uid (all read again).
The pod itself is kept packed (the cache's own bytes while it does not change): the few a round
acts on are unpacked as they were observed."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.kube.controller.round.observe import Seen, observe_one
from torchjob.kube.machinery.informer import unpack, version_of
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels.ownership import left_by_earlier, owned_by

# A job with fewer live pods is read whole each round, its pods' observations not kept: 10,000 small
# jobs keep nothing more (the operator's memory target), and a round of 4 pods costs little anyway.
KEEP_FROM = 64


class Whose(enum.Enum):
    OWN = "own"  # the job's: observed, acted on
    STALE = "stale"  # an earlier job's of its name and kind, named as this job's: deleted
    FOREIGN = "foreign"  # labelled as the job's, but not: left alone, said once


@dataclass(slots=True)
class PodSeen:
    rv: int
    blob: bytes  # the pod as it was observed, packed (informer.unpack)
    whose: Whose
    seen: Seen = (None, None)  # how core sees it (observe.observe_one), for the job's own
    going: dict[str, Any] | None = None  # the pod, while it is on its way out (leaving.py reads it)
    stop_pending: dict[str, Any] | None = None  # the pod, while a stop asked in place is pending
    in_place: bool = False  # its spec runs the entry point (objects/inplace.py)


def see(job: TorchJob, pod: dict[str, Any], blob: bytes, seal: inplace.Seal, names: Callable[[], set[str]]) -> PodSeen:
    """One pod read again: whose it is (`names`: the job's pod names, asked only of an earlier job's
    pod) and, if the job's, what a round reads of it."""
    meta = pod["metadata"]
    if not owned_by(pod, job):
        stale = left_by_earlier(pod, job) and meta["name"] in names()
        return PodSeen(version_of(blob), blob, Whose.STALE if stale else Whose.FOREIGN)
    here = inplace.in_place(pod, seal) is not None
    # whether a stop is pending does not depend on the time (only how long it has left does)
    stopping = here and inplace.stop_overdue(pod, datetime.now(UTC), seal) is not None
    return PodSeen(version_of(blob), blob, Whose.OWN, observe_one(job, pod, seal),
                   going=pod if meta.get("deletionTimestamp") else None,
                   stop_pending=pod if stopping else None, in_place=here)


@dataclass
class JobSeen:
    """One job's pods as seen (by pod name), for the job's `shape` (its uid and spec); `dirty`: the
    names whose pods changed since (the controller marks them)."""

    shape: tuple[str | None, bytes]
    own: dict[str, PodSeen] = field(default_factory=dict)
    others: dict[str, PodSeen] = field(default_factory=dict)  # stale and foreign: not the job's
    dirty: set[str] = field(default_factory=set)

    def read(self, name: str, blob: bytes | None, again: Callable[[bytes], PodSeen]) -> None:
        """The pod `name` as the cache has it now (`blob`; None: gone), read `again` unless its version
        is the one seen."""
        old = self.own.get(name) or self.others.get(name)
        if blob is None:
            self.own.pop(name, None)
            self.others.pop(name, None)
            return
        if old is not None and old.rv and old.rv == version_of(blob):
            return
        seen = again(blob)
        (self.own if seen.whose is Whose.OWN else self.others)[name] = seen
        (self.others if seen.whose is Whose.OWN else self.own).pop(name, None)


@dataclass
class JobPods:
    """What a round has of its job's pods: the job's own (as seen), an earlier job's left named as
    its (stale), others labelled as its (foreign), and those deleted since (gone)."""

    own: dict[str, PodSeen]
    stale: list[dict[str, Any]]
    foreign: list[dict[str, Any]]
    gone: list[dict[str, Any]]

    def observed(self, job: TorchJob, seal: inplace.Seal) -> Iterator[Seen]:
        """Each pod as core sees it: the job's own (as kept), then those gone (observe.world's order)."""
        yield from (s.seen for s in self.own.values())
        yield from (observe_one(job, p, seal, was_deleted=True) for p in self.gone)

    def pod(self, name: str) -> dict[str, Any] | None:
        """The job's own pod of that name as it was observed (None: none)."""
        seen = self.own.get(name)
        return unpack(seen.blob) if seen is not None else None

    def going(self) -> list[dict[str, Any]]:
        return [s.going for s in self.own.values() if s.going is not None]

    def stop_pending(self) -> list[dict[str, Any]]:
        return [s.stop_pending for s in self.own.values() if s.stop_pending is not None]

    def in_place(self, but: Collection[str] = ()) -> list[dict[str, Any]]:
        """The job's own pods restarting in place (objects/inplace.py) as observed, but those named."""
        return [unpack(s.blob) for name, s in self.own.items() if s.in_place and name not in but]
