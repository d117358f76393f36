"""The metric history (progress/history.py): bounded, downsampled evenly, values as reported, a
restart replaces the curve past its step, and it goes on from what a runtime stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from torchjob.progress.book import Book
from torchjob.progress.history import KUBE_CAPACITY, KUBE_SERIES, LOCAL_CAPACITY, History
from torchjob.progress.protocol import Report

steps_st = st.lists(st.integers(0, 10**7), min_size=1, max_size=400).map(sorted)


@given(steps=steps_st, capacity=st.integers(2, 64))
def test_bounded_sorted_and_every_point_a_reported_one(steps: list[int], capacity: int) -> None:
    h = History(capacity=capacity)
    reported = {}
    for s in steps:
        h.record(s, {"loss": str(s * 0.5)})
        reported[s] = float(f"{s * 0.5:.5g}")
    assert h.points() <= capacity
    assert h.steps == sorted(set(h.steps))
    assert all(h.series["loss"][i] == reported[s] for i, s in enumerate(h.steps))  # the value reported there
    assert h.steps[-1] == steps[-1]  # the latest report is always kept
    # every bucket of `stride` steps holds at most one point
    assert len({s // h.stride for s in h.steps}) == h.points()


@given(n=st.integers(1, 20000), capacity=st.sampled_from([16, 256, 1024]))
@settings(max_examples=30, deadline=None)
def test_a_long_job_keeps_between_half_and_all_of_its_capacity_evenly(n: int, capacity: int) -> None:
    h = History(capacity=capacity)
    for s in range(n):
        h.record(s, {"loss": "1"})
    assert h.points() == min(n, capacity) or capacity // 2 <= h.points() <= capacity
    gaps = {b - a for a, b in zip(h.steps, h.steps[1:], strict=False)}
    assert len(gaps - {h.stride}) <= 1  # even, but for the last point (the latest report)


@given(steps=steps_st, cut=st.integers(0, 10**7))
def test_a_restart_drops_the_points_past_its_step(steps: list[int], cut: int) -> None:
    h = History(capacity=32)
    for s in steps:
        h.record(s, {"loss": "2"})
    h.record(cut, {"loss": "1"}, restart=True)
    assert h.steps[-1] == cut and h.series["loss"][-1] == 1.0
    assert all(s <= cut for s in h.steps)


@given(reports=st.lists(st.tuples(st.integers(0, 1000), st.sampled_from(["loss", "acc", "lr"]),
                                  st.sampled_from(["0.5", "nan", "inf", "x", "1e-9", "-3"])), max_size=200))
def test_columns_stay_aligned_and_only_numbers_are_drawn(reports: list[tuple[int, str, str]]) -> None:
    h = History(capacity=16)
    for step, name, value in sorted(reports):
        h.record(step, {name: value})
    dumped = h.dump()
    assert all(len(s.values) == len(dumped.steps) for s in dumped.series)
    assert all(v is None or isinstance(v, float) for s in dumped.series for v in s.values)
    names = [s.name for s in dumped.series]
    assert names[:1] == ["loss"] or "loss" not in names
    json.dumps(dumped.model_dump(mode="json"), allow_nan=False)  # JSON can hold it: no NaN


def test_loss_takes_the_place_of_another_metric_when_full() -> None:
    h = History(capacity=8, max_series=2)
    h.record(1, {"a": "1", "b": "2", "c": "3"})
    h.record(2, {"train_loss": "0.1"})
    assert sorted(h.series) == ["a", "train_loss"] and h.omitted == 2


@given(steps=steps_st)
def test_it_goes_on_from_what_was_stored(steps: list[int]) -> None:
    a = History(capacity=32)
    for s in steps:
        a.record(s, {"loss": "1"})
    b = History.load(a.dump(), capacity=32)
    assert b.dump() == a.dump()
    b.record(steps[-1] + 1, {"loss": "2"})
    a.record(steps[-1] + 1, {"loss": "2"})
    assert b.dump() == a.dump()


def test_a_million_step_job_keeps_a_few_thousand_points_locally_and_a_stated_size_on_kubernetes() -> None:
    at = datetime.now(UTC)
    local, kube = Book(), Book(KUBE_CAPACITY, KUBE_SERIES)
    for s in range(0, 1_000_001, 50):
        r = Report(step=s, total=1_000_000, metrics={"loss": str(1 / (s + 1)), "lr": "3e-4"})
        local.record("master-0", 0, r, at)
        kube.record("master-0", 0, r, at)
    lp, kp = local.progress(), kube.progress()
    assert lp is not None and lp.history is not None and kp is not None and kp.history is not None
    assert LOCAL_CAPACITY // 2 <= len(lp.history.steps) <= LOCAL_CAPACITY
    assert KUBE_CAPACITY // 2 <= len(kp.history.steps) <= KUBE_CAPACITY
    assert lp.history.steps[-1] == kp.history.steps[-1] == 1_000_000


def test_the_kubernetes_history_stays_within_its_stated_size_at_its_worst() -> None:
    """The bound docs/guide/dashboard.md states: every series full, every value at its longest."""
    h = History(capacity=KUBE_CAPACITY, max_series=KUBE_SERIES)
    for s in range(KUBE_CAPACITY):
        h.record(10**9 + s, {f"metric-with-a-name-of-64-characters-{i:02d}".ljust(64, "x"): "-1.23456789e-300"
                             for i in range(KUBE_SERIES + 4)})
    size = len(json.dumps(h.dump().model_dump(mode="json"), separators=(",", ":")))
    assert h.points() == KUBE_CAPACITY
    assert size <= 32 * 1024, size
