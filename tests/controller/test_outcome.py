"""A round's outcome as a value (kube/controller/round/outcome.py): the earliest look-again wins."""

from __future__ import annotations

from torchjob.kube.controller.round.outcome import DONE, GONE, Result


def test_the_earliest_look_again_wins_and_a_fact_learned_asks_for_one_at_once() -> None:
    assert DONE.after(None) == DONE == Result()
    assert DONE.after(5.0).after(1.0).after(3.0) == Result(requeue_after=1.0)
    assert DONE.after(-2.0) == Result(requeue_after=0.0)  # a deadline already past: at once
    assert DONE.after(2.0).now() == Result(requeue=True, requeue_after=2.0)
    assert Result(forget=True) == GONE and GONE.after(1.0).forget
