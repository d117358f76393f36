"""A job of many replicas is described summarised (issue 46): its replicas counted by state and those not
running named, in `torchjob describe` (both runtimes: cli/views.py) and the dashboard's job page
(ui/source.py detail), unless each line is asked for (--replicas all, ?replicas=all). A job of
SUMMARY_OVER replicas or fewer is described as before, each attempt on its line."""

from __future__ import annotations

import pytest

from tests.docs.blocks import tested as page_blocks
from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import JobStatus
from torchjob.cli import views
from torchjob.runtime import SUMMARY_OVER, AttemptView, JobView
from torchjob.ui.source import detail


def view(workers: int, odd: dict[int, AttemptView]) -> JobView:
    job = job_from_data(job_data("big", workers=workers))
    attempts = [AttemptView("master-0", 0, started=1.0, pod="big-master-0"),
                *(odd.get(i) or AttemptView(f"worker-{i}", 0, started=1.0, pod=f"big-worker-{i}")
                  for i in range(workers))]
    return JobView(name="big", job=job, status=JobStatus(), attempts=attempts)


ODD = {7: AttemptView("worker-7", 0, started=1.0, ended=2.0, exit_code=137, reason="Error", pod="big-worker-7"),
       9: AttemptView("worker-9", 1, reason="Pending", waiting="Unschedulable: 0/4 nodes are available",
                      pod="big-worker-9")}


def attempt_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("  master-", "  worker-"))]


def test_many_replicas_are_counted_by_state_and_those_not_running_named(capsys: pytest.CaptureFixture[str]) -> None:
    views.describe(view(63, ODD), "text", lambda *_: None)
    out = capsys.readouterr().out
    assert "Attempts:    64 replicas: 62 Running, 1 Error, 1 Pending (each replica's line: --replicas all)" in out
    assert [line.split()[0] for line in attempt_lines(out)] == ["worker-7", "worker-9"]
    assert "(Unschedulable: 0/4 nodes are available)" in out
    views.describe(view(63, ODD), "text", lambda *_: None, every_replica=True)
    assert len(attempt_lines(capsys.readouterr().out)) == 64
    views.describe(view(4095, ODD), "text", lambda *_: None)  # the line docs/explanation/performance.md shows
    out = capsys.readouterr().out
    page = page_blocks("explanation/performance.md",
                  "tests/test_replica_summary.py::test_many_replicas_are_counted_by_state_and_those_not_running_named")
    assert page and all(line in out.splitlines() for block in page for line in block.splitlines())


def test_a_small_job_is_described_line_by_line_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    views.describe(view(SUMMARY_OVER - 1, ODD), "text", lambda *_: None)
    out = capsys.readouterr().out
    assert "\nAttempts:\n  REPLICA " in out and "replicas:" not in out
    assert len(attempt_lines(out)) == SUMMARY_OVER


def test_the_dashboard_s_job_page_of_many_replicas_counts_them() -> None:
    page = detail(view(63, ODD))
    assert page["replicaCounts"] == {"Running": 62, "Error": 1, "Pending": 1}
    assert [a["replica"] for a in page["attempts"]] == ["worker-7", "worker-9"]
    every = detail(view(63, ODD), every_replica=True)
    assert every["replicaCounts"] is None and len(every["attempts"]) == 64
    assert detail(view(3, ODD))["replicaCounts"] is None
