"""A kind's controller: informers on its jobs and the Pods and Services they own, a work queue
keyed by job, and workers that run one round per key at a time (reconciler.py). The controller
alone calls the queue: it follows the `Result` a round returns, and a round that fails is retried
with a per-job backoff (kube/machinery/queue.py) and said in an Event. It holds every job's memory
(memory.py) and forgets all of a deleted job's in one place (`_forget`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from lightkube.core.exceptions import ApiError

from torchjob.api.status import EventType, Reason
from torchjob.kube.controller.pods.pod_index import PodIndex
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.round.gates import KueueGate, PodGroupGate, ThirdPartyWatches
from torchjob.kube.controller.round.memory import Memories
from torchjob.kube.controller.round.outcome import Result
from torchjob.kube.controller.round.reconciler import Reconciler
from torchjob.kube.controller.round.round_parts import JobCaches, ProgressLink
from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.machinery.informer import Informer, Key, key_of, metadata_only, pod_cached, whole
from torchjob.kube.machinery.queue import WorkQueue
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.progress.view import KindCaches
from torchjob.kube.served.kinds import TORCHJOB, ServedKind

log = logging.getLogger("torchjob.kube")
GONE_RECHECK_S = 1.0  # a job deleted while its round wrote: looked at once more, to forget it
# A big job's rounds no closer than this per pod (0.2 s at 4,096): each costs O(pods) whatever changed (core's
# decision), and back to back through a start or a gang restart they took 60 % of a core from the API server,
# the scheduler and the nodes making the job's pods (bench/operator_scale.py --job-pods 4096).
REST_PER_POD_S = 50e-6


def job_gone(e: Exception, key: Key, plural: str = TORCHJOB.plural) -> bool:
    """The API server answered that this very job does not exist (any more)."""
    details = e.status.details if isinstance(e, ApiError) and e.status is not None else None
    return status_code(e) == 404 and details is not None and details.kind == plural and details.name == key[1]


def cached_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as the cache keeps it (informer.pod_cached), and what of its spec says whether it restarts
    in place (objects/inplace.py: only its spec, which nobody changes, says so)."""
    out = pod_cached(pod)
    spec = inplace.kept_spec(pod)
    if spec:
        out["spec"] = {**out.get("spec", {}), **spec}
    return out


def owner_key(obj: dict[str, Any]) -> Key | None:
    """The job an object of ours belongs to, by its label."""
    job = obj["metadata"].get("labels", {}).get(LABEL_JOB)
    return (obj["metadata"].get("namespace") or "default", job) if job else None


