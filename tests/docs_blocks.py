"""The code blocks of a docs page that a test runs: each fenced block right after a
`<!-- tested by: tests/PATH.py::test_name -->` comment naming that test, so that the page and what
runs cannot drift apart."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
BLOCK = re.compile(r"<!-- tested by: (?P<test>[^ ]+) -->\n```(?P<lang>[a-z]*)\n(?P<body>.*?)\n```", re.S)


def blocks(page: str, test: str, lang: str | None = None) -> list[str]:
    """The blocks of docs/PAGE marked as tested by `test` (`tests/x.py::test_y`), in page order."""
    text = (DOCS / page).read_text()
    found = [m["body"] for m in BLOCK.finditer(text) if m["test"] == test and (lang is None or m["lang"] == lang)]
    assert found, f"docs/{page} has no block tested by {test}"
    return found


def console(block: str) -> list[tuple[str, str]]:
    """A console block as (command, the output shown after it) pairs: `$ ` starts a command."""
    out: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
    return [(cmd, "\n".join(shown)) for cmd, shown in out]


def shell_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a shell in which `torchjob` is this tree's command (as a user's install is)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    exe = bin_ / "torchjob"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -c "import sys; sys.argv[0] = \'torchjob\'; '
                   f'from torchjob.cli.main import main; main()" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO / "src"),
            "TORCHJOB_HOME": str(tmp_path / "home")}
