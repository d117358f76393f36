"""The operator's books go on from the history in a job's status (an operator that restarted
starts with empty books): the curve is not lost, and it stays within the Kubernetes bounds."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.jobs import job_data
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.view import KindCaches
from torchjob.kube.served.kinds import TORCHJOB
from torchjob.progress.book import Book
from torchjob.progress.history import KUBE_CAPACITY, KUBE_SERIES
from torchjob.progress.protocol import Report
from torchjob.progress.server import Reporter


def test_a_new_book_goes_on_from_the_history_in_the_status() -> None:
    now = datetime.now(UTC)
    before = Book(KUBE_CAPACITY, KUBE_SERIES)
    for step in range(1, 1001):
        before.record("master-0", 0, Report(step=step, metrics={"loss": str(1 / step)}), now)
    progress = before.progress()
    assert progress is not None and progress.history is not None
    raw = {**job_data("j"), "status": {"progress": progress.model_dump(mode="json", exclude_none=True)}}
    raw["metadata"]["namespace"] = "ns"
    caches = {"torchjobs": KindCaches(TORCHJOB, {("ns", "j"): raw}, {})}
    book = Books().open(Reporter("ns", "j", "master-0", 0), caches)  # the restarted operator's first report
    assert book is not None
    book.record("master-0", 0, Report(step=1001, metrics={"loss": "0.0009"}), now)
    before.record("master-0", 0, Report(step=1001, metrics={"loss": "0.0009"}), now)
    after = book.progress()
    assert after is not None and after.history is not None
    assert after.history == before.progress().history  # type: ignore[union-attr]
    assert after.history.steps[0] < after.history.stride and after.history.steps[-1] == 1001  # from the start on
    assert len(after.history.steps) <= KUBE_CAPACITY


def test_a_status_without_history_starts_one() -> None:
    raw = {**job_data("j"), "status": {}}
    raw["metadata"]["namespace"] = "ns"
    caches = {"torchjobs": KindCaches(TORCHJOB, {("ns", "j"): raw}, {})}
    book = Books().open(Reporter("ns", "j", "master-0", 0), caches)
    assert book is not None
    book.record("master-0", 0, Report(step=5, metrics={"loss": "1"}), datetime.now(UTC))
    p = book.progress()
    assert p is not None and p.history is not None and p.history.steps == [5]
