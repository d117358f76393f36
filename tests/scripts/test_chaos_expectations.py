"""bench/chaos.py's judgement of how each job should have ended: a millisecond test of the rules
the real chaos run (bench/chaos.py on the real node) applies, the case it once got wrong first."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_chaos", REPO / "bench" / "chaos.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_chaos"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


class Gone:
    """A client whose job is already gone (the delete finds nothing)."""

    def delete(self, *args: object, **kwargs: object) -> None:
        return None


def test_a_victim_that_succeeded_before_the_final_cleanup_is_judged_by_its_success() -> None:
    m = chaos()
    run = m.Chaos.__new__(m.Chaos)
    run.client, run.ns = Gone(), "chaos"
    victim = m.Job("victim", "victim-6", 0.0, end="Succeeded", reason="Succeeded: done")
    run.delete_job(victim)  # the end of the run deletes every job, ended or not
    assert victim.expected()


def test_a_victim_deleted_while_it_ran_must_end_deleted() -> None:
    m = chaos()
    run = m.Chaos.__new__(m.Chaos)
    run.client, run.ns = Gone(), "chaos"
    victim = m.Job("victim", "victim-2", 0.0)
    run.delete_job(victim)
    victim.end = "Deleted"
    assert victim.expected()
    victim.end = "Succeeded"  # it went on to the end although it was deleted
    assert not victim.expected()


def test_restartable_and_failing_jobs() -> None:
    m = chaos()
    assert m.Job("ddp", "ddp-1", 0.0, end="Succeeded").expected()
    assert not m.Job("ddp", "ddp-1", 0.0, end="Failed", reason="ReplicaFailed: x").expected()
    assert m.Job("ddp", "ddp-1", 0.0, end="Failed", restarts=6, reason="BackoffLimitExceeded: x").expected()
    assert m.Job("failing", "failing-1", 0.0, end="Failed").expected()
    assert not m.Job("failing", "failing-1", 0.0, end="Succeeded").expected()
