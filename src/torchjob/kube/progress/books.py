"""Each job's book of progress reports (per kind and job), and what the stall decision reads from
them: the last report of each running replica attempt."""

from __future__ import annotations

from datetime import datetime

from torchjob.kube.progress.view import BookKey, CachesView, Key
from torchjob.progress.book import Book
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
            if (reporter.namespace, reporter.job) not in caches[reporter.plural].jobs:
                return None
            book = self.books.setdefault(key, Book())
        return book

    def last_report(self, plural: str, key: Key, replica: str, attempt: int) -> datetime | None:
        """When this replica attempt last reported (the fact `core` judges stalls by); None: never."""
        book = self.books.get((plural, *key))
        return book.last_report(replica, attempt) if book is not None else None

    def forget(self, plural: str, key: Key) -> None:
        self.books.pop((plural, *key), None)
        self.written.pop((plural, *key), None)
