"""The operator's progress endpoint: HTTPS, a projected service-account token per pod with the
job's audience, checked by the API server's TokenReview, and the job's progress written at most once
per interval per job. One hub serves every kind the operator serves (a TorchJob's reports and a
PyTorchJob's come by their own paths, with their own audiences); books are per kind and job.

Authentication follows Kubeflow Trainer (`pkg/statusserver/auth.go` @8c0f505: a projected token
whose audience names the job, the namespace checked), by TokenReview instead of OIDC discovery, so
that it needs no access to the issuer's keys. A pod-bound token (what the kubelet projects) carries
the pod's name and uid (`authentication.kubernetes.io/pod-name`, `pod-uid` in the review's extra):
that says which replica attempt reports. Reviews are cached by the token's hash (positive for
REVIEW_TTL_S, negative for DENY_TTL_S) and at most REVIEWS_IN_FLIGHT run at once, so a flood of
bad tokens costs the API server little.

Reports never wait on the API server for anything but that review: they go to the job's book (in
memory); a writer patches the progress of the jobs whose book changed every write interval (where
the kind keeps it: `status.progress` of a TorchJob, `status.torchjob.progress` of a PyTorchJob).
The stall decision reads each replica attempt's last report from the book (`with_reports`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

from torchjob.core.reconcile import Phase, World
from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import Api
from torchjob.kube.objects import pods as kr
from torchjob.progress.book import Book
from torchjob.progress.server import Reporter, audience

if TYPE_CHECKING:
    from torchjob.kube.controller.controller import Controller

log = logging.getLogger("torchjob.kube")
REVIEW_TTL_S = 300.0
DENY_TTL_S = 10.0
REVIEWS_IN_FLIGHT = 8
REVIEW_TIMEOUT_S = 5.0
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"

Key = tuple[str, str]  # a job of one kind: (namespace, name)
BookKey = tuple[str, str, str]  # (plural, namespace, name)


class ProgressHub:
    """The Receiver the endpoint calls (from its threads) and the books the controller reads."""

    def __init__(self, api: Api, controllers: list[Controller], loop: asyncio.AbstractEventLoop,
                 write_interval_s: float = 5.0) -> None:
        self.api, self.loop = api, loop
        self.controllers = {c.kind.plural: c for c in controllers if c.kind.progress}
        self.write_interval_s = write_interval_s
        self.books: dict[BookKey, Book] = {}
        self.written: dict[BookKey, int] = {}  # the book version last written to the job's status
        self.reviews: dict[str, tuple[Reporter | None, float]] = {}
        self._limit = asyncio.Semaphore(REVIEWS_IN_FLIGHT)

    # --- Receiver (called from the endpoint's threads) ---

    def authorize(self, namespace: str, job: str, credentials: str, plural: str = "torchjobs") -> Reporter | None:
        if credentials.count(".") != 2 or plural not in self.controllers:  # not a JWT, or a kind not served
            return None
        aud = audience(namespace, job, plural)
        key = hashlib.sha256(f"{aud}\0{credentials}".encode()).hexdigest()
        cached = self.reviews.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        who = asyncio.run_coroutine_threadsafe(self._review(credentials, plural, namespace, job), self.loop).result(
            REVIEW_TIMEOUT_S + 1)
        self.reviews[key] = (who, time.monotonic() + (REVIEW_TTL_S if who else DENY_TTL_S))
        if len(self.reviews) > 100_000:  # expired entries go now and then
            now = time.monotonic()
            self.reviews = {k: v for k, v in self.reviews.items() if v[1] > now}
        return who

    async def _review(self, token: str, plural: str, namespace: str, job: str) -> Reporter | None:
        aud = audience(namespace, job, plural)
        async with self._limit:
            status = await asyncio.wait_for(self.api.review_token(token, aud), REVIEW_TIMEOUT_S)
        metrics.PROGRESS_REVIEWS.labels("authenticated" if status.get("authenticated") else "denied").inc()
        if not status.get("authenticated") or aud not in (status.get("audiences") or []):
            return None
        user = status.get("user") or {}
        parts = str(user.get("username", "")).split(":")
        if parts[:2] != ["system", "serviceaccount"] or len(parts) != 4 or parts[2] != namespace:
            return None  # a token of another namespace, or not a service account's
        extra = user.get("extra") or {}
        pod_name, pod_uid = (extra.get(POD_NAME) or [""])[0], (extra.get(POD_UID) or [""])[0]
        pod = self.controllers[plural].pods.cache.get((namespace, pod_name))  # this kind's pods only
        if pod is None or pod["metadata"].get("uid") != pod_uid:
            return None  # not bound to a pod, or to one the operator does not know (of another job or kind)
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(kr.LABEL_JOB) != job:
            return None
        replica = f"{labels.get(kr.LABEL_TYPE)}-{labels.get(kr.LABEL_INDEX)}"
        return Reporter(namespace, job, replica, int(annotations.get(kr.ANNOTATION_ATTEMPT, "0")), plural)

    def book(self, reporter: Reporter) -> Book | None:
        key = (reporter.plural, reporter.namespace, reporter.job)
        book = self.books.get(key)
        if book is None:
            if (reporter.namespace, reporter.job) not in self.controllers[reporter.plural].jobs.cache:
                return None
            book = self.books.setdefault(key, Book())
        return book

    def received(self, reporter: Reporter, first: bool) -> None:
        metrics.PROGRESS_REPORTS.inc()
        if first:  # core starts judging this attempt: reconcile now, so it schedules the deadline
            self.loop.call_soon_threadsafe(self.controllers[reporter.plural].queue.add,
                                           (reporter.namespace, reporter.job))

    # --- for the controller ---

    def with_reports(self, plural: str, key: Key, world: World) -> World:
        """The world with each running attempt's last report (the fact `core` judges stalls by)."""
        book = self.books.get((plural, *key))
        if book is None:
            return world
        seen = {name: replace(o, last_report=book.last_report(name, o.attempt)) if o.phase is Phase.RUNNING else o
                for name, o in world.replicas.items()}
        return replace(world, replicas=seen)

    def forget(self, plural: str, key: Key) -> None:
        self.books.pop((plural, *key), None)
        self.written.pop((plural, *key), None)

    async def write_loop(self) -> None:
        """Every interval, the progress of each job whose book changed: at most one write per job
        per interval, however often its replicas report."""
        while True:
            await asyncio.sleep(self.write_interval_s)
            for key, book in list(self.books.items()):
                plural, ns, name = key
                controller = self.controllers[plural]
                if (ns, name) not in controller.jobs.cache:
                    self.forget(plural, (ns, name))
                    continue
                if self.written.get(key) == book.version:
                    continue
                version, progress = book.version, book.progress()
                if progress is None:
                    continue
                patch = controller.kind.progress_patch(progress.model_dump(mode="json", exclude_none=True))
                try:
                    stored = await self.api.patch_status(name, ns, patch, kind=controller.kind.kind)
                except Exception as e:  # the job went, or the API server is away: the next round tries again
                    log.warning("progress of %s %s/%s not written: %s", controller.kind.kind, ns, name, e)
                    continue
                controller.jobs.remember(stored)
                self.written[key] = version
                metrics.PROGRESS_WRITES.inc()


class ProgressCollector(Collector):
    """Prometheus gauges of each job's progress and of the time since its last report, at scrape time."""

    def __init__(self, hub: ProgressHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[GaugeMetricFamily]:
        percent = GaugeMetricFamily("torchjob_job_progress_percent", "A job's progress as its replicas report it",
                                    labels=["namespace", "job", "kind"])
        since = GaugeMetricFamily("torchjob_job_seconds_since_progress_report",
                                  "Seconds since a job's latest progress report", labels=["namespace", "job", "kind"])
        now = datetime.now(UTC)
        for (plural, ns, name), book in list(self.hub.books.items()):
            p = book.progress()
            controller = self.hub.controllers.get(plural)
            if p is None or controller is None:
                continue
            kind = controller.kind.kind.rpartition("/")[2]  # TorchJob, PyTorchJob
            if p.percent is not None:
                percent.add_metric([ns, name, kind], p.percent)
            if p.lastReportTime is not None:
                since.add_metric([ns, name, kind], (now - p.lastReportTime).total_seconds())
        yield percent
        yield since

    def describe(self) -> list[Any]:
        return []


def register(hub: ProgressHub) -> None:
    REGISTRY.register(ProgressCollector(hub))