class Controller:
    """One kind's controller. `progress` links it to the progress books and CA (None: no endpoint)."""

    def __init__(self, api: ApiProtocol, config: OperatorConfig, *, kind: ServedKind = TORCHJOB,
                 progress: ProgressLink | None = None) -> None:
        self.api, self.kind, self.config, self.progress = api, kind, config, progress
        namespace = config.namespace
        self.queue = WorkQueue(kind.plural.removesuffix("s"))  # "torchjob", "pytorchjob": the metrics label
        self.jobs = Informer(api, kind.kind, namespace, self._on_job, transform=whole)
        self.pods = Informer(api, "Pod", namespace, self._on_pod, labels=kind.pod_labels, transform=cached_pod)
        self.services = Informer(api, "Service", namespace, self._on_owned, labels=kind.pod_labels,
                                 transform=metadata_only)
        self.index = PodIndex(self.pods.cache)
        self.memories = Memories()
        self.watches = ThirdPartyWatches(api, namespace, self._on_owned)
        self.reconciler = Reconciler(
            api=api, kind=kind, caches=JobCaches(self.jobs, self.pods, self.services, self.index, self.memories),
            kueue_gate=KueueGate(api, self.jobs, self.watches, kind),
            podgroup_gate=PodGroupGate(api, self.watches), config=config, progress=progress, spawn=self._spawn)
        self.background: set[asyncio.Task[None]] = set()  # held so they are not collected mid-flight
        self.ready = asyncio.Event()

    def caches(self) -> KindCaches:
        """The read-only view of this kind's caches that progress reads."""
        return KindCaches(self.kind, self.jobs.cache, self.pods.cache)

    def remember(self, stored: dict[str, Any]) -> None:
        """A job as this process just wrote it: its next round starts from that version."""
        self.jobs.remember(stored)

    # --- events from the informers ---

    def _on_job(self, obj: dict[str, Any]) -> None:
        self.queue.add(key_of(obj))

    def _on_pod(self, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        if key is None:
            return
        pods = self.index.live.setdefault(key, set())
        name = obj["metadata"]["name"]
        if key_of(obj) in self.pods.cache:
            pods.add(name)
        elif name in pods:
            pods.discard(name)
            self.memories.of(key).gone[name] = obj  # its last state: an eviction, maybe
        self.index.changed(key, name)
        if not pods:
            del self.index.live[key]
            self.index.drop(key)
        self.queue.add(key)
        if self.progress is not None:  # a pod's entry point waiting for its verdict learns it now (a long poll)
            self.progress.waits.changed((self.kind.plural, key[0], name))

    def _on_owned(self, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        if key is not None:
            self.queue.add(key)

    # --- running ---

    async def run(self) -> None:
        informers = (self.jobs, self.pods, self.services)
        tasks = [asyncio.create_task(i.run()) for i in informers]
        synced = asyncio.create_task(self._synced(informers))
        try:
            # An informer that dies before its first list (it only returns by raising) must stop
            # the operator, not leave it waiting forever, never ready.
            first: list[asyncio.Future[Any]] = [synced, *tasks]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done():
                    t.result()
                    raise RuntimeError("an informer stopped before its caches synced")
            self.ready.set()
            log.info("caches synced: %d jobs, %d pods", len(self.jobs.cache), len(self.pods.cache))
            tasks += [asyncio.create_task(self._worker()) for _ in range(self.config.workers)]
            await asyncio.gather(*tasks)
        finally:
            synced.cancel()
            for t in tasks:
                t.cancel()
            self.watches.cancel()

    @staticmethod
    async def _synced(informers: tuple[Informer, ...]) -> None:
        for i in informers:
            await i.synced.wait()

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            # Shielded: a stopping operator cancels its workers, but lets what they started finish (drain).
            await asyncio.shield(self._spawn(self.process(key)))

    async def process(self, key: Key) -> None:
        """One round of `key` as a worker runs it: the queue follows its result, or its failure."""
        metrics.ACTIVE_WORKERS.labels(metrics.CONTROLLER).inc()
        start = time.monotonic()
        try:
            result = await self.reconciler.reconcile(key)
            self.queue.succeeded(key)
            seen = self.index.kept.get(key)  # a big job's pods (seen_pods.py): its next round paced by its size
            self.queue.rest(key, REST_PER_POD_S * len(seen.own) if seen is not None else 0.0)
            self._follow(key, result)
            metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "success").inc()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if job_gone(e, key, self.kind.plural):
                # Deleted while this reconcile wrote for it: not an error. Its delete event comes
                # through the watch; one more look then finds nothing left to do.
                log.debug("reconcile %s/%s: the job is gone", key[0], key[1])
                self.queue.add_after(key, GONE_RECHECK_S)
                return
            metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "error").inc()
            metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
            delay = self.queue.add_rate_limited(key)
            failures = self.queue.failures(key)
            log.warning("reconcile %s/%s failed (%d in a row; next try in %.1fs): %s", key[0], key[1], failures,
                        delay, e)
            raw = self.jobs.cache.get(key)
            if raw is not None:  # said where `kubectl describe` shows it; best effort (the API may be down)
                self._spawn(self.api.event(raw, EventType.WARNING, Reason.RECONCILE_ERROR,
                                           f"reconcile failed ({failures} in a row; next try in {delay:.1f}s): {e}"))
        finally:
            metrics.RECONCILE_TIME.labels(metrics.CONTROLLER).observe(time.monotonic() - start)
            metrics.ACTIVE_WORKERS.labels(metrics.CONTROLLER).dec()
            self.memories.settle(key)
            self.queue.done(key)

    def _follow(self, key: Key, result: Result) -> None:
        """What a round asked of the queue."""
        if result.forget:
            self._forget(key)
        if result.requeue:
            self.queue.add(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)

    def _forget(self, key: Key) -> None:
        """A deleted job: everything kept for it goes (its pods stay indexed until they go: a new job
        of that name must see them). The progress book is the endpoint's, shared with its receiver,
        and keyed by kind too."""
        self.memories.forget(key)
        self.index.drop(key)
        self.queue.forget(key)
        if self.progress is not None:
            self.progress.books.forget(self.kind.plural, key)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def drain(self, timeout_s: float) -> int:
        """After `run` is cancelled: let reconciles in flight and the writes they left behind (events,
        force deletes) finish, up to timeout_s; returns how many were cut short."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.background and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self.background), timeout=left)
        cut = len(self.background)
        for t in list(self.background):
            t.cancel()
        return cut
