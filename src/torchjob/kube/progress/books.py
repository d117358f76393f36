"""Each job's book of progress reports (per kind and job), and what the stall decision reads from
them: the last report of each running replica attempt."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from torchjob.api.status import JobStatus, MetricHistory
from torchjob.kube.progress.view import BookKey, CachesView, Key
from torchjob.progress.book import Book
from torchjob.progress.history import KUBE_CAPACITY, KUBE_SERIES
from torchjob.progress.server import Reporter


class Books:
    def __init__(self) -> None:
        self.books: dict[BookKey, Book] = {}
        self.written: dict[BookKey, int] = {}  # the book version last written to the job's status

    def open(self, reporter: Reporter, caches: CachesView) -> Book | None:
        """The reporting job's book, made at its first report; None for a job not (or no longer) cached."""
        key = (reporter.plural, reporter.namespace, reporter.job)
        book = self.books.get(key)
        if book is None:
            kind = caches[reporter.plural]
            raw = kind.jobs.get((reporter.namespace, reporter.job))
            if raw is None:
                return None
            # the history goes on from the one in the job's status (this operator may have restarted)
            book = self.books.setdefault(key, Book(KUBE_CAPACITY, KUBE_SERIES, saved_history(kind.kind.status_of, raw)))
        return book

    def last_report(self, plural: str, key: Key, replica: str, attempt: int) -> datetime | None:
        """When this replica attempt last reported (the fact `core` judges stalls by); None: never."""
        book = self.books.get((plural, *key))
        return book.last_report(replica, attempt) if book is not None else None

    def still(self, plural: str, key: Key, replica: str, attempt: int) -> tuple[datetime, datetime] | None:
        """Since when none of this replica attempt's ranks moved, and when its pod said so (None: never)."""
        book = self.books.get((plural, *key))
        return book.still(replica, attempt) if book is not None else None

    def reported_done(self, plural: str, key: Key, replica: str, attempt: int) -> bool:
        """Whether this replica attempt's latest report said its work is complete (in this operator's
        memory: one restarted since knows only the reports it received)."""
        book = self.books.get((plural, *key))
        return book.reported_done(replica, attempt) if book is not None else False

    def forget(self, plural: str, key: Key) -> None:
        self.books.pop((plural, *key), None)
        self.written.pop((plural, *key), None)


def saved_history(status_of: Callable[[dict[str, Any]], JobStatus], raw: dict[str, Any]) -> MetricHistory | None:
    try:
        progress = status_of(raw).progress
    except ValueError:  # a status this operator cannot read: the history starts afresh
        return None
    return progress.history if progress is not None else None
