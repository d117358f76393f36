"""A replica's last words as a cluster keeps them (its termination message: torch's error file, or
with FallbackToLogsOnError the end of its log): the line a status says, the block a root cause quotes."""

from __future__ import annotations

from tests.core.test_torch_errors import ERROR_FILE, TORCHRUN_OUTPUT
from torchjob.core.diagnosis import torch_errors

# what a script's argparse prints, and exits 2 with
ARGPARSE = """\
usage: train.py [-h] [--epochs EPOCHS]
train.py: error: argument --epochs: invalid int value: 'five'
"""
TRACEBACK = """\
epoch 0 loss 2.3
Traceback (most recent call last):
  File "/workspace/train.py", line 40, in <module>
    main()
  File "/workspace/train.py", line 31, in main
    raise ValueError("no data in /data/shard-3")
ValueError: no data in /data/shard-3
[rank0]:[W1129 03:00:00.000000 ProcessGroupGloo.cpp:1] destroy_process_group() was not called
"""


def test_the_line_a_status_says_is_the_scripts_own_error() -> None:
    assert torch_errors.said(ARGPARSE) == "train.py: error: argument --epochs: invalid int value: 'five'"
    # the exception's line, not torch's warning printed at exit after it
    assert torch_errors.said(TRACEBACK) == "ValueError: no data in /data/shard-3"
    assert torch_errors.said(ERROR_FILE) == "RuntimeError: worker-0 could not load its shard"
    # torchrun's report hides the rank's own words: they are said, not the report's rule
    assert torch_errors.said(TORCHRUN_OUTPUT) == (
        "what():  [enforce fail at gloo/transport/tcp/address.cc:131] rv != -1. getpeername: "
        "Transport endpoint is not connected")
    assert torch_errors.said("killed\n\n") == "killed"
    assert torch_errors.said("\n \n") is None
    assert torch_errors.said("x" * 400, limit=10) == "xxxxxxx..."


def test_the_quoted_block_is_the_end_or_the_ranks_own_lines_before_torchruns_report() -> None:
    assert torch_errors.last_words(ARGPARSE.splitlines(), 15) == [
        "  last 2 lines of its output:", "    usage: train.py [-h] [--epochs EPOCHS]",
        "    train.py: error: argument --epochs: invalid int value: 'five'"]
    assert torch_errors.last_words(["a", "b", "c"], 2) == ["  last 2 lines of its output:", "    b", "    c"]
    assert torch_errors.last_words([], 15) == []
    block = torch_errors.last_words(TORCHRUN_OUTPUT.splitlines(), 3)
    assert block[0] == "  torchrun's root cause: rank 0 (local_rank: 0): Signal 6 (SIGABRT) received by PID 13469"
    assert block[1] == "  last 3 lines of the ranks' own output (before torchrun's report):"
    assert block[2:] == ["    rank 0 up", "    terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                         "      what():  [enforce fail at gloo/transport/tcp/address.cc:131] rv != -1. getpeername: "
                         "Transport endpoint is not connected"]
