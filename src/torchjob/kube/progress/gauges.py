"""Prometheus gauges, at scrape time: each job's progress and the time since its last report, and
from the operator's caches the jobs by state and their pods by phase (what the chart's Grafana
dashboard draws)."""

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
        jobs = GaugeMetricFamily("torchjob_jobs", "Jobs by kind and state (the last true condition; Created: none yet)",
                                 labels=["kind", "state"])
        pods = GaugeMetricFamily("torchjob_job_pods", "Pods of jobs by kind and phase", labels=["kind", "phase"])
        for caches in list(self.caches.values()):
            kind = caches.kind.kind.rpartition("/")[2]
            states: dict[str, int] = {}
            for job in list(caches.jobs.values()):
                conditions = (job.get("status") or {}).get("conditions") or []
                state = next((c["type"] for c in reversed(conditions) if c.get("status") == "True"), "Created")
                states[state] = states.get(state, 0) + 1
            for state, n in sorted(states.items()):
                jobs.add_metric([kind, state], n)
            phases: dict[str, int] = {}
            for pod in list(caches.pods.values()):
                phase = (pod.get("status") or {}).get("phase") or "Pending"
                phases[phase] = phases.get(phase, 0) + 1
            for phase, n in sorted(phases.items()):
                pods.add_metric([kind, phase], n)
        yield jobs
        yield pods

    def describe(self) -> list[Any]:
        return []


def register(books: Books, caches: CachesView) -> ProgressCollector:
    collector = ProgressCollector(books, caches)
    REGISTRY.register(collector)
    return collector
