"""Every code block of the docs is run by a test, and the README stays a front door."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.docs.blocks import REPO, every_block

README_LIMIT = 200


@cache
def _tests_in(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}::{m.name}" for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)}
    return frozenset(n for n in names if n.split("::")[-1].startswith("test"))


def test_every_block_is_claimed_by_a_test_that_exists() -> None:
    unclaimed, broken = [], []
    for b in every_block():
        if b.claim is None:
            unclaimed.append(f"{b.where} ({b.lang or 'no language'}): {b.text.splitlines()[0] if b.text else ''}")
            continue
        path, _, name = b.claim.partition("::")
        file = REPO / path
        if not path.startswith("tests/") or not file.is_file() or name not in _tests_in(file):
            broken.append(f"{b.where}: {b.claim}")
    assert not unclaimed, ("blocks no test runs (put <!-- tested by: tests/PATH.py::test_name --> on the line "
                           "before each):\n  " + "\n  ".join(unclaimed))
    assert not broken, "claims that name no test:\n  " + "\n  ".join(broken)


def test_the_blocks_of_tests_docs_are_all_run() -> None:
    # a claim naming a tests/docs test is only true if that test reads its blocks (claimed_by)
    for b in every_block():
        if b.claim and b.claim.startswith("tests/docs/"):
            path, _, name = b.claim.partition("::")
            source = (REPO / path).read_text(encoding="utf-8")
            fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
            body = ast.unparse(fn)
            reads = ("claimed_by(", "_of(", "_run_page(")  # tests/docs/test_docs_run.py's readers of claimed blocks
            assert any(r in body for r in reads), f"{b.where}: {b.claim} does not read the blocks it claims"


def test_the_readme_is_a_front_door() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_LIMIT, f"README.md has {lines} lines; the limit is {README_LIMIT}: move the rest to docs/"


def test_the_readmes_links_lead_somewhere() -> None:
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"
