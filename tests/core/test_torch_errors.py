"""torch's error file, as locally written and as a pod's termination message."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tests.jobs import make_job
from torchjob.api.status import ConditionType
from torchjob.core.diagnosis import torch_errors
from torchjob.core.round.reconcile import Observed, Phase, World, reconcile
from torchjob.core.shape.topology import ReplicaId

TRACE = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n"
         "RuntimeError: worker-0 could not load its shard")
ERROR_FILE = json.dumps({"message": {"message": "RuntimeError: worker-0 could not load its shard",
                                     "extraInfo": {"py_callstack": TRACE, "timestamp": "1"}}})


def test_the_traceback_and_its_headline() -> None:
    assert torch_errors.traceback(ERROR_FILE) == TRACE
    assert torch_errors.headline(ERROR_FILE) == "RuntimeError: worker-0 could not load its shard"
    assert torch_errors.traceback("killed by the OOM killer") is None
    assert torch_errors.headline("first\nkilled by the OOM killer\n") == "killed by the OOM killer"
    assert torch_errors.headline("x" * 400, limit=10) == "xxxxxxx..."
    assert torch_errors.headline("\n \n") is None


def test_the_root_cause_carries_the_replica_s_own_error() -> None:
    job = make_job("demo", workers=1, restart_policy="Never")
    now = datetime(2026, 11, 23, tzinfo=UTC)
    first = reconcile(job, World(replicas={}), now)
    job = job.model_copy(update={"status": first.status})
    failed = Observed(ReplicaId("Worker", 0), 0, Phase.FAILED, 1, "Error",
                      "RuntimeError: worker-0 could not load its shard", now)
    plan = reconcile(job, World(replicas={"worker-0": failed,
                                          "master-0": Observed(ReplicaId("Master", 0), 0, Phase.RUNNING)}), now)
    assert plan.status.failure is not None
    assert plan.status.failure.message == ("worker-0 failed with exit code 1 (restartPolicy Never): "
                                           "RuntimeError: worker-0 could not load its shard")
    failed = plan.status.condition(ConditionType.FAILED)
    assert failed.message == "worker-0 failed with exit code 1 (restartPolicy Never)"


# A replica's output as torchrun left it when one of its ranks aborted (a real run of
# `torchjob run -j 2x2` on a script that aborts on rank 0, its agent's traceback shortened).
TORCHRUN_OUTPUT = """\
*****************************************
Setting OMP_NUM_THREADS environment variable for each process to be 1 in default ...
*****************************************
rank 1 up
rank 0 up
terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at gloo/transport/tcp/address.cc:131] rv != -1. getpeername: Transport endpoint is not connected
W1126 22:56:13.721000 13381 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 13472 closing signal SIGTERM
E1126 22:56:13.756000 13381 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 0 (pid: 13469) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 386, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
abort.py FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_22:56:13
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 13472)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 13472
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_22:56:13
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 13469)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 13469
=======================================================
"""  # noqa: E501 (the lines as torchrun writes them)


def test_torchruns_report_gives_way_to_the_ranks_own_last_words() -> None:
    found = torch_errors.torchrun_report(TORCHRUN_OUTPUT.splitlines())
    assert found is not None
    own, cause = found
    assert cause == "torchrun's root cause: rank 0 (local_rank: 0): Signal 6 (SIGABRT) received by PID 13469"
    assert own[-2:] == ["terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                        "  what():  [enforce fail at gloo/transport/tcp/address.cc:131] rv != -1. getpeername: "
                        "Transport endpoint is not connected"]
    assert not any("torch/distributed/elastic" in line or "FAILED" in line for line in own)


def test_output_without_torchruns_report_is_left_alone() -> None:
    assert torch_errors.torchrun_report(["step 1", "Traceback (most recent call last):", "ValueError: x"]) is None


def test_the_docs_tests_know_torchs_abort_by_torchjobs_root_cause() -> None:
    from tests.docs.upstream import torch_aborted

    _, cause = torch_errors.torchrun_report(TORCHRUN_OUTPUT.splitlines()) or ([], "")
    assert torch_aborted(f"Root cause (the failure that ended the job):\n  {cause}\n")
    assert not torch_aborted("torchrun's root cause: rank 1 (local_rank: 1): Signal 15 (SIGTERM) received by PID 9")


CAUSE = """\
Root cause (the failure that ended the job):
  replica   : master-0 (attempt 0, node rank 0)
  last 9 lines of the ranks' own output (before torchrun's report):
    [rank0]: starting 0
    [rank1]: Traceback (most recent call last):
    [rank0]: Traceback (most recent call last):
    [rank1]:   File "/w/f.py", line 6, in <module>
    [rank1]:     main()
    [rank1]:   File "/w/f.py", line 5, in main
    [rank1]:     1 / 0
    [rank1]:     ~~^~~
    [rank1]: ZeroDivisionError: division by zero
    [rank0]:   File "/w/f.py", line 9, in <module>
    [rank0]: KeyError: 'x'
    [rank1]: a line after it
========================================================================"""


def test_a_streamed_traceback_becomes_its_error_and_where_it_was_raised() -> None:
    from torchjob.core.diagnosis.torch_errors import brief, raised_at

    out = brief(CAUSE, "`torchjob logs f` shows it again")
    assert out.splitlines()[2:] == [
        "  error     : ZeroDivisionError: division by zero",  # the last traceback's rank's own lines
        "  raised at : /w/f.py, line 5, in main",
        "  traceback : in the job's output above (`torchjob logs f` shows it again)",
        "=" * 72]
    assert brief(CAUSE, "x", lambda line: not line.startswith("[rank1]")) == CAUSE  # a filter hid rank 1: whole
    said = CAUSE.replace("  replica   :", "master-0 failed: ZeroDivisionError: division by zero\n  replica   :")
    assert "  error     :" not in brief(said, "x")  # the failure's message already says it
    plain = "  last 2 lines of its output:\n    usage: train.py\n    train.py: error: bad --epochs"
    assert brief(plain, "x") == plain  # no traceback: nothing to shorten
    assert raised_at(["Traceback (most recent call last):", '  File "a.py", line 1', "SystemExit: 3"]) == (
        "SystemExit: 3", "a.py, line 1")
