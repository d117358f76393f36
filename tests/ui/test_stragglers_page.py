"""The dashboard's job page names a straggler (status.progress.stragglers, as a runtime's book writes it)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.jobs import make_job
from tests.ui.conftest import Dashboard, Page
from torchjob.api.status import JobStatus
from torchjob.progress.book import Book
from torchjob.progress.protocol import Report


def test_the_job_page_names_a_straggler(tmp_path: Path, page: Page, dashboard: Callable[..., Dashboard]) -> None:
    from torchjob.local.store.store import Store

    book, start = Book(), datetime.now(UTC) - timedelta(seconds=30)
    for t in range(0, 30):  # worker-1 makes 5 steps a second, the others 10: the book names it
        for r, per_s in {"master-0": 10, "worker-0": 10, "worker-1": 5}.items():
            book.record(r, 0, Report(step=t * per_s, total=1000), start + timedelta(seconds=t))
    home = tmp_path / "home"
    store = Store(home)
    store.create_job(make_job("straggle", workers=2, uid=str(uuid.uuid4())), {})
    store.set_status("straggle", JobStatus(progress=book.progress()))
    store.close()
    d = dashboard(home)
    p = page.page
    p.goto(d.job_url("straggle"))
    p.locator("#progress dd", has_text="worker-1: 2.0x the median step time over the last minute").wait_for()
    assert p.locator("#progress dt", has_text="stragglers").count() == 1
