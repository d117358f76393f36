"""The failing rank of a replica of several processes, and its own words (issue 47): when one rank
raises, its peers fail a moment later in a collective (gloo's `Connection closed by peer`); the root
cause quotes the rank whose error is its own, not the replica's last lines."""

from __future__ import annotations

from torchjob.core.diagnosis import rank_errors, torch_errors

OWN = "RuntimeError: lightning: injected failure on global rank 1 at step 5"
PEER = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed "
        "by peer [127.0.0.1]:13476. This is typically caused by a remote worker crashing.")


def traceback(rank: int, error: str, frames: int = 2) -> list[str]:
    tag = f"[rank{rank}]: "
    lines = [tag + "Traceback (most recent call last):"]
    for i in range(frames):
        lines += [f'{tag}  File "/w/train.py", line {10 + i}, in step{i}', f"{tag}    step{i + 1}()"]
    return [*lines, tag + error]


# A Lightning 1x2 replica's log as torchrun left it (a real run's shape, its frames fewer): rank 1
# raised, rank 0 failed in its next all-reduce, torchrun's report names rank 1.
REPORT = """\
E1129 03:34:26.286000 17348 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 17575) of binary: /venv/bin/python
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 17574)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 17574
------------------------------------------------------------
Root Cause (first observed failure):
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 17575)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines()  # noqa: E501
LIGHTNING = ["[rank0]: Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
             "[rank1]: Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2",
             *traceback(1, OWN, frames=30), *traceback(0, PEER, frames=30), *REPORT]


def test_the_root_cause_quotes_the_failing_ranks_own_exception_not_the_last_lines() -> None:
    block = torch_errors.last_words(LIGHTNING, 15)
    assert block[0] == "  torchrun's root cause: rank 1 (local_rank: 1): exit code 1 (pid: 17575)"  # not its hint
    assert block[1] == "  rank      : 1 (its own error; rank 0 failed after it, in a collective)"
    assert block[2].startswith("  last ") and block[2].endswith(" lines of rank 1's own output:")
    quoted = block[3:]
    assert quoted[0] == "    [rank1]: Traceback (most recent call last):"
    assert quoted[-1] == "    [rank1]: " + OWN
    assert not any("[rank0]" in q or "Connection closed" in q for q in quoted), quoted
    # run's brief form: the error and where, from rank 1's own frames
    brief = torch_errors.brief("\n".join(block), "again").splitlines()
    assert f"  error     : {OWN}" in brief and "  raised at : /w/train.py, line 39, in step29" in brief
    assert torch_errors.said("\n".join(LIGHTNING)) == OWN  # a status's one line too


def test_a_long_traceback_keeps_its_head_and_its_end() -> None:
    q = rank_errors.quote(traceback(1, OWN, frames=80), 15, traceback_lines=20)
    assert len(q.lines) == 20 and q.lines[0].endswith("Traceback (most recent call last):")
    assert q.lines[1].strip() == "..." and q.lines[-1].endswith(OWN)
    assert torch_errors.raised_at(q.lines) == (OWN, "/w/train.py, line 89, in step79")


def test_which_rank_failed_when_several_raised() -> None:
    # the follow-on error printed first (rank 0 was quicker to write): still rank 1's own
    assert rank_errors.failing([*traceback(0, PEER), *traceback(1, OWN)])[0] == 1  # type: ignore[index]
    # torchrun names rank 0 (both died in one of its polls), whose error is a peer's: rank 1's is the failure
    assert rank_errors.failing([*traceback(0, PEER), *traceback(1, OWN)], named=0)[0] == 1  # type: ignore[index]
    # two errors of their own: torchrun's first observed failure, else the earliest in the output
    both = [*traceback(0, "ValueError: bad shard"), *traceback(1, OWN)]
    assert rank_errors.failing(both, named=1)[0] == 1  # type: ignore[index]
    assert rank_errors.failing(both)[0] == 0  # type: ignore[index]
    # only follow-on errors (the failing rank died by a signal, without a traceback): torchrun's named rank
    peers = [*traceback(0, PEER), *traceback(1, "RuntimeError: recvBytes: Connection reset by peer")]
    assert rank_errors.failing(peers, named=3)[0] == 3  # type: ignore[index]
    assert rank_errors.failing(peers)[0] == 0  # type: ignore[index]
    assert rank_errors.failing(["step 1", "step 2"]) is None
    # a rank that died without a traceback: the output's last lines, as before
    q = rank_errors.quote(["rank 0 up", "terminate called after throwing", "  what():  boom"], 2, named=0)
    assert q.lines == ["terminate called after throwing", "  what():  boom"] and q.title == "last 2 lines of its output"


def test_a_tag_written_twice_counts_once_and_untagged_lines_are_their_own() -> None:
    assert rank_errors.untag("[rank1]: [rank1]: Traceback (most recent call last):") == (
        1, "Traceback (most recent call last):")
    assert rank_errors.untag("plain") == (None, "plain")
    doubled = ["[rank1]: " + line for line in traceback(1, OWN)]
    assert rank_errors.errors(doubled) == [rank_errors.RankError(1, 0, OWN)]
    # one process (no tag): its traceback, then the warning torch prints at exit, not the exception
    one = ["epoch 0", *[line.removeprefix("[rank1]: ") for line in traceback(1, OWN)],
           "[rank0]:[W1129 ProcessGroupGloo.cpp:1] destroy_process_group() was not called"]
    q = rank_errors.quote(one, 15)
    assert q.rank is None and q.lines[0] == "Traceback (most recent call last):" and q.lines[-1] == OWN


def test_follow_on_errors_are_told_from_a_ranks_own() -> None:
    for error in (PEER, "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
                  "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:"
                  "29500: Connection reset by peer",
                  "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
                  "torch.distributed.elastic.multiprocessing.api.SignalException: Process 12 got signal: 15"):
        assert rank_errors.follow_on(error), error
    for error in (OWN, "ValueError: no data in /data/shard-3", "torch.OutOfMemoryError: CUDA out of memory."):
        assert not rank_errors.follow_on(error), error


def test_the_replica_that_ended_the_job_may_only_have_failed_after_another() -> None:
    """2x1: rank 0's replica (master-0) may end first with its follow-on error; worker-0 raised its own."""
    master = traceback(0, PEER)
    worker = ["step 4", *[line.removeprefix("[rank1]: ") for line in traceback(1, OWN)]]
    assert rank_errors.first_own(master, [("worker-0", worker)]) == ("worker-0", rank_errors.RankError(None, 1, OWN))
    assert rank_errors.first_own(traceback(1, OWN), [("worker-0", worker)]) is None  # its own
    assert rank_errors.first_own(master, [("worker-0", traceback(1, PEER))]) is None  # nobody's own
    assert rank_errors.first_own(["killed"], [("worker-0", traceback(1, OWN))])[1].rank == 1  # type: ignore[index]


