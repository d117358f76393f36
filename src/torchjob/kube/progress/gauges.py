"""Prometheus gauges of each job's progress and of the time since its last report, at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

from torchjob.kube.progress.books import Books
from torchjob.kube.progress.view import CachesView


class ProgressCollector(Collector):
    def __init__(self, books: Books, caches: CachesView) -> None:
        self.books, self.caches = books, caches

    def collect(self) -> Iterator[GaugeMetricFamily]:
        percent = GaugeMetricFamily("torchjob_job_progress_percent", "A job's progress as its replicas report it",
                                    labels=["namespace", "job", "kind"])
        since = GaugeMetricFamily("torchjob_job_seconds_since_progress_report",
                                  "Seconds since a job's latest progress report", labels=["namespace", "job", "kind"])
        now = datetime.now(UTC)
        for (plural, ns, name), book in list(self.books.books.items()):
            p = book.progress(history=False)  # a scrape reads two numbers of each job
            caches = self.caches.get(plural)
            if p is None or caches is None:
                continue
            kind = caches.kind.kind.rpartition("/")[2]  # TorchJob, PyTorchJob
            if p.percent is not None:
                percent.add_metric([ns, name, kind], p.percent)
            if p.lastReportTime is not None:
                since.add_metric([ns, name, kind], (now - p.lastReportTime).total_seconds())
        yield percent
        yield since

    def describe(self) -> list[Any]:
        return []


def register(books: Books, caches: CachesView) -> ProgressCollector:
    collector = ProgressCollector(books, caches)
    REGISTRY.register(collector)
    return collector
