"""The fenced code blocks of the docs (docs/**/*.md and README.md), and who tests each.

Every block is either run by a test in tests/docs (which reads it from here, so the page and the
test cannot drift) or claimed by a test elsewhere: the line just before the block is
`<!-- tested by: tests/PATH.py::test_name -->`, naming the test that runs that very command or code.
tests/docs/test_blocks.py fails for a block that nobody claims, or a claim whose test does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
CLAIM = re.compile(r"^\s*<!--\s*tested by:\s*(?P<test>\S+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str  # the block's content, its indentation removed
    claim: str | None  # "tests/PATH.py::test_name", or None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip().strip(fence[0]) == ""):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        claim = CLAIM.match(lines[start - 1]) if start else None
        out.append(Block(str(path.relative_to(REPO)), start + 1, m["info"].strip().split(" ")[0],
                         "\n".join(body), claim["test"] if claim else None))
    return out


def every_block() -> list[Block]:
    return [b for p in pages() for b in blocks_of(p)]


def claimed_by(test: str) -> list[Block]:
    """The blocks that name `test` ("tests/docs/FILE.py::test_name"): what that test must run."""
    found = [b for b in every_block() if b.claim == test]
    assert found, f"no block of the docs is claimed by {test}"
    return found


def tested(page: str | Path, test: str, lang: str | None = None) -> list[str]:
    """The texts of docs/PAGE's blocks claimed by `test` (its full id, or only its function name), in
    page order: what a test elsewhere reads and runs, so that the page and the test cannot drift."""
    path = page if isinstance(page, Path) else REPO / "docs" / page
    found = [b.text for b in blocks_of(path)
             if b.claim is not None and (b.claim == test or b.claim.endswith(f"::{test}"))
             and (lang is None or b.lang == lang)]
    assert found, f"{path.relative_to(REPO)} has no block tested by {test}"
    return found
