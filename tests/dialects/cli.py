"""`torchjob` run in-process (as `main()` runs it: errors as messages, exit codes), for tests that
need many quick calls; the end-to-end tests in tests/local run it as a process."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

from torchjob.cli.main import main


@dataclass
class Result:
    code: int
    out: str
    err: str


def torchjob(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    argv = sys.argv
    sys.argv = ["torchjob", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = argv
    return Result(code, out.getvalue(), err.getvalue())
