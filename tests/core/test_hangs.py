"""Hangs without any report (runPolicy.hangDeadlineSeconds, core/policies/hangs.py): when a rank
moved, since when none did, and the verdict (the event Stalled, a policy on it, HangDeadlineExceeded)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core.sim import at, running
from tests.jobs import job_data, make_job
from torchjob.api.errors import InvalidJob
from torchjob.api.load import job_from_data
from torchjob.core.policies import hangs
from torchjob.core.policies.hangs import RankSample, Stillness
from torchjob.core.round.reconcile import Create, Stop
from torchjob.core.round.world import Still

STUCK = ("recv", 12)


def observed(*samples: tuple[float, dict[str, RankSample]], complete: bool = True) -> Stillness:
    s = Stillness()
    for t, ranks in samples:
        s.observe(at(t), ranks, complete)
    return s


def test_ranks_whose_stacks_cpu_and_sleep_stay_put_are_still_since_the_first_sample() -> None:
    same = {"r0": RankSample(STUCK, 1.0, 10), "r1": RankSample(("all_reduce", 16), 2.0, 7)}
    # a sample's own signal may wake a main thread (2 wakes) and cost a tick of CPU: not a move
    nudged = {"r0": RankSample(STUCK, 1.01, 12), "r1": RankSample(("all_reduce", 16), 2.0, 7)}
    s = observed((0, same), (1, same), (2, nudged), (3, nudged))
    assert s.still() == Still(since=at(0), seen_at=at(3))


@pytest.mark.parametrize("moved", [
    RankSample(("recv", 13), 1.0, 10),  # its stack changed (another line)
    RankSample(STUCK, 1.05, 10),  # 50 ms of CPU in 1 s: 5 %
    RankSample(STUCK, 1.0, 13),  # its main thread slept and woke 3 times (time.sleep, a poll)
])
def test_a_rank_moved_when_its_stack_cpu_or_sleeps_changed(moved: RankSample) -> None:
    still = {"r0": RankSample(STUCK, 1.0, 10), "r1": RankSample(("all_reduce", 16), 2.0, 7)}
    s = observed((0, still), (1, still), (2, {**still, "r0": moved}))
    assert s.still() == Still(since=at(2), seen_at=at(2))


def test_cpu_under_one_percent_of_the_interval_is_not_a_move() -> None:
    # 10 s between samples: 1 % is 0.1 s of CPU
    s = observed((0, {"r0": RankSample(STUCK, 1.0)}), (10, {"r0": RankSample(STUCK, 1.09)}))
    assert s.still() == Still(since=at(0), seen_at=at(10))
    s.observe(at(20), {"r0": RankSample(STUCK, 1.2)}, True)
    assert s.still() == Still(since=at(20), seen_at=at(20))


def test_a_process_that_comes_or_goes_is_a_move() -> None:
    one = {"r0": RankSample(STUCK)}
    s = observed((0, one), (5, {**one, "r1": RankSample(STUCK)}))
    assert s.still() == Still(since=at(5), seen_at=at(5))
    s.observe(at(9), one, True)
    assert s.still() == Still(since=at(9), seen_at=at(9))


def test_nothing_is_judged_without_a_sample_of_every_running_replica() -> None:
    assert Stillness().still() is None
    assert observed((0, {"r0": RankSample(STUCK)}), complete=False).still() is None
    assert observed((0, {}), complete=True).still() is None


def test_the_deadline_its_default_its_samples_and_its_bound() -> None:
    assert hangs.deadline(make_job("j")) == hangs.DEFAULT_S == 300
    assert hangs.deadline(make_job("j", run_policy={"hangDeadlineSeconds": 0})) is None  # 0: not watched
    debug = job_data("j", run_policy={"hangDeadlineSeconds": 60})
    debug["spec"]["runMode"] = {"debug": {"enabled": True}}
    assert hangs.deadline(job_from_data(debug)) is None  # a debug run's replicas wait for you
    assert hangs.sample_every(300) == 30 and hangs.sample_every(3) == 0.5 and hangs.sample_every(3600) == 60
    assert hangs.bound(300) == 360 and hangs.bound(3) == 4


def test_a_negative_deadline_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidJob) as e:
        job_from_data(job_data("j", run_policy={"hangDeadlineSeconds": -1}))
    assert "spec.runPolicy.hangDeadlineSeconds" in str(e.value) and "must not be negative" in str(e.value)


def test_a_hung_job_fails_with_the_stacks_once_no_rank_moved_for_the_deadline() -> None:
    job = make_job("j", workers=1, run_policy={"hangDeadlineSeconds": 10})
    d, w = running(job)
    where = "rank 0 in step (train.py:16); rank 1 in wait_for_peer (train.py:12)"
    # the latest sample, 9.5 s after the last move: not yet
    plan = d(replace(w, still=Still(at(0), at(9.5)), stacks=None), 10.5)
    assert plan.status.state == "Running" and plan.status.failure is None
    plan = d(replace(w, still=Still(at(0), at(10)), stacks=where), 10.2)
    failure = plan.status.failure
    assert failure is not None and failure.reason == "HangDeadlineExceeded" and failure.replica == "master-0"
    assert failure.message == ("no rank moved for 10s (runPolicy.hangDeadlineSeconds: each one asleep at the same "
                               f"stack); where the ranks were: {where}: the job is hung")
    assert [e.reason for e in plan.events if e.reason == "Stalled"] == ["Stalled"]
    assert {a.replica.name for a in plan.actions if isinstance(a, Stop)} == {"master-0", "worker-0"}


def test_not_watched_no_verdict() -> None:
    job = make_job("j", workers=1, run_policy={"hangDeadlineSeconds": 0})
    d, w = running(job)
    plan = d(replace(w, still=Still(at(0), at(1000))), 1000)
    assert plan.status.state == "Running"


def test_a_stalled_policy_restarts_a_hung_job() -> None:
    data = job_data("j", workers=1, restart_policy="OnFailure",
                    run_policy={"hangDeadlineSeconds": 10, "progressDeadlineSeconds": 600, "backoffLimit": 3})
    data["spec"]["policies"] = [{"event": "Stalled", "action": "RestartJob"}]
    job = job_from_data(data)
    d, w = running(job)
    plan = d(replace(w, still=Still(at(0), at(11))), 11)
    assert plan.status.failure is None and plan.status.restartCount == 1
    restarting = [e.message for e in plan.events if e.reason == "Restarting"]
    assert restarting and "hung" in restarting[0], plan.events
    assert {a.replica.name for a in plan.actions if isinstance(a, Stop)} == {"master-0", "worker-0"}
    assert not [a for a in plan.actions if isinstance(a, Create)]  # made again once they are gone


def test_stacks_are_needed_only_where_no_rank_moved_by_its_counters() -> None:
    # a running job's ranks are never signalled: a signal can cut a system call short
    s = observed((0, {"r0": RankSample(STUCK, 1.0, 10), "r1": RankSample(STUCK, 2.0, 7)}))
    assert s.needs_stacks(at(1), {"r0": RankSample(None, 1.0, 11), "r1": RankSample(None, 2.0, 7)})
    assert not s.needs_stacks(at(1), {"r0": RankSample(None, 1.5, 10), "r1": RankSample(None, 2.0, 7)})  # CPU
    assert not s.needs_stacks(at(1), {"r0": RankSample(None, 1.0, 20), "r1": RankSample(None, 2.0, 7)})  # woke
    assert not s.needs_stacks(at(1), {"r0": RankSample(None, 1.0, 10)})  # r1 went: a move
    assert not Stillness().needs_stacks(at(0), {"r0": RankSample(None, 1.0, 10)})  # nothing to compare with


def test_a_sample_without_stacks_is_judged_by_its_counters() -> None:
    # the first sample, and one whose counters moved, take no stacks: the stacks after them are not a move
    s = observed((0, {"r0": RankSample(None, 1.0, 10)}), (1, {"r0": RankSample(STUCK, 1.0, 10)}),
                 (2, {"r0": RankSample(STUCK, 1.0, 10)}))
    assert s.still() == Still(since=at(0), seen_at=at(2))
