"""`torchjob ui --kube` against the real control plane, in a real browser: a TorchJob whose
status.progress is written as the operator's progress writer writes it (its book, its kind's
patch, its Kubernetes history bounds) shows with its percent, and its job page draws the history's
loss curve. The dashboard reads with the user's kubeconfig; nothing runs in the cluster for it."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from lightkube import Client
from lightkube.types import PatchType

from tests.jobs import job_data
from tests.ui.conftest import Dashboard, Page, wait
from tests.ui.test_docs_dashboard import block
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.served.kinds import TORCHJOB
from torchjob.progress.book import Book
from torchjob.progress.history import KUBE_CAPACITY, KUBE_SERIES
from torchjob.progress.protocol import Report

pytestmark = pytest.mark.kube
STEPS = 2000  # past the Kubernetes history's capacity: the curve is downsampled


def test_the_dashboard_shows_a_cluster_job_its_percent_and_its_curve(
        kube: Client, kubeconfig: str, namespace: str, tmp_path: Any, page: Page, artifacts: Any,
        dashboard: Any) -> None:
    data = job_data("curves", workers=1, command=["python", "train.py"])
    data["metadata"]["namespace"] = namespace
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["containers"][0]["image"] = "example/trainer:1"
    kube.create(TorchJobRes.from_dict(data))
    book = Book(KUBE_CAPACITY, KUBE_SERIES)
    t0 = datetime.now(UTC)
    for step in range(1, STEPS // 2 + 1):
        report = Report(step=step, total=STEPS, percent=100 * step / STEPS, metrics={"loss": str(3 / step), "lr": "3"})
        book.record("master-0", 0, report, t0 + timedelta(seconds=step))
    progress = book.progress()
    assert progress is not None and progress.history is not None
    patch = TORCHJOB.progress_patch(progress.model_dump(mode="json", exclude_none=True))
    stored = kube.patch(TorchJobRes.Status, "curves", {"status": patch}, namespace=namespace,
                        patch_type=PatchType.MERGE)
    kept = stored.to_dict()["status"]["progress"]["history"]  # the schema kept it (nothing pruned)
    assert kept["steps"] == progress.history.steps and len(kept["steps"]) <= KUBE_CAPACITY

    d: Dashboard = dashboard(tmp_path, "--kube", "-n", namespace, env={"KUBECONFIG": kubeconfig})
    p = page.page
    p.goto(d.url)
    row = p.locator('tr[data-job="curves"]')
    row.wait_for(timeout=30_000)
    assert row.locator('[data-testid="percent"]').inner_text() == "50%"
    assert p.locator("#where").inner_text() == f"cluster, namespace {namespace}"
    p.screenshot(path=str(artifacts / "kube-jobs-page.png"))
    p.goto(d.job_url("curves", namespace))
    p.locator('.chart[data-metric="loss"] canvas').first.wait_for()
    n = wait(lambda: p.evaluate("tj.charts.loss && tj.charts.loss.data[0].length"), what="the loss curve")
    assert n == len(kept["steps"]) and KUBE_CAPACITY // 2 <= n <= KUBE_CAPACITY  # 1000 steps, downsampled
    assert p.evaluate("tj.charts.loss.data[0].at(-1)") == STEPS // 2
    # a new progress write shows without a reload
    for step in range(STEPS // 2 + 1, STEPS + 1):
        book.record("master-0", 0, Report(step=step, total=STEPS, percent=100 * step / STEPS,
                                          metrics={"loss": str(3 / step)}), t0 + timedelta(seconds=step))
    progress = book.progress()
    assert progress is not None
    kube.patch(TorchJobRes.Status, "curves", {"status": TORCHJOB.progress_patch(
        progress.model_dump(mode="json", exclude_none=True))}, namespace=namespace, patch_type=PatchType.MERGE)
    wait(lambda: p.evaluate("tj.charts.loss.data[0].at(-1)") == STEPS, what="the new write, live")
    p.screenshot(path=str(artifacts / "kube-job-page.png"), full_page=True)
    # suspend through the page: with the user's kubeconfig, as `torchjob suspend --kube` does
    p.click("#act-suspend")
    p.click("#confirm-yes")
    p.locator('[data-testid="done"]').wait_for()
    stored_job = kube.get(TorchJobRes, "curves", namespace=namespace).to_dict()
    assert stored_job["spec"]["runPolicy"]["suspend"] is True
    assert page.dialogs == [] and page.errors == []


def test_every_namespace_as_the_guide_shows_it(kube: Client, kubeconfig: str, namespace: str, tmp_path: Any,
                                              page: Page, dashboard: Any) -> None:
    """docs/guide/dashboard.md's --kube block, as the page has it: the job shows with its namespace."""
    (line,) = block("test_every_namespace_as_the_guide_shows_it").splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["torchjob", "ui"]
    data = job_data("everywhere", workers=1, command=["python", "train.py"])
    data["metadata"]["namespace"] = namespace
    kube.create(TorchJobRes.from_dict(data))
    d: Dashboard = dashboard(tmp_path, *argv[2:], env={"KUBECONFIG": kubeconfig})
    p = page.page
    p.goto(d.url)
    row = p.locator('tr[data-job="everywhere"]', has_text=namespace)
    row.wait_for(timeout=30_000)
    assert p.locator("#where").inner_text() == "cluster, every namespace"
    row.locator("a").click()
    p.locator("#job-name", has_text="everywhere").wait_for()
    assert page.dialogs == [] and page.errors == []
