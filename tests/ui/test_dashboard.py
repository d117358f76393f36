"""`torchjob ui` in a real browser (Debian's chromium through Playwright), over real local jobs:
their percent on the jobs page, their loss curve and log on the job page, suspend through the
page, 1,000 jobs' first paint, and hostile content shown as text."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.jobs import job_data
from tests.ui.conftest import REPO, Dashboard, Page, first_paint, seed_jobs, wait

pytestmark = pytest.mark.e2e
REPORT = [sys.executable, str(REPO / "tests" / "programs" / "report_steps.py")]


def torchjob(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "torchjob", *args], cwd=REPO, text=True, capture_output=True,
                          env={**os.environ, "TORCHJOB_HOME": str(home)}, timeout=timeout, stdin=subprocess.DEVNULL)


def describe(home: Path, name: str) -> dict[str, Any]:
    proc = torchjob(home, "describe", name, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def submit(home: Path, tmp_path: Path, name: str, *args: str) -> None:
    data = job_data(name, workers=0, command=[*REPORT, *args])
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = torchjob(home, "submit", str(path))
    assert proc.returncode == 0, proc.stderr


def state(home: Path, name: str) -> str:
    from tests.local.conftest import state_of

    return state_of(describe(home, name))


def test_a_request_without_the_token_is_refused(tmp_path: Path, dashboard: Callable[..., Dashboard]) -> None:
    d = dashboard(tmp_path)
    for path in ("/", "/api/jobs", "/static/app.js", "/api/stream"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(d.base + path, timeout=10)
        assert e.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(d.base + path + "?token=" + "0" * len(d.token), timeout=10)
        assert e.value.code == 403
    with urllib.request.urlopen(f"{d.base}/api/jobs?token={d.token}", timeout=10) as r:
        assert json.load(r)["jobs"] == []
    # an action needs the token in its header: a cookie (sent from any site's form) is not enough
    req = urllib.request.Request(f"{d.base}/api/jobs/-/x/suspend?token={d.token}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403


def test_a_reporting_job_its_percent_its_loss_curve_and_its_log(tmp_path: Path, page: Page, artifacts: Path,
                                                                dashboard: Callable[..., Dashboard]) -> None:
    home = tmp_path / "home"
    d = dashboard(home)
    p = page.page
    p.goto(d.url)
    submit(home, tmp_path, "reporting", "--steps", "60", "--hold", "2")
    row = p.locator('tr[data-job="reporting"]')
    row.wait_for(timeout=60_000)  # it came in live: the page was open before the job existed
    # a percent above 0 shown while it runs (60 of 120 steps at most before it holds)
    wait(lambda: (t := row.locator('[data-testid="percent"]').inner_text()) not in ("-", "0%") and t,
         what="the job's percent on the jobs page")
    p.screenshot(path=str(artifacts / "jobs-page.png"))
    wait(lambda: state(home, "reporting") == "Succeeded", what="the job to succeed")
    wait(lambda: row.locator('[data-testid="percent"]').inner_text() == "50%", what="the last percent, live")
    row.locator("a").click()
    p.locator('.chart[data-metric="loss"] canvas').first.wait_for()
    # the loss curve has every step reported (60 < the local history's capacity: none merged), loss first
    wait(lambda: p.evaluate("tj.charts.loss && tj.charts.loss.data[0].length") == 60, what="60 points")
    xs, ys = p.evaluate("[tj.charts.loss.data[0], tj.charts.loss.data[1]]")
    assert xs == list(range(1, 61)) and ys[0] == 1.0 and abs(ys[-1] - 1 / 60) < 1e-6
    assert p.evaluate("[...document.querySelectorAll('.chart')].map(c => c.dataset.metric)") == ["loss"]
    # a constant (lr) is shown as its value, not charted (issue 47)
    assert p.locator('#metric-values [data-metric="lr"] dd').inner_text() == "0.01"
    hist = describe(home, "reporting")["status"]["progress"]["history"]  # describe -o json shows it too
    assert hist["steps"] == list(range(1, 61)) and hist["series"][0]["name"] == "loss"
    text = torchjob(home, "describe", "reporting").stdout  # and describe draws each curve
    assert "History:     60 points, steps 1-60\n  loss: █" in text and "1 -> 0.01667" in text, text
    assert "\n  lr: 0.01\n" in text, text  # a constant: its value, no curve
    # the log view shows the replica's line
    p.locator("#log .line", has_text="reported 60 steps").wait_for(timeout=30_000)
    p.fill("#log-search", "60 steps")
    assert p.locator("#log mark").first.inner_text() == "60 steps"
    # the attempt's timeline, its exit code
    assert p.locator('[data-testid="attempts"] tbody tr').first.inner_text().split("\t")[4] == "0"
    assert p.locator('[data-testid="timeline"] .tl-seg.ok').count() == 1
    p.screenshot(path=str(artifacts / "job-page.png"), full_page=True)
    assert page.dialogs == [] and page.errors == []


def held_line() -> int:
    program = REPO / "tests" / "programs" / "report_steps.py"
    return next(i for i, line in enumerate(program.read_text().splitlines(), 1) if "time.sleep(args.hold)" in line)


def test_suspend_and_resume_through_the_page(tmp_path: Path, page: Page, artifacts: Path,
                                           dashboard: Callable[..., Dashboard]) -> None:
    home = tmp_path / "home"
    submit(home, tmp_path, "held", "--steps", "5", "--hold", "300")
    d = dashboard(home)
    p = page.page
    p.goto(d.job_url("held"))
    wait(lambda: p.locator("#job-state").inner_text() == "Running", what="Running on the page")
    # its stacks, taken from the page (issue 42): the master's one process, held in its sleep
    held_at = f"main (report_steps.py:{held_line()})"

    def stacks_shown() -> str | None:
        p.click("#take-stacks")
        wait(lambda: p.locator("#take-stacks").is_enabled(), what="the stacks taken")
        shown = p.locator("#stacks").inner_text()
        return shown if held_at in shown else None

    shown = wait(stacks_shown, what="the stacks of the held master")
    assert shown.startswith(f"rank 0: {held_at} <- <module> (report_steps.py:"), shown
    assert "(1 process(es) answered in" in shown
    p.click("#act-suspend")
    p.locator('[data-testid="confirm"]').wait_for()
    p.screenshot(path=str(artifacts / "confirm-suspend.png"))
    p.click("#confirm-yes")
    p.locator('[data-testid="done"]').wait_for()
    wait(lambda: state(home, "held") == "Suspended", what="the job suspended")
    wait(lambda: p.locator("#job-state").inner_text() == "Suspended", what="Suspended on the page")
    assert p.locator("#act-resume").is_enabled()
    p.click("#act-resume")
    p.click("#confirm-yes")
    wait(lambda: state(home, "held") == "Running", what="the job running again")
    p.click("#act-delete")
    p.click("#confirm-yes")
    wait(lambda: torchjob(home, "describe", "held").returncode != 0, what="the job deleted")
    wait(lambda: p.evaluate("location.hash") == "#/", what="back on the jobs page")
    assert page.dialogs == [] and page.errors == []


EXTRA_CPU_MS = 60  # what 1,000 jobs may cost the renderer's main thread beyond ten jobs (30-45 ms measured)
SMALL_CPU_MS = 80  # the ten-job page's main thread on the machine the bounds were set on (60-75 measured)
WALL_RATIO, WALL_EXTRA_MS = 1.5, 200  # 1,000 jobs' rows painted by 1.5x the ten-job page's time + 200 ms


def test_a_thousand_jobs_first_paint(tmp_path: Path, browser: Any, page: Page, artifacts: Path,
                                     dashboard: Callable[..., Dashboard]) -> None:
    """1,000 jobs cost the page what ten do: the page draws only the rows in view, and the jobs come
    inside the page. Each bound is against the same dashboard over ten jobs, measured in this test with
    its rounds interleaved (medians of three), so that the machine's load, which stretches both, does
    not decide it: the CPU time chromium's renderer main thread spends until the first screen's rows are
    painted (thread time) at most EXTRA_CPU_MS more than the ten jobs' (scaled up only on a CPU slower
    than the one it was set on, as the ten jobs' page says), and the wall clock until then at most
    WALL_RATIO times the ten jobs' plus WALL_EXTRA_MS (on a quiet machine the ten jobs' page paints in
    about 200 ms: the 1 s target with room). The page before the window (every row in the table) spent
    about 155 ms more than ten jobs and painted in 4-5x their time under load: it fails both. The
    wall clock is printed; bench/ui_first_paint.py measures it in five rounds."""
    big, small = tmp_path / "big", tmp_path / "small"
    seed_jobs(big, 1000)
    seed_jobs(small, 10)
    d, base = dashboard(big), dashboard(small)
    runs, bases = [], []
    for _ in range(3):
        bases.append(first_paint(browser, base.url, 10))
        runs.append(first_paint(browser, d.url, 1000))
    paint, cpu = statistics.median(r[0] for r in runs), statistics.median(r[2] for r in runs)
    small_paint, small_cpu = statistics.median(r[0] for r in bases), statistics.median(r[2] for r in bases)
    extra = EXTRA_CPU_MS * max(1.0, small_cpu / SMALL_CPU_MS)
    wall = WALL_RATIO * small_paint + WALL_EXTRA_MS
    print(f"1000 jobs: rows painted at {paint:.0f} ms (bound {wall:.0f}), main thread {cpu:.0f} ms "
          f"(bound {small_cpu + extra:.0f}); 10 jobs: painted at {small_paint:.0f} ms, main thread {small_cpu:.0f} ms; "
          f"rounds {runs}, {bases}")
    assert cpu < small_cpu + extra, (runs, bases)
    assert paint < wall, (runs, bases)
    p = page.page
    p.goto(d.url)
    wait(lambda: p.evaluate("tj.firstPaint"), what="the first paint")
    p.screenshot(path=str(artifacts / "jobs-1000.png"))
    # only the rows in view are in the table; scrolled to the end, the oldest job is drawn and the newest not
    drawn = p.locator("#rows tr").count()
    assert 25 <= drawn < 100, drawn
    assert p.locator("#rows tr").first.get_attribute("data-job") == "job-0999"
    p.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    p.locator('tr[data-job="job-0000"]').wait_for()
    assert p.locator('tr[data-job="job-0999"]').count() == 0 and p.locator("#rows tr").count() < 100
    box = p.evaluate("document.querySelector('tr[data-job=\"job-0000\"]').getBoundingClientRect().bottom")
    assert 0 < box <= p.viewport_size["height"], box  # on screen, not past the end
    p.evaluate("window.scrollTo(0, 0)")
    p.locator('tr[data-job="job-0999"]').wait_for()
    p.select_option("#f-state", "Failed")
    failed = [f"job-{i:04d}" for i in range(5, 1000, 6)][::-1]  # newest first
    assert p.inner_text("#count") == f"{len(failed)} of 1000 jobs"
    assert p.evaluate("[...document.querySelectorAll('#rows tr')].map(r => r.dataset.job)") == failed[:drawn]
    assert p.locator("#rows tr").first.locator("td").last.inner_text() == "BackoffLimitExceeded"
    p.fill("#f-name", "job-09")
    assert p.inner_text("#count") == f"{len([i for i in range(900, 1000) if i % 6 == 5])} of 1000 jobs"
    assert p.locator("#rows tr").count() == len([i for i in range(900, 1000) if i % 6 == 5])
    p.screenshot(path=str(artifacts / "jobs-filtered.png"))


def test_hostile_content_is_shown_as_text(tmp_path: Path, page: Page, artifacts: Path,
                                          dashboard: Callable[..., Dashboard]) -> None:
    from tests.programs.report_steps import HOSTILE
    from torchjob.local.store.store import Store

    home = tmp_path / "home"
    submit(home, tmp_path, "hostile", "--steps", "5", "--hostile")
    wait(lambda: state(home, "hostile") == "Succeeded", what="the job to succeed")
    store = Store(home)
    store.add_event("hostile", "Warning", "Injected", HOSTILE)  # an event message, as a runtime records one
    # a job whose name carries markup (the store takes any name; Kubernetes would refuse it)
    rec = store.get("hostile")
    assert rec is not None
    evil = rec.job.model_copy(update={"metadata": rec.job.metadata.model_copy(update={"name": HOSTILE, "uid": "u-1"})})
    store.create_job(evil, {})
    store.close()
    d = dashboard(home)
    p = page.page
    p.goto(d.url)
    p.locator("#rows tr").nth(1).wait_for()
    assert p.locator("#rows a", has_text=HOSTILE).count() == 1  # the name, as text
    p.goto(d.job_url("hostile"))
    p.locator('[data-testid="events"] td', has_text=HOSTILE).wait_for()
    p.locator("#log .line", has_text=HOSTILE).wait_for(timeout=30_000)
    # the charts are drawn once uPlot has loaded, apart from the log's fetch: waited for, not read once
    names = wait(lambda: p.evaluate("[...document.querySelectorAll('.chart .title')].map(t => t.textContent)"),
                 what="the charts drawn")
    assert HOSTILE[:64] in names
    p.goto(d.job_url(HOSTILE))
    p.locator("#job-name", has_text=HOSTILE).wait_for()
    p.screenshot(path=str(artifacts / "hostile.png"), full_page=True)
    time.sleep(1)
    assert p.evaluate("window.pwned") is None
    assert p.locator("img[src=x], main script").count() == 0
    assert page.dialogs == [], page.dialogs


def test_a_failed_job_shows_its_root_cause_with_torchs_traceback(tmp_path: Path, page: Page, artifacts: Path,
                                                                 dashboard: Callable[..., Dashboard]) -> None:
    home = tmp_path / "home"
    data = job_data("broken", workers=0, command=[sys.executable, str(REPO / "tests" / "programs" / "ddp_step.py"),
                                                  "--fail-replica", "master-0", "--raise"])
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    assert torchjob(home, "run", str(path)).returncode == 1
    d = dashboard(home)
    p = page.page
    p.goto(d.url)
    row = p.locator('tr[data-job="broken"]')
    row.wait_for()
    assert row.locator('[data-testid="state"]').inner_text() == "Failed"
    assert row.locator("td").last.inner_text() != ""  # the failure's reason
    row.locator("a").click()
    cause = p.locator('[data-testid="root-cause"]')
    cause.wait_for()
    text = cause.inner_text()
    assert "broken FAILED" in text and "RuntimeError: master-0 could not load its shard" in text, text
    assert p.locator('[data-testid="timeline"] .tl-seg.bad').count() == 1
    p.screenshot(path=str(artifacts / "failed-job.png"), full_page=True)
    assert page.dialogs == [] and page.errors == []


def test_the_api_answers_a_mistake_with_the_cli_s_message(tmp_path: Path, dashboard: Callable[..., Dashboard]) -> None:
    seed_jobs(tmp_path, 2)  # job-0000 running (no supervisor), job-0001 succeeded
    d = dashboard(tmp_path)

    def call(path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(d.base + path, method=method, headers={"X-Torchjob-Token": d.token})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    code, body = call("/api/jobs/-/nope")
    assert code == 404 and body["error"].startswith("no job named 'nope'") and "job-0000" in body["error"]
    code, body = call("/api/jobs/-/job-0001/suspend", "POST")
    assert code == 409 and body["error"].startswith("job 'job-0001' has already succeeded"), body
    code, body = call("/api/jobs/-/job-0001/resume", "POST")
    assert code == 409, body
    code, body = call("/api/jobs/-/job-0001/explode", "POST")
    assert code == 404 and "suspend, resume or delete" in body["error"]
    # a kind, as a cluster's page names it: locally every job is a TorchJob
    code, body = call("/api/jobs/-/job-0001?kind=torchjob")
    assert code == 200 and body["name"] == "job-0001" and body["kind"] is None, body
    code, body = call("/api/jobs/-/job-0001?kind=trainjob")
    assert code == 409 and body["error"].startswith("'trainjob/job-0001': a TrainJob runs on a cluster only"), body
    code, body = call("/api/jobs/-/job-0001/delete?kind=trainjob", "POST")
    assert code == 409 and "add --kube" in body["error"], body
    code, body = call("/api/jobs/-/job-0001/delete?kind=tj", "POST")
    assert code == 200 and body == {"ok": True, "verb": "delete", "name": "job-0001", "kind": "tj"}
    code, body = call("/api/jobs/-/job-0001")
    assert code == 404
    code, body = call("/api/jobs/-/job-0000/delete", "POST")  # a bare name, as before
    assert code == 200 and body == {"ok": True, "verb": "delete", "name": "job-0000", "kind": None}


def test_a_newcomers_torch_job_run_then_seen(tmp_path: Path, page: Page, dashboard: Callable[..., Dashboard]) -> None:
    """The way in the guide: a real torch.distributed job (gloo, a master and a worker) reporting through
    torchjob.report, run to its end; then `torchjob ui` shows it: 100%, and its loss curve with every
    point its history kept."""
    home = tmp_path / "home"
    data = job_data("first", workers=1, command=["python", str(REPO / "tests" / "programs" / "ddp_progress.py"),
                                                 "--steps", "30", "--step-time", "0.1"])
    path = tmp_path / "first.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = torchjob(home, "run", str(path), timeout=240)
    assert proc.returncode == 0, proc.stderr
    hist = describe(home, "first")["status"]["progress"]["history"]
    # a 3 s job: torchjob.report sends its first reports at up to 20 a second, not one a second (4 points)
    assert hist["series"][0]["name"] == "loss" and len(hist["steps"]) >= 20 and hist["steps"][-1] == 30, hist["steps"]
    d = dashboard(home)
    p = page.page
    p.goto(d.url)
    row = p.locator('tr[data-job="first"]')
    row.wait_for()
    assert row.locator('[data-testid="percent"]').inner_text() == "100%"
    row.locator("a").click()
    p.locator('.chart[data-metric="loss"] canvas').first.wait_for()
    loss = hist["series"][0]["values"]
    wait(lambda: p.evaluate("tj.charts.loss && tj.charts.loss.data[0].length") == sum(v is not None for v in loss),
         what="every point of the history drawn")
    assert p.locator('[data-testid="timeline"] .tl-seg.ok').count() == 2
    assert page.dialogs == [] and page.errors == []
