"""A stalled job's stacks on a cluster, the pure side (issue 42): which the status keeps (core/round/kept.py: a few,
each bounded, with the attempts they were taken of), and core waiting for them, at most until the bound the
operator gives (World.stacks_due), before it acts on the stall."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from tests.core.test_stacks import RECEIVING, WAITING, dump, procs
from torchjob.api.status import JobStatus
from torchjob.core.round.kept import (
    STACKS_AT_MOST,
    STACKS_BYTES,
    head,
    keep_stacks,
    stacks_kept,
    stacks_of,
)

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_a_stalls_stacks_are_kept_with_their_attempts_a_few_at_most_each_bounded() -> None:
    taken = procs(("master-0", dump(0, 1, WAITING, "all_reduce")), ("worker-0", dump(1, 1, WAITING, "all_reduce")),
                  ("worker-1", dump(2, 1, RECEIVING, "recv")))
    kept = stacks_kept(taken, {"worker-1": 0, "master-0": 0, "worker-0": 0}, ["master-0"], AT)
    assert kept.short == ("ranks 0-1 in step (train.py:41); rank 2 in recv_from (train.py:33); "
                          "rank 2 differs from the rest (ranks 0-1)")
    assert list(kept.attempts) == ["master-0", "worker-0", "worker-1"] and kept.stalled == ["master-0"]
    assert "recv_from (/work/train.py:33)" in kept.stacks
    status = keep_stacks(JobStatus(), kept)
    assert keep_stacks(status, kept) is status  # the same again: nothing new
    assert stacks_of(status, "worker-1", 0) == kept and stacks_of(status, "worker-1", 1) is None
    # each restart's stall keeps its own, the newest first, at most STACKS_AT_MOST
    for attempt in range(1, 7):
        status = keep_stacks(status, kept.model_copy(update={"attempts": {"master-0": attempt}}))
    assert len(status.keptStacks) == STACKS_AT_MOST
    assert [k.attempts["master-0"] for k in status.keptStacks] == [6, 5, 4, 3]
    # nobody answered: said so, not an empty string
    assert stacks_kept(replace(taken, processes=[]), {"master-0": 0}, ["master-0"], AT).short == "no rank answered"


def test_the_full_form_of_thousands_of_ranks_is_cut_at_a_line_saying_so() -> None:
    text = "".join(f"rank {i} (main thread), most recent call first:\n    step (/work/train.py:{i})\n\n"
                   for i in range(4096))
    cut = head(text)
    assert len(cut.encode()) <= STACKS_BYTES and cut.startswith("rank 0 (main thread)")
    assert cut.endswith("... (cut: the pods' logs had it whole)\n")
    assert text.startswith(cut.removesuffix("... (cut: the pods' logs had it whole)\n"))
    assert head("short\n") == "short\n"


def test_core_waits_for_the_stacks_being_taken_at_most_until_their_bound() -> None:
    from datetime import timedelta

    from tests.core.sim import at, running
    from tests.jobs import make_job
    from torchjob.core.round.reconcile import World

    job = make_job("j", workers=1, run_policy={"progressDeadlineSeconds": 5})
    d, w = running(job)
    obs = {n: replace(o, last_report=at(0)) for n, o in w.replicas.items()}
    due = at(0) + timedelta(seconds=15)  # the stall is due at 5 s; the stacks are awaited until 15 s
    waiting = d(World(replicas=obs, stacks_due=due), 6)
    assert waiting.status.failure is None and waiting.actions == [] and waiting.requeue_at == due
    assert not [e for e in waiting.events if e.reason == "Stalled"]
    # taken: core acts at once, the stall's message ending with them
    where = "rank 0 in <module> (ddp_progress.py:51); rank 1 in <module> (ddp_progress.py:50)"
    taken = d(World(replicas=obs, stacks=where), 7)
    assert taken.status.failure is not None and taken.status.failure.message.endswith(f"{where}: the job is stalled")
    # the bound passed without them (the runtime says so in `stacks`): core acts
    late = d(World(replicas=obs, stacks_due=due), 15)
    assert late.status.failure is not None and late.status.failure.reason == "ProgressDeadlineExceeded"
