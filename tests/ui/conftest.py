"""The dashboard in a real browser: Debian's chromium (scripts/setup.sh installs it), driven by
Playwright's Python package pointed at it (its own browser download is not used). `torchjob ui` runs
as a user runs it, a subprocess with the test's TORCHJOB_HOME; screenshots go to
$TORCHJOB_UI_ARTIFACTS, else a directory under pytest's tmp (printed at the end of the session)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import make_job

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("TORCHJOB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _no_browser() -> None:
    msg = "no chromium: run scripts/setup.sh (it installs Debian's chromium) or set TORCHJOB_CHROMIUM"
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("TORCHJOB_UI_ARTIFACTS")
    path = Path(env) if env else tmp_path_factory.mktemp("ui-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


# One a module: Playwright's sync API runs an event loop on the main thread while it lives, and the
# next module may call asyncio.run (tests/kube runs its informers so; seen in the whole suite).
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        _no_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Page:
    """A browser page that records what must never happen: a dialog, an uncaught error."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    yield p
    p.close()


class Dashboard:
    """`torchjob ui --no-browser` running; `url` is the first line it printed."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchjob", "ui", "--no-browser", *args], cwd=REPO, text=True,
            env={**os.environ, "TORCHJOB_HOME": str(home), **(env or {})}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise AssertionError(f"torchjob ui printed {self.url!r} first; stderr: {self.proc.stderr.read()}")
        self.base, _, self.token = self.url.partition("/?token=")

    def job_url(self, name: str, namespace: str = "-") -> str:
        from urllib.parse import quote

        return f"{self.url}#/job/{quote(namespace, safe='')}/{quote(name, safe='')}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def dashboard() -> Iterator[Callable[..., Dashboard]]:
    started: list[Dashboard] = []

    def start(home: Path, *args: str, env: dict[str, str] | None = None) -> Dashboard:
        d = Dashboard(home, *args, env=env)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def seed_jobs(home: Path, n: int, steps: int = 100) -> None:
    """`n` jobs in a store, each with progress and a loss history, written as the runtime writes them
    (the store's own calls; the progress book's history): of every six, two running (part done), three
    succeeded, one failed (BackoffLimitExceeded)."""
    from torchjob.api.model import JobStatus
    from torchjob.api.status import Condition, ConditionType, FailureInfo
    from torchjob.local.store.store import Store
    from torchjob.progress.book import Book
    from torchjob.progress.protocol import Report

    store = Store(home)
    now = datetime.now(UTC)
    for i in range(n):
        job = make_job(f"job-{i:04d}", uid=str(uuid.uuid4()))
        store.create_job(job, {})
        book = Book()
        kind = ("Running", "Succeeded", "Succeeded", "Running", "Succeeded", "Failed")[i % 6]
        last = steps if kind == "Succeeded" else 1 + (i * 37) % (steps - 1)
        for s in range(1, last + 1, max(1, steps // 20)):
            book.record("master-0", 0, Report(step=s, total=steps, percent=100.0 * s / steps,
                                              metrics={"loss": str(1 / s)}), now)
        book.record("master-0", 0, Report(step=last, total=steps, percent=100.0 * last / steps,
                                          metrics={"loss": str(1 / last)}), now)
        conds = [Condition(type=ConditionType.CREATED, status="True", reason="Created", lastTransitionTime=now),
                 Condition(type=ConditionType(kind), status="True", reason=kind, lastTransitionTime=now)]
        failure = FailureInfo(reason="BackoffLimitExceeded", message="worker-1 exited 1", replica="worker-1",
                              exitCode=1) if kind == "Failed" else None
        store.set_status(job.name, JobStatus(conditions=conds, progress=book.progress(), restartCount=i % 2,
                                             failure=failure))
    store.close()


def first_paint(browser: Any, url: str, rows: int) -> tuple[float, float, float]:
    """A fresh browser page opens `url` over `rows` jobs: when its jobs table was painted with the rows
    in view (the page's own clock, `tj.firstPaint`: the frame after they went in, from navigation
    start; the page draws only the rows in view, so the screen is whole then), its first
    contentful paint (the header), and the CPU time its renderer's main thread spent until then
    (Chrome's Performance.getMetrics TaskDuration in thread time: what the page itself costs, which a
    busy machine does not stretch as it stretches the clock), each in ms. Polled, not
    wait_for_function: that evals a string, which the page's CSP forbids."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        cdp = ctx.new_cdp_session(page)
        cdp.send("Performance.enable", {"timeDomain": "threadTicks"})
        page.goto(url)
        paint = wait(lambda: page.evaluate("tj.firstPaint"), every=0.02, what="the first paint")
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        assert page.inner_text("#count") == f"{rows} of {rows} jobs"
        assert page.locator("#rows tr").count() >= min(rows, 25)  # at least the rows a 1000 px window shows
        # the paint entry is queued after the frame is shown: on a loaded machine it came after the rows
        fcp = wait(lambda: page.evaluate("performance.getEntriesByName('first-contentful-paint')"
                                         ".map(e => e.startTime)[0]"), every=0.02, what="the first contentful paint")
        return float(paint), float(fcp), float(metrics["TaskDuration"]) * 1000
    finally:
        ctx.close()


def wait(pred: Callable[[], Any], timeout: float = 60, every: float = 0.2, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out: {what}")