def test_a_launchers_report_of_its_child_gives_way_to_the_childs_own_error() -> None:
    """`accelerate launch` runs the script as a child: the child's traceback (tagged by torch's excepthook
    or not), then the launcher's CalledProcessError about it: the child's is the failure."""
    child = ["Traceback (most recent call last):", '  File "/w/acc.py", line 24, in main',
             "    raise RuntimeError(...)", "RuntimeError: accelerate: injected failure on process 1 at step 5"]
    launcher = ["Traceback (most recent call last):", '  File "/venv/accelerate/commands/launch.py", line 999, '
                "in simple_launcher", "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)",
                "subprocess.CalledProcessError: Command '['/venv/bin/python', '/w/acc.py']' returned non-zero exit "
                "status 1."]
    for lines in ([*child, *launcher], [*["[rank1]: " + line for line in child], *launcher]):
        block = torch_errors.last_words(lines, 15)
        assert block[-1] == "    " + ("[rank1]: " if lines[0].startswith("[rank1]") else "") + child[-1], block
        assert not any("CalledProcessError" in line for line in block), block
        assert torch_errors.raised_at([b[4:] for b in block[1:]]) == (child[-1], "/w/acc.py, line 24, in main")


def test_a_rank_that_died_without_a_traceback_is_quoted_without_its_peers_follow_on_errors() -> None:
    """torchrun names rank 0, aborted by a C++ exception (no traceback); rank 1 then failed in its barrier:
    the output's last lines, rank 1's follow-on traceback left out (it is not why the job failed)."""
    lines = ["[rank0]: rank 0 up", "[rank1]: rank 1 up", *traceback(1, PEER),
             "[rank0]: terminate called after throwing an instance of 'gloo::EnforceNotMet'"]
    q = rank_errors.quote(lines, 15, named=0)
    assert q.rank == 0 and [e.rank for e in q.followed] == [1]
    assert q.lines == ["[rank0]: rank 0 up", "[rank1]: rank 1 up",
                       "[rank0]: terminate called after throwing an instance of 'gloo::EnforceNotMet'"]
    report = [line.replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)") for line in REPORT]
    block = torch_errors.last_words([*lines, *report], 15)
    assert block[:2] == ["  torchrun's root cause: rank 0 (local_rank: 0): exit code 1 (pid: 17575)",
                         "  rank      : 0 (its own error; rank 1 failed after it, in a collective)"], block
    assert torch_errors.brief("\n".join(block), "x") == "\n".join(block)  # no traceback left to shorten: whole
