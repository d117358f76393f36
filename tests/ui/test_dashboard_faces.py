"""What the dashboard shows of each job, seen in a real browser (Debian's chromium through Playwright)
as issue 31 found it wanting: the list newest first, the ETA whole at any width, a bar in its
state's colour, processes per replica and the world size, no root-cause card for a job that did not
fail, a flat lr read as its value, and a page that asks for nothing it does not have (no
404 in the console). The jobs are written through the store and the progress book, as the runtime
writes them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import make_job
from tests.ui.conftest import Dashboard, Page, wait

pytestmark = pytest.mark.e2e
ORDER = ["wide", "running", "done", "broken"]  # newest first


def seed(home: Path) -> None:
    """broken (Failed at 40%), done (Succeeded: loss and a constant lr 0.01), running (30% at one step
    a second of 100 steps: an ETA of 70 s), wide (torchrun, a master and two workers of 4 processes
    each), created in that order."""
    from torchjob.api.model import JobStatus
    from torchjob.api.status import Condition, ConditionType, FailureInfo
    from torchjob.local.store.store import Store
    from torchjob.progress.book import Book
    from torchjob.progress.protocol import Report

    store = Store(home)
    now = datetime.now(UTC)
    for name, state, last in (("broken", "Failed", 40), ("done", "Succeeded", 100), ("running", "Running", 30),
                              ("wide", "Running", 10)):
        kw: dict[str, Any] = {"workers": 0}
        if name == "wide":
            kw = {"workers": 2, "command": ["torchrun", "train.py"], "nproc_per_node": 4}
        job = make_job(name, uid=str(uuid.uuid4()), **kw)
        store.create_job(job, {})
        book = Book()
        for s in range(1, last + 1):
            book.record("master-0", 0, Report(step=s, total=100, percent=float(s),
                                              metrics={"loss": str(1 / s), "lr": "0.01"}),
                        now - timedelta(seconds=last - s))
        conds = [Condition(type=ConditionType.CREATED, status="True", reason="Created", lastTransitionTime=now),
                 Condition(type=ConditionType(state), status="True", reason=state, lastTransitionTime=now)]
        failure = FailureInfo(reason="BackoffLimitExceeded", message="master-0 exited 1", replica="master-0",
                              exitCode=1) if state == "Failed" else None
        store.set_status(name, JobStatus(conditions=conds, progress=book.progress(), failure=failure))
    store.close()


class Watched:
    """A page that also records every answer of 400 or more and every console error."""

    def __init__(self, page: Page) -> None:
        self.page = page.page
        self.bad: list[str] = []
        self.page.on("response", lambda r: r.status >= 400 and self.bad.append(f"{r.status} {r.url}"))
        self.page.on("console", lambda m: m.type == "error" and self.bad.append(f"console: {m.text}"))


def cell(p: Any, job: str, testid: str) -> str:
    text: str = p.locator(f'tr[data-job="{job}"] [data-testid="{testid}"]').inner_text()
    return text


def colour(p: Any, job: str) -> str:
    got: str = p.evaluate(f"getComputedStyle(document.querySelector('tr[data-job=\"{job}\"] [data-testid=bar] i'))"
                          ".backgroundColor")
    return got


def test_the_jobs_page_newest_first_whole_etas_state_colours_and_world_sizes(
        tmp_path: Path, page: Page, artifacts: Path, dashboard: Callable[..., Dashboard]) -> None:
    seed(tmp_path)
    d = dashboard(tmp_path)
    w = Watched(page)
    p = w.page
    p.goto(d.url)
    p.locator('tr[data-job="broken"]').wait_for()
    assert p.evaluate("[...document.querySelectorAll('#rows tr')].map(r => r.dataset.job)") == ORDER
    # the ETA whole, at a wide and a narrow window: nothing of the progress cell is cut off
    for width in (1400, 1000, 700):
        p.set_viewport_size({"width": width, "height": 900})
        eta = p.locator('tr[data-job="running"] .eta')
        assert eta.inner_text().startswith("ETA 1m"), eta.inner_text()  # 70 steps left at one a second
        box = p.evaluate("""(() => { const td = document.querySelector('tr[data-job="running"] .eta').closest('td');
            const e = td.querySelector('.eta').getBoundingClientRect(), c = td.getBoundingClientRect();
            return {clipped: td.scrollWidth > td.clientWidth, etaRight: e.right, cellRight: c.right}; })()""")
        assert not box["clipped"] and box["etaRight"] <= box["cellRight"], (width, box)
        p.screenshot(path=str(artifacts / f"jobs-page-{width}.png"))
    p.set_viewport_size({"width": 1400, "height": 900})
    assert colour(p, "broken") == "rgb(239, 68, 68)"  # red
    assert colour(p, "done") == "rgb(34, 197, 94)"  # green
    assert colour(p, "running") == "rgb(59, 130, 246)"  # blue
    # replicas x processes per replica (as -j and `torchjob list` write it) and the world size
    assert (cell(p, "wide", "replicas"), cell(p, "wide", "world")) == ("3x4", "12")
    assert (cell(p, "running", "replicas"), cell(p, "running", "world")) == ("1x1", "1")
    # the job page says them too
    p.goto(d.job_url("wide"))
    shape = p.locator("#spec dl").first
    shape.wait_for()
    assert shape.inner_text().split("\n") == ["processes per replica", "4", "world size", "12"], shape.inner_text()
    assert w.bad == [], w.bad


def test_the_job_page_no_cause_without_a_failure_and_a_flat_lr_a_value(
        tmp_path: Path, page: Page, artifacts: Path, dashboard: Callable[..., Dashboard]) -> None:
    seed(tmp_path)
    d = dashboard(tmp_path)
    w = Watched(page)
    p = w.page
    p.goto(d.job_url("done"))
    p.locator('.chart[data-metric="loss"] canvas').first.wait_for()
    wait(lambda: p.evaluate("tj.yLabels.loss && tj.yLabels.loss.length"), what="the loss axis drawn")
    assert not p.locator("#root-cause").is_visible()  # a succeeded job: no "Root cause" card
    assert p.locator("#root-cause").count() == 1 and p.locator('[data-testid="root-cause"]').count() == 0
    labels = p.evaluate("tj.yLabels.loss")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert p.evaluate("tj.charts.loss.data[0].length") == 100  # every step kept
    # a flat lr (0.01 at every step) is read as its value, not drawn as a curve (issue 47)
    assert p.locator('.chart[data-metric="lr"]').count() == 0
    assert p.locator('#metric-values [data-metric="lr"] dd').inner_text() == "0.01"
    p.screenshot(path=str(artifacts / "job-page-succeeded.png"), full_page=True)
    p.goto(d.job_url("broken"))
    cause = p.locator('[data-testid="root-cause"]')
    cause.wait_for()
    assert p.locator("#root-cause").is_visible() and "master-0" in cause.inner_text()
    wait(lambda: p.evaluate("getComputedStyle(document.querySelector('#progress [data-testid=bar] i'))"
                            ".backgroundColor") == "rgb(239, 68, 68)", what="the failed job's bar red")
    assert w.bad == [], w.bad
    assert page.dialogs == [] and page.errors == []
