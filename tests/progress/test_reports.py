"""The report shapes, a job's book (rate, ETA, last reports) and the rate limit: no processes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from torchjob.progress.book import Book, RateLimit
from torchjob.progress.protocol import BadReport, Report, parse
from torchjob.progress.server import bearer

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def body(data: object) -> bytes:
    return json.dumps(data).encode()


def test_trainers_request_as_the_sdk_sends_it() -> None:
    # kubeflow 0.5 update_trainjob_status: {"trainerStatus": {...}}, values as strings
    r = parse(body({"trainerStatus": {"lastUpdatedTime": "2026-01-01T00:00:00+00:00", "progressPercentage": 40,
                                      "estimatedRemainingSeconds": 12,
                                      "metrics": [{"name": "loss", "value": "0.25"},
                                                  {"name": "acc", "value": "0.9"}]}}))
    assert r == Report(percent=40.0, eta_seconds=12, metrics={"loss": "0.25", "acc": "0.9"})
    assert parse(body({"trainerStatus": None})).empty  # Trainer answers 200 and changes nothing


def test_torchjobs_own_shape_and_both_together() -> None:
    r = parse(body({"step": 30, "total": 120, "metrics": {"loss": 0.123456789, "tokens/s": 5120, "phase": "warmup"}}))
    assert r == Report(step=30, total=120, percent=25.0, metrics={"loss": "0.123457", "tokens/s": "5120",
                                                                 "phase": "warmup"})
    both = parse(body({"step": 1, "total": 3, "trainerStatus": {"progressPercentage": 33}}))
    assert both.percent == pytest.approx(100 / 3)  # step/total is finer than Trainer's whole percent


@pytest.mark.parametrize(("data", "message"), [
    (b"{nope", "the body is not JSON"),
    (body([1, 2]), "the body must be a JSON object"),
    (body({"stp": 1}), "no report in the body (fields ['stp'])"),
    (body({"step": -1}), "step: must be at least 0, got -1"),
    (body({"step": 1.5}), "step: must be an integer, got 1.5"),
    (body({"step": True}), "step: must be an integer, got True"),
    (body({"total": 0}), "total: must be at least 1, got 0"),
    (body({"step": 1, "rank": -1}), "rank: must be at least 0, got -1"),
    (body({"trainerStatus": {"progressPercentage": 101}}),
     "trainerStatus.progressPercentage: must be between 0 and 100, got 101"),
    (body({"trainerStatus": {"estimatedRemainingSeconds": -5}}),
     "trainerStatus.estimatedRemainingSeconds: must be at least 0, got -5"),
    (body({"trainerStatus": {"metrics": [{"name": "", "value": "1"}]}}), "trainerStatus.metrics[0].name"),
    (body({"trainerStatus": {"metrics": [{"name": "x", "value": "y" * 65}]}}),
     "trainerStatus.metrics[0].value: must be 1-64 characters, got 65"),
    (body({"trainerStatus": {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)]}}),
     "at most 256 entries, got 257"),
    (body({"metrics": [1, 2]}), "metrics: must be an object of name: value"),
    (body({"metrics": {"loss": [1]}}), "metrics.loss: a metric's value must be a number or a string, got list"),
    (b"x" * 70000, "at most 65536"),
])
def test_what_is_not_a_report_says_which_field_and_why(data: bytes, message: str) -> None:
    with pytest.raises(BadReport) as e:
        parse(data)
    assert message in str(e.value)


def test_the_book_keeps_the_latest_progress_the_rate_and_each_attempts_last_report() -> None:
    book = Book()
    assert book.progress() is None
    assert book.record("master-0", 0, Report(step=10, total=110, percent=100 * 10 / 110), T0)
    assert not book.record("master-0", 0, Report(step=30, total=110, percent=100 * 30 / 110, metrics={"loss": "1"}),
                           T0 + timedelta(seconds=10))
    assert book.record("worker-0", 0, Report(metrics={"acc": "0.5"}), T0 + timedelta(seconds=11))
    p = book.progress()
    assert p is not None
    assert (p.step, p.total, p.rate, p.etaSeconds, p.reporter) == (30, 110, 2.0, 40, "worker-0")
    assert [(m.name, m.value) for m in p.metrics] == [("loss", "1"), ("acc", "0.5")]
    assert p.lastReportTime == T0 + timedelta(seconds=11)
    assert book.last_report("master-0", 0) == T0 + timedelta(seconds=10)
    assert book.last_report("master-0", 1) is None
    # a restart from a checkpoint: the step goes back, the rate starts again
    book.record("worker-0", 1, Report(step=5, total=110), T0 + timedelta(seconds=20))
    book.record("worker-0", 1, Report(step=3, total=110), T0 + timedelta(seconds=21))
    p = book.progress()
    assert p is not None and p.step == 3 and p.rate is None
    # Trainer's own ETA wins over the computed one
    book.record("master-0", 0, Report(percent=50.0, eta_seconds=7), T0 + timedelta(seconds=22))
    p = book.progress()
    assert p is not None and (p.percent, p.etaSeconds) == (50.0, 7)


def test_the_rate_limit_allows_a_burst_then_the_rate() -> None:
    limit = RateLimit(rate=10, burst=3)
    assert [limit.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take(0.0) == pytest.approx(0.1)
    assert limit.take(0.1) == 0.0  # one token back after 1/rate
    assert limit.take(0.1) > 0


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer   abc ", "abc"), ("Basic abc", ""), ("Bearer a b", ""), (None, ""), ("", ""),
])
def test_bearer_credentials(header: str | None, token: str) -> None:
    assert bearer(header) == token


def test_a_restart_from_step_one_starts_the_rate_and_the_eta_again() -> None:
    # every rank reports; the job is restarted (a Stalled policy) and the new attempts start at step 1,
    # the first of them from another replica than the last report before the restart
    book = Book()
    for i in range(1, 11):
        book.record("master-0", 0, Report(step=i, total=100), T0 + timedelta(seconds=i))
        book.record("worker-0", 0, Report(step=i, total=100), T0 + timedelta(seconds=i, milliseconds=100))
    p = book.progress()
    assert p is not None and p.reporter == "worker-0" and p.etaSeconds == 91
    book.record("master-0", 1, Report(step=1, total=100), T0 + timedelta(seconds=31))
    p = book.progress()
    assert p is not None and p.step == 1 and p.rate is None and p.etaSeconds is None  # not the old run's ETA
    for i in range(2, 6):
        book.record("master-0", 1, Report(step=i, total=100), T0 + timedelta(seconds=30 + i))
    p = book.progress()
    assert p is not None and (p.rate, p.etaSeconds) == (1.0, 95)  # the new run's pace, not across the restart


def test_the_rate_limit_never_starves_a_replica_of_a_large_job() -> None:
    # 60 replicas, each reporting once a second, always in the same order (the job's rate is 20 a
    # second): each is still heard at least once a second, so none looks stalled
    book = Book()
    heard: dict[str, list[float]] = {}
    for second in range(30):
        for i in range(60):
            now = second + i / 1000
            if book.admit(f"worker-{i}", 0, now) == 0:
                heard.setdefault(f"worker-{i}", []).append(now)
    assert len(heard) == 60
    assert {name: len(times) for name, times in heard.items() if len(times) < 30} == {}  # every second
    # a flood from one replica is still refused past the job's rate
    flood = [book.admit("worker-0", 0, 100.0 + k / 1000) for k in range(300)]
    taken = sum(1 for w in flood if w == 0)
    assert 200 <= taken <= 210, taken  # the burst, 0.3 s at the job's rate and one replica's own second


def test_transformers_kubeflow_callback_reports_are_at_the_trainers_own_steps() -> None:
    """Issue 47: transformers' KubeflowCallback sends the trainer's step and total as metrics
    (current_step, total_steps), rate-limited and at the end with neither: the history's steps are the
    trainer's (71, then the last), not a count of reports (1, 2, 3)."""
    def body(percent: int, metrics: dict[str, object]) -> bytes:
        return json.dumps({"trainerStatus": {"progressPercentage": percent, "metrics": [
            {"name": k, "value": str(v)} for k, v in metrics.items()]}}).encode()

    begin = parse(body(0, {"total_steps": 200}))
    assert (begin.step, begin.total, begin.metrics) == (None, 200, {})
    middle = parse(body(35, {"loss": 2.5, "current_step": 71, "total_steps": 200, "current_epoch": 0.35}))
    assert (middle.step, middle.total, middle.metrics) == (71, 200, {"loss": "2.5", "current_epoch": "0.35"})
    assert middle.percent == 35.5  # the trainer's step over its total: finer than its whole percent
    end = parse(body(100, {"loss": 2.1, "train_runtime": 12.5}))
    book = Book()
    for i, report in enumerate((begin, middle, end)):
        book.record("master-0", 0, report, T0 + timedelta(seconds=i))
    p = book.progress()
    assert p is not None and p.history is not None
    assert p.history.steps == [71, 200]  # the trainer's steps; the end report at its last one
    # and the job's step too: 100% is not "step 71 of 200" (seen on real pods: `100% · step 19/20`)
    assert (p.percent, p.step, p.total) == (100.0, 200, 200)
    assert {s.name: s.values for s in p.history.series}["loss"] == [2.5, 2.1]
    # torchjob's own shape and a metric that merely shares the name are left alone
    assert parse(b'{"step": 3, "metrics": {"current_step": "x"}}').metrics == {"current_step": "x"}
