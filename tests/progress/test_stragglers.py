"""The straggler decision (torchjob.progress.stragglers) and the book that feeds it, with times given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from torchjob.progress.book import Book
from torchjob.progress.protocol import Report
from torchjob.progress.show import straggler_mark, stragglers
from torchjob.progress.stragglers import Stragglers

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(s: Stragglers, paces: dict[str, float], start: float, end: float, every: float = 1.0) -> list:
    """Each reporter reports once per `every` seconds from `start` to `end`, at its pace (s/step);
    the changes judged on the way."""
    changes = []
    t = start
    while t <= end:
        at = T0 + timedelta(seconds=t)
        for r, pace in paces.items():
            s.note(r, at, int(t / pace))
        changes += s.judge(at)
        t += every
    return changes


def test_a_rank_twice_as_slow_is_named_once_within_the_bound() -> None:
    s = Stragglers()
    changes = run(s, {"master-0": 0.1, "worker-0": 0.1, "worker-1": 0.2, "worker-2": 0.1}, 0, 120)
    assert [(c.reporter, c.straggler is not None) for c in changes] == [("worker-1", True)]  # once
    named = changes[0].straggler
    assert named.message == "worker-1: 2.0x the median step time over the last minute"
    assert named.seconds == 0.2
    assert set(s.current) == {"worker-1"}


def test_named_within_two_minutes_of_slowing_down_and_cleared_when_it_catches_up() -> None:
    """worker-1 makes 10 steps a second as the others until t=100, then 5.3 (1.9x the step time),
    then from t=300 10 again."""
    s = Stragglers()
    steps = {"master-0": 0.0, "worker-0": 0.0, "worker-1": 0.0}
    changes = []
    for t in range(0, 500):
        at = T0 + timedelta(seconds=t)
        for r in steps:
            steps[r] += 5.3 if r == "worker-1" and 100 <= t < 300 else 10
            s.note(r, at, int(steps[r]))
        changes += [(t, c) for c in s.judge(at)]
    assert [(c.reporter, c.straggler is not None) for _, c in changes] == [("worker-1", True), ("worker-1", False)]
    (named_at, named), (cleared_at, _) = changes
    assert 100 < named_at <= 100 + 120 and named.straggler is not None and named.straggler.factor >= 1.5
    assert 300 < cleared_at <= 300 + 60


def test_none_with_two_reporters_none_before_enough_reports_and_a_slow_job_is_no_straggler() -> None:
    s = Stragglers()
    assert run(s, {"master-0": 0.1, "worker-0": 0.3}, 0, 100) == []  # two: which one is slow cannot be told
    s = Stragglers()
    assert run(s, {"a": 0.1, "b": 0.1, "c": 0.3}, 0, 8) == []  # under MIN_SPAN_S of reports
    assert [c.reporter for c in run(s, {"a": 0.1, "b": 0.1, "c": 0.3}, 9, 12)] == ["c"]
    s = Stragglers()
    assert run(s, {"a": 1.0, "b": 1.1, "c": 1.3}, 0, 100) == []  # under 1.5x of the median of the others


def test_a_reported_step_time_names_the_slow_rank_of_a_lockstep_job() -> None:
    """In lockstep training every rank advances at the slowest's pace; its own step_time tells."""
    s = Stragglers()
    changes = []
    for t in range(0, 30):
        at = T0 + timedelta(seconds=t)
        for r, own in {"master-0": 0.05, "worker-0": 0.05, "worker-1": 0.1}.items():
            s.note(r, at, t * 8, own)
        changes += s.judge(at)
    assert [c.straggler.message for c in changes if c.straggler] == [
        "worker-1: 2.0x the median step time over the last minute"]


def test_a_reporter_that_stops_is_no_longer_named_and_a_restart_starts_afresh() -> None:
    s = Stragglers()
    run(s, {"a": 0.1, "b": 0.1, "c": 0.2}, 0, 30)
    assert set(s.current) == {"c"}
    changes = run(s, {"a": 0.1, "b": 0.1}, 31, 100)  # c stops reporting (a stall, judged elsewhere)
    assert [(c.reporter, c.straggler) for c in changes] == [("c", None)]
    before = s.step_time("a", T0 + timedelta(seconds=100))
    s.note("a", T0 + timedelta(seconds=100.5), 5)  # a step behind (another of a torchrun replica's workers)
    assert s.step_time("a", T0 + timedelta(seconds=100.5)) == before
    s.forget("a")  # a new attempt of a (a restart from a checkpoint): timed afresh
    s.note("a", T0 + timedelta(seconds=101), 0)
    assert s.step_time("a", T0 + timedelta(seconds=101)) is None


def test_a_restarted_attempt_is_timed_afresh_by_the_book() -> None:
    book = Book()
    for t in range(0, 30):
        for r in ("master-0", "worker-0", "worker-1"):
            book.record(r, 0, Report(step=t * 10), T0 + timedelta(seconds=t))
    book.record("worker-1", 1, Report(step=0), T0 + timedelta(seconds=30))  # its attempt 1 starts at step 0
    assert book._stragglers.step_time("worker-1", T0 + timedelta(seconds=30)) is None


def test_the_book_shows_the_straggler_in_progress_and_says_it_once() -> None:
    book = Book()
    for t in range(0, 30):
        at = T0 + timedelta(seconds=t)
        for r, pace in {"master-0": 0.1, "worker-0": 0.1, "worker-1": 0.19}.items():
            book.record(r, 0, Report(step=int(t / pace), total=10_000), at)
    p = book.progress()
    assert p is not None and [s.replica for s in p.stragglers] == ["worker-1"]
    assert stragglers(p) == ["Stragglers:  worker-1: 1.9x the median step time over the last minute"]
    assert straggler_mark(p) == " (straggler worker-1)"
    assert [c.reporter for c in book.news()] == ["worker-1"] and book.news() == []


def test_a_reporter_that_reports_very_fast_keeps_a_bounded_window() -> None:
    """A report's cost does not grow with the reports of the last minute (a job reporting every step of
    a fast loop): about 240 samples a reporter, the latest always kept."""
    s = Stragglers()
    for i in range(20_000):
        s.note("master-0", T0 + timedelta(milliseconds=i), i)
    kept = s._seen["master-0"]
    assert len(kept) <= 241 and kept[-1][1] == 19_999


def test_under_torchrun_each_workers_rank_is_timed_and_the_slow_one_named() -> None:
    # two nodes of two workers each, one token per node: rank 3 (worker-0's second worker) is slow
    book = Book()
    ranks = {("master-0", 0): 0.1, ("master-0", 1): 0.1, ("worker-0", 2): 0.1, ("worker-0", 3): 0.19}
    for t in range(0, 30):
        at = T0 + timedelta(seconds=t)
        for (replica, rank), pace in ranks.items():
            book.record(replica, 0, Report(step=int(t / pace), total=10_000, rank=rank), at)
    p = book.progress()
    assert p is not None and [(s.replica, s.rank) for s in p.stragglers] == [("worker-0", 3)]
    assert stragglers(p) == ["Stragglers:  worker-0 rank 3: 1.9x the median step time over the last minute"]
    assert straggler_mark(p) == " (straggler worker-0 rank 3)"
    assert [c.reporter for c in book.news()] == ["worker-0 rank 3"]
    # the replica's new attempt (a restart) times each of its ranks afresh
    book.record("worker-0", 1, Report(step=0, rank=2), T0 + timedelta(seconds=31))
    assert book.progress().stragglers == []  # type: ignore[union-attr]
    assert book._stragglers.step_time("worker-0 rank 3", T0 + timedelta(seconds=31)) is None
