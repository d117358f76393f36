"""The narrow, read-only view of the operator's caches that progress needs, per kind served: a
job exists, a pod as cached. The controller room implements it; progress never sees a controller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchjob.kube.served.kinds import ServedKind

Key = tuple[str, str]  # a job or a pod of one kind: (namespace, name)
BookKey = tuple[str, str, str]  # (plural, namespace, name)


@dataclass(frozen=True)
class KindCaches:
    """One kind's caches as progress reads them (the informers' own dicts, never written here)."""

    kind: ServedKind
    jobs: Mapping[Key, dict[str, Any]]
    pods: Mapping[Key, dict[str, Any]]


CachesView = Mapping[str, KindCaches]  # by plural ("torchjobs", "pytorchjobs")
