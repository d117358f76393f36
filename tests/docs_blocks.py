"""The code blocks of a docs page that a test runs: each fenced block right after a
`<!-- tested by: tests/PATH.py::test_name -->` comment naming that test, so that the page and what
runs cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
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
