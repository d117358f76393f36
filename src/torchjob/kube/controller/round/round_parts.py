"""What a round is wired with and hands on: a kind's caches, its link to progress, and what a round
decided (the steps of reconciler.py that carry it out take it whole)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.core.round.reconcile import Plan
from torchjob.kube.controller.pods.pod_index import PodIndex
from torchjob.kube.controller.round.memory import JobMemory, Memories
from torchjob.kube.machinery.informer import Informer, Key
from torchjob.kube.objects.front import inplace
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.tls import Trust
from torchjob.kube.progress.waits import PodWaits


@dataclass(frozen=True)
class JobCaches:
    """A kind's informers, its pods indexed by job, and what this process keeps of each job between rounds
    (the controller's memories, which it forgets with the job)."""

    jobs: Informer
    pods: Informer
    services: Informer
    index: PodIndex
    memories: Memories


@dataclass(frozen=True)
class ProgressLink:
    """What a round needs of progress: the reports' books (for stalls), the endpoint's CAs as the pods
    must trust them now (renewed in place: tls.keep), published in each namespace where pods are made,
    and the seal of what the operator writes on pods restarting in place (objects/inplace.py; the
    receiver seals what it records with the same), and the endpoint's threads waiting for a pod to change
    (the controllers tell them of each pod event)."""

    books: Books
    trust: Trust
    seal: inplace.Seal = field(default_factory=lambda: inplace.Seal(secrets.token_bytes(32)))
    waits: PodWaits = field(default_factory=PodWaits)


@dataclass(frozen=True)
class Decision:
    """What a round decided, and on what: handed to the steps that carry it out."""

    raw: dict[str, Any]
    job: TorchJob
    key: Key
    memory: JobMemory
    plan: Plan
    now: datetime
