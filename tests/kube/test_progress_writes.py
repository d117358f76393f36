"""The operator's progress writer (no cluster): a job's `status.progress` is written at most once per
write interval however often its replicas report, and not at all when nothing new came."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from torchjob.kube.progress.books import Books
from torchjob.kube.progress.view import KindCaches
from torchjob.kube.progress.writer import ProgressWriter
from torchjob.kube.served.kinds import TORCHJOB
from torchjob.progress.book import Book
from torchjob.progress.protocol import Report

INTERVAL = 0.1


class Api:
    """Records the status patches and the events the writer sends (its only calls)."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []

    async def event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    async def patch_status(self, name: str, namespace: str, status: dict[str, Any],
                           kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]:
        self.writes.append((asyncio.get_running_loop().time(), name, status))
        return {}


def test_status_progress_is_written_at_most_once_per_interval_per_job() -> None:
    async def scenario() -> tuple[Api, float]:
        api = Api()
        books = Books()
        caches = {"torchjobs": KindCaches(TORCHJOB, {("ns", "a"): {}, ("ns", "b"): {}}, {})}
        a, b = Book(), Book()
        books.books.update({("torchjobs", "ns", "a"): a, ("torchjobs", "ns", "b"): b})
        stored: list[tuple[str, dict[str, Any]]] = []
        writer = asyncio.create_task(ProgressWriter(api, caches, books, INTERVAL,  # type: ignore[arg-type]
                                                    on_written=lambda plural, obj: stored.append((plural, obj))).run())
        start = asyncio.get_running_loop().time()
        for step in range(1, 101):  # job a: 8 replicas reporting every 10 ms for 1 s
            for r in range(8):
                a.record(f"worker-{r}", 0, Report(step=step, total=100, percent=float(step)), datetime.now(UTC))
            if step == 1:
                b.record("master-0", 0, Report(step=1), datetime.now(UTC))  # job b: one report, then quiet
            await asyncio.sleep(0.01)
        await asyncio.sleep(3 * INTERVAL)
        writer.cancel()
        return api, asyncio.get_running_loop().time() - start

    api, elapsed = asyncio.run(scenario())
    a = [(t, s) for t, name, s in api.writes if name == "a"]
    b = [s for _, name, s in api.writes if name == "b"]
    assert len(b) == 1  # nothing new after its one report: no more writes
    # 800 reports, a write per interval at most: counted against the time the scenario took (about 1.3 s,
    # but its 100 sleeps of 10 ms stretch on a loaded machine, and the writes with them)
    assert 3 <= len(a) <= elapsed / INTERVAL + 1, (len(a), elapsed)
    assert all(t1 - t0 >= INTERVAL * 0.9 for (t0, _), (t1, _) in itertools.pairwise(a))
    assert a[-1][1]["progress"]["step"] == 100 and a[-1][1]["progress"]["percent"] == 100.0


def test_a_straggler_is_said_once_as_an_event_with_the_write() -> None:
    """The book names worker-1 (1.9x the others' step time over 30 s of reports, times given); the
    writer says it once, as a Warning event on the job, beside the status.progress.stragglers it writes."""
    async def scenario() -> Api:
        api, books, book = Api(), Books(), Book()
        caches = {"torchjobs": KindCaches(TORCHJOB, {("ns", "a"): {}}, {})}
        books.books[("torchjobs", "ns", "a")] = book
        writer = ProgressWriter(api, caches, books, INTERVAL, on_written=lambda plural, obj: None)  # type: ignore[arg-type]
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        for t in range(0, 40):
            for r, pace in {"master-0": 0.1, "worker-0": 0.1, "worker-1": 0.19}.items():
                book.record(r, 0, Report(step=int(t / pace)), t0 + timedelta(seconds=t))
            await writer.write_changed()
        return api

    api = asyncio.run(scenario())
    assert api.events == [("Warning", "Straggler", "worker-1: 1.9x the median step time over the last minute")]
    assert api.writes[-1][2]["progress"]["stragglers"][0]["replica"] == "worker-1"
