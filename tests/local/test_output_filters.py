"""The pure parts of what a job's output shows (issue 31, issue 30 item 6), line by line: torchrun's noise
kept from the console, the rank tag's whole lines, the value's line read only from rank 0 with the job's
nonce, and the lines no face shows."""

from __future__ import annotations

import io
import json
import os
import runpy
import sys
from pathlib import Path

import pytest

from torchjob.api.output import hidden
from torchjob.local.ranktag import HOOK_DIR
from torchjob.local.supervisor.quiet import QuietStop
from torchjob.sdk.ship import value_in

SIGNAL_TRACE = [
    b"W1127 19:54:34.952000 31725 torch/distributed/elastic/agent/server/api.py:752] Received 15 death signal, "
    b"shutting down workers\n",
    b"Traceback (most recent call last):\n",
    b'  File "<frozen runpy>", line 198, in _run_module_as_main\n',
    b"    time.sleep(monitor_interval)\n",
    b"torch.distributed.elastic.multiprocessing.api.SignalException: Process 31725 got signal: 15\n",
]
CHILD_FAILED = [
    b"E1127 20:20:57.041000 16496 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
    b"local_rank: 1 (pid: 16806) of binary: python\n",
    b"Traceback (most recent call last):\n",
    b'  File "/x/run.py", line 1138, in main\n',
    b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
    b"============================================================\n",
    b"q.py FAILED\n",
    b"------------------------------------------------------------\n",
    b"  traceback : RuntimeError: boom\n",
    b"============================================================\n",
]
USER_TRACE = [b"Traceback (most recent call last):\n", b'  File "train.py", line 3, in <module>\n',
              b"ValueError: the user's own\n"]


def shown(lines: list[bytes], stopping: bool) -> list[bytes]:
    f = QuietStop(lambda: stopping)
    return [out for line in lines for out in f.feed(line)] + list(f.end())


def test_a_stopped_agents_signal_traceback_is_kept_from_the_console() -> None:
    assert shown([b"step 3\n", *SIGNAL_TRACE, b"after\n"], stopping=True) == [b"step 3\n", b"after\n"]
    # not stopping: its lines are the user's to read (the traceback is not a SignalException's)
    assert shown(USER_TRACE, stopping=True) == USER_TRACE
    assert shown(USER_TRACE, stopping=False) == USER_TRACE


def test_torchruns_failure_report_is_kept_from_the_console_but_not_the_ranks_traceback() -> None:
    rank = [b"[rank1]: Traceback (most recent call last):\n", b"[rank1]: RuntimeError: boom\n"]
    assert shown([*rank, *CHILD_FAILED, b"last\n"], stopping=False) == [*rank, b"last\n"]


def test_a_held_traceback_that_never_ends_is_shown_at_the_end() -> None:
    assert shown(USER_TRACE[:2], stopping=False) == USER_TRACE[:2]


def test_the_hook_tags_whole_lines_with_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setenv("TORCHJOB_RANK_TAG", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != HOOK_DIR])
    runpy.run_path(os.path.join(HOOK_DIR, "sitecustomize.py"))
    print("a", "b")  # written in parts: one tagged line
    print("x", end="", flush=True)
    print("y\nz")
    sys.stdout.flush()
    assert out.getvalue() == "[rank3]: a b\n[rank3]: xy\n[rank3]: z\n"


def test_only_rank_0s_line_with_the_nonce_is_the_value() -> None:
    nonce = "n0nce"
    lines = [
        f'@@torchjob-result@@ {nonce} {{"real": 1}}',
        f'[rank1]: @@torchjob-result@@ {nonce} {{"spoof": 1}}',  # another rank of the replica
        'log: @@torchjob-result@@ n0nce {"spoof": 2}',  # in the middle of a line
        '@@torchjob-result@@ other {"spoof": 3}',  # another job's
    ]
    assert value_in(lines, nonce) == (True, {"real": 1}, None)
    assert value_in([f"[rank0]: @@torchjob-result@@ {nonce} [1, 2]"], nonce) == (True, [1, 2], None)
    assert value_in(lines[1:], nonce) == (False, None, None)
    # a cluster's logs prefix each line with its pod's replica (the e2e function job came back None)
    assert value_in([f"[master-0] @@torchjob-result@@ {nonce} 4"], nonce) == (True, 4, None)
    assert value_in([f"[master-0] [rank0]: @@torchjob-result@@ {nonce} 5"], nonce) == (True, 5, None)
    assert value_in([f"[master-0] [rank1]: @@torchjob-result@@ {nonce} 6"], nonce) == (False, None, None)


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000, ""])
def test_a_bad_value_line_is_a_reason_never_an_exception(text: str) -> None:
    found, value, why = value_in([f"@@torchjob-result@@ n {text}"], "n")
    assert not found and value is None and why and "could not be read back as JSON" in why


def test_the_value_lines_are_hidden_wherever_they_are_shown() -> None:
    for line in ('@@torchjob-result@@ n {"a": 1}', '[master-0] @@torchjob-result@@ n 1',
                 "[master-0] [rank0]: @@torchjob-unreturnable@@ n why", "[rank0]: @@torchjob-result@@ n 1"):
        assert hidden(line), line
    for line in ("log: @@torchjob-result@@ n 1", "[master-0] step 3", json.dumps({"a": "@@torchjob-result@@"})):
        assert not hidden(line), line
    assert Path(HOOK_DIR, "sitecustomize.py").is_file()
