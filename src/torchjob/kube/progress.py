"""The operator's progress endpoint: HTTPS, a projected service-account token per pod with the
job's audience, checked by the API server's TokenReview, and `status.progress` written at most once
per interval per job.

Authentication follows Kubeflow Trainer (`pkg/statusserver/auth.go` @8c0f505: a projected token
whose audience names the job, the namespace checked), by TokenReview instead of OIDC discovery, so
that it needs no access to the issuer's keys. A pod-bound token (what the kubelet projects) carries
the pod's name and uid (`authentication.kubernetes.io/pod-name`, `pod-uid` in the review's extra):
that says which replica attempt reports. Reviews are cached by the token's hash (positive for
REVIEW_TTL_S, negative for DENY_TTL_S) and at most REVIEWS_IN_FLIGHT run at once, so a flood of
bad tokens costs the API server little.

Reports never wait on the API server for anything but that review: they go to the job's book (in
memory); a writer patches `status.progress` of the jobs whose book changed every write interval.
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
from torchjob.kube import metrics
from torchjob.kube import render as kr
from torchjob.kube.client import Api
from torchjob.progress.book import Book
from torchjob.progress.server import Reporter, audience

if TYPE_CHECKING:
    from torchjob.kube.controller import Controller

log = logging.getLogger("torchjob.kube")
REVIEW_TTL_S = 300.0
DENY_TTL_S = 10.0
REVIEWS_IN_FLIGHT = 8
REVIEW_TIMEOUT_S = 5.0
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"

Key = tuple[str, str]


class ProgressHub:
    """The Receiver the endpoint calls (from its threads) and the books the controller reads."""

    def __init__(self, api: Api, controller: Controller, loop: asyncio.AbstractEventLoop,
                 write_interval_s: float = 5.0) -> None:
        self.api, self.controller, self.loop = api, controller, loop
        self.write_interval_s = write_interval_s
        self.books: dict[Key, Book] = {}
        self.written: dict[Key, int] = {}  # the book version last written to the job's status
        self.reviews: dict[str, tuple[Reporter | None, float]] = {}
        self._limit = asyncio.Semaphore(REVIEWS_IN_FLIGHT)

    # --- Receiver (called from the endpoint's threads) ---

    def authorize(self, namespace: str, job: str, credentials: str) -> Reporter | None:
        if credentials.count(".") != 2:  # not a JWT: no TokenReview for it
            return None
        aud = audience(namespace, job)
        key = hashlib.sha256(f"{aud}\0{credentials}".encode()).hexdigest()
        cached = self.reviews.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        who = asyncio.run_coroutine_threadsafe(self._review(credentials, namespace, job), self.loop).result(
            REVIEW_TIMEOUT_S + 1)
        self.reviews[key] = (who, time.monotonic() + (REVIEW_TTL_S if who else DENY_TTL_S))
        if len(self.reviews) > 100_000:  # expired entries go now and then
            now = time.monotonic()
            self.reviews = {k: v for k, v in self.reviews.items() if v[1] > now}
        return who

    async def _review(self, token: str, namespace: str, job: str) -> Reporter | None:
        async with self._limit:
            status = await asyncio.wait_for(self.api.review_token(token, audience(namespace, job)), REVIEW_TIMEOUT_S)
        metrics.PROGRESS_REVIEWS.labels("authenticated" if status.get("authenticated") else "denied").inc()
        if not status.get("authenticated") or audience(namespace, job) not in (status.get("audiences") or []):
            return None
        user = status.get("user") or {}
        parts = str(user.get("username", "")).split(":")
        if parts[:2] != ["system", "serviceaccount"] or len(parts) != 4 or parts[2] != namespace:
            return None  # a token of another namespace, or not a service account's
        extra = user.get("extra") or {}
        pod_name, pod_uid = (extra.get(POD_NAME) or [""])[0], (extra.get(POD_UID) or [""])[0]
        pod = self.controller.pods.cache.get((namespace, pod_name))
        if pod is None or pod["metadata"].get("uid") != pod_uid:
            return None  # not bound to a pod, or to one the operator does not know (of another job)
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if labels.get(kr.LABEL_JOB) != job:
            return None
        replica = f"{labels.get(kr.LABEL_TYPE)}-{labels.get(kr.LABEL_INDEX)}"
        return Reporter(namespace, job, replica, int(annotations.get(kr.ANNOTATION_ATTEMPT, "0")))

    def book(self, reporter: Reporter) -> Book | None:
        key = (reporter.namespace, reporter.job)
        book = self.books.get(key)
        if book is None:
            if key not in self.controller.jobs.cache:
                return None
            book = self.books.setdefault(key, Book())
        return book

    def received(self, reporter: Reporter, first: bool) -> None:
        metrics.PROGRESS_REPORTS.inc()
        if first:  # core starts judging this attempt: reconcile now, so it schedules the deadline
            self.loop.call_soon_threadsafe(self.controller.queue.add, (reporter.namespace, reporter.job))

    # --- for the controller ---

    def with_reports(self, key: Key, world: World) -> World:
        """The world with each running attempt's last report (the fact `core` judges stalls by)."""
        book = self.books.get(key)
        if book is None:
            return world
        seen = {name: replace(o, last_report=book.last_report(name, o.attempt)) if o.phase is Phase.RUNNING else o
                for name, o in world.replicas.items()}
        return replace(world, replicas=seen)

    def forget(self, key: Key) -> None:
        self.books.pop(key, None)
        self.written.pop(key, None)

    async def write_loop(self) -> None:
        """Every interval, `status.progress` of each job whose book changed: at most one write per job
        per interval, however often its replicas report."""
        while True:
            await asyncio.sleep(self.write_interval_s)
            for key, book in list(self.books.items()):
                if key not in self.controller.jobs.cache:
                    self.forget(key)
                    continue
                if self.written.get(key) == book.version:
                    continue
                version, progress = book.version, book.progress()
                if progress is None:
                    continue
                try:
                    stored = await self.api.patch_status(key[1], key[0], {"progress": progress.model_dump(
                        mode="json", exclude_none=True)})
                except Exception as e:  # the job went, or the API server is away: the next round tries again
                    log.warning("progress of %s/%s not written: %s", key[0], key[1], e)
                    continue
                self.controller.jobs.remember(stored)
                self.written[key] = version
                metrics.PROGRESS_WRITES.inc()


class ProgressCollector(Collector):
    """Prometheus gauges of each job's progress and of the time since its last report, at scrape time."""

    def __init__(self, hub: ProgressHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[GaugeMetricFamily]:
        percent = GaugeMetricFamily("torchjob_job_progress_percent", "A job's progress as its replicas report it",
                                    labels=["namespace", "job"])
        since = GaugeMetricFamily("torchjob_job_seconds_since_progress_report",
                                  "Seconds since a job's latest progress report", labels=["namespace", "job"])
        now = datetime.now(UTC)
        for (ns, name), book in list(self.hub.books.items()):
            p = book.progress()
            if p is None:
                continue
            if p.percent is not None:
                percent.add_metric([ns, name], p.percent)
            if p.lastReportTime is not None:
                since.add_metric([ns, name], (now - p.lastReportTime).total_seconds())
        yield percent
        yield since

    def describe(self) -> list[Any]:
        return []


def register(hub: ProgressHub) -> None:
    REGISTRY.register(ProgressCollector(hub))
