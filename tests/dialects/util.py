"""Helpers for the dialect tests: read a document from text, find its lines, collect its problems."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchjob.api.errors import InvalidJob, Problem
from torchjob.api.source import parse_documents
from torchjob.core.shape.advice import advise
from torchjob.dialects.load import Loaded, load_document

SEEDS = Path(__file__).parent / "seeds"
SOURCE = "job.yaml"


def doc(text: str) -> str:
    """A YAML document written indented inside a test."""
    return textwrap.dedent(text).lstrip("\n")


def read(text: str) -> Loaded:
    """A document in any dialect, as `torchjob` reads a file."""
    (document,) = parse_documents(text, SOURCE)
    loaded = load_document(document)
    loaded.notes += advise(loaded.job, loaded.doc)
    return loaded


def read_data(data: dict[str, Any]) -> Loaded:
    """Plain data written out as YAML text, then read back (a dialect's writer -> its reader)."""
    return read(yaml.safe_dump(data, sort_keys=False))


def problems(text: str) -> list[Problem]:
    with pytest.raises(InvalidJob) as err:
        read(text)
    assert err.value.source == SOURCE
    return err.value.problems


def only_problem(text: str) -> Problem:
    found = problems(text)
    assert len(found) == 1, [p.render() for p in found]
    return found[0]


def problem_at(text: str, path: str, needle: str, nth: int = 0) -> Problem:
    """The only problem of `text`, checked to be at `path` on the `nth` line that contains `needle`."""
    p = only_problem(text)
    assert (p.path, p.line) == (path, line_of(text, needle, nth))
    return p


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """The 1-based line of the `nth` line of `text` that contains `needle`."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) > nth, f"{needle!r} is not in the document {nth + 1} times"
    return hits[nth]


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)
