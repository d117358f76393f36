"""The store keeps a job's metric history in its own column: `get` (describe) has it, `all_jobs`
(list) does not read it, and a store made before the column gets it when opened."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from tests.jobs import make_job
from torchjob.api.model import JobStatus
from torchjob.local.store.store import SCHEMA, Store
from torchjob.progress.book import Book
from torchjob.progress.protocol import Report


def test_the_history_is_kept_apart_and_read_only_for_one_job(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.create_job(make_job("a", uid="u-a"), {})
    book = Book()
    for step in range(1, 101):
        book.record("master-0", 0, Report(step=step, metrics={"loss": str(1 / step)}), datetime.now(UTC))
    status = JobStatus(progress=book.progress())
    store.set_status("a", status)
    rec = store.get("a")
    assert rec is not None and rec.status == status
    (listed,) = store.all_jobs()
    assert listed.status.progress is not None and listed.status.progress.history is None
    assert listed.status.progress.step == 100
    bare = store.get("a", history=False)
    assert bare is not None and bare.status.progress is not None and bare.status.progress.history is None


def test_a_store_made_before_the_history_column_gets_it(tmp_path: Path) -> None:
    old = re.sub(r",\n  history TEXT[^\n]*", "", SCHEMA)
    assert "history" not in old
    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript(old)
    db.close()
    store = Store(tmp_path)
    store.create_job(make_job("b", uid="u-b"), {})
    store.set_status("b", JobStatus(progress=Book().progress()))
    Store(tmp_path).close()  # a second opening finds it there
    assert store.get("b") is not None
