"""The fenced blocks of a docs page that a test runs: the block right after the page's
`<!-- tested by: tests/PATH.py::test_name -->` comment, so that the page and the test cannot drift."""

from __future__ import annotations

import re
from pathlib import Path


def blocks(page: Path, test: str) -> list[str]:
    """Every fenced block whose tested-by comment names `test` (its function name), in page order."""
    text = page.read_text()
    pattern = re.compile(r"<!-- tested by: [^>]*::" + re.escape(test) + r" -->\n```[^\n]*\n(.*?)```", re.S)
    found = pattern.findall(text)
    if not found:
        raise AssertionError(f"{page} has no block tested by {test}")
    return [str(b) for b in found]
