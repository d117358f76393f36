"""core/round/kept.py: which ends of gone pods' logs a job's status keeps, bounded in number and size
whatever the job's size (a gang restart of 4,096 pods keeps KEPT_AT_MOST of them)."""

from __future__ import annotations

from torchjob.api.status import FailureInfo, JobStatus, KeptTail
from torchjob.core.round.kept import KEPT_AT_MOST, TAIL_BYTES, cut, keep, kept_tail


def tail(replica: str, attempt: int, text: str = "bye\n") -> KeptTail:
    return KeptTail(replica=replica, attempt=attempt, exitCode=143, tail=text)


def test_a_gang_restart_of_thousands_keeps_a_few_the_failing_one_and_the_master_first() -> None:
    status = JobStatus(failure=FailureInfo(replica="worker-3000", attempt=2, reason="ReplicaFailed", message="x"))
    gone = [tail("master-0", 2), *(tail(f"worker-{i}", 2) for i in reversed(range(4095)))]
    kept = keep(status, gone).keptTails
    assert len(kept) == KEPT_AT_MOST
    assert [t.replica for t in kept[:4]] == ["worker-3000", "master-0", "worker-0", "worker-1"]
    # a newer attempt goes ahead of the older ones, which make way for it
    newer = keep(keep(status, gone), [tail("worker-7", 3)]).keptTails
    assert newer[0] == tail("worker-7", 3) and len(newer) == KEPT_AT_MOST
    assert kept_tail(keep(status, gone), "worker-0", 2) == tail("worker-0", 2)
    assert kept_tail(keep(status, gone), "worker-4000", 2) is None


def test_nothing_new_leaves_the_status_as_it_is_and_a_long_message_is_cut() -> None:
    status = keep(JobStatus(), [tail("master-0", 0)])
    assert keep(status, [tail("master-0", 0)]) is status
    assert keep(status, [tail("worker-0", 0, "  \n")]) is status  # nothing said: nothing kept
    long = "".join(f"line {i} " + "é" * 20 + "\n" for i in range(200))
    short = cut(long)
    assert len(short.encode()) <= TAIL_BYTES and long.endswith(short) and short.startswith("line ")
    assert keep(JobStatus(), [tail("worker-0", 0, long)]).keptTails[0].tail == short
