"""Native data (`torchjob.dev/v1` `TorchJob`) -> validated `TorchJob`, or one clear message per problem.

Reading a file in any dialect is `torchjob.dialects.load`; this is the native model's own step."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from torchjob.api.errors import InvalidJob, Problem
from torchjob.api.model import TorchJob
from torchjob.api.source import Document, problem_at
from torchjob.api.validate import validate

_FIXES = {
    "extra_forbidden": "remove it, or check its spelling and indentation",
    "missing": "add it",
}


# pydantic names the union member or validator in an error's location; they are not fields.
_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _is_type_tag(part: str) -> bool:
    return part in _TYPE_TAGS or "[" in part or part.startswith("function-")


def _pydantic_problems(err: ValidationError, doc: Document | None) -> list[Problem]:
    problems: list[Problem] = []
    for e in err.errors():
        loc = [p for p in e["loc"] if not (isinstance(p, str) and _is_type_tag(p))]
        kind = e["type"]
        field = loc[-1] if loc else ""
        if kind == "extra_forbidden":
            msg = f"unknown field {field!r}"
        elif kind == "missing":
            msg = f"required field {field!r} is missing"
        elif kind == "literal_error":
            expected = e.get("ctx", {}).get("expected", "")
            msg = f"{e['input']!r} is not allowed; expected {expected}"
        else:
            msg = f"{e['msg'].rstrip('.').lower()}, got {e['input']!r}" if "input" in e else e["msg"]
        problems.append(problem_at(doc, loc, msg, _FIXES.get(kind)))
    # A wrong type at one level produces one error per union member: keep the first per field.
    seen: set[tuple[str, int | None]] = set()
    out = []
    for p in problems:
        if (p.path, p.line) not in seen:
            seen.add((p.path, p.line))
            out.append(p)
    return out


def job_from_data(data: dict[str, Any], doc: Document | None = None) -> TorchJob:
    """Validate native data (`torchjob.dev/v1` `TorchJob`); raises InvalidJob."""
    source = doc.source if doc else None
    try:
        job = TorchJob.model_validate(data)
    except ValidationError as e:
        raise InvalidJob(_pydantic_problems(e, doc), source)
    problems = validate(job, doc)
    if problems:
        raise InvalidJob(problems, source)
    return job
