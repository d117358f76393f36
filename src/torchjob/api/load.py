"""File -> validated `TorchJob`, or one clear message per problem."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from torchjob.api.errors import InvalidJob, Problem, UserError
from torchjob.api.model import API_VERSION, KIND, TorchJob
from torchjob.api.source import Document, problem_at, read_documents
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


@dataclass
class Loaded:
    job: TorchJob
    notes: list[str] = field(default_factory=list)  # what a foreign document's reader ignored or decided
    dialect: str = f"{API_VERSION} {KIND}"


def advise(loaded: Loaded, doc: Document) -> Loaded:
    """Add what torchjob does differently from what the job asks (core.advice), by the document's lines."""
    from torchjob.core.advice import advisories

    for path, message in advisories(loaded.job):
        own = doc.translate(list(path))
        where = ".".join(f"[{p}]" if isinstance(p, int) else p for p in own).replace(".[", "[")
        line = doc.line_of(own)
        loaded.notes.append(f"{doc.source}:{line}: {where}: {message}" if line else f"{where}: {message}")
    return loaded


def load_document(doc: Document) -> Loaded:
    api, kind = doc.data.get("apiVersion"), doc.data.get("kind")
    if api == API_VERSION and kind == KIND:
        return advise(Loaded(job_from_data(doc.data, doc)), doc)
    from torchjob.dialects import SUPPORTED, reader_for  # dialects build on the native model

    reader = reader_for(api, kind)
    if reader is None:
        raise InvalidJob(
            [
                problem_at(
                    doc,
                    ["kind"] if api == API_VERSION else ["apiVersion"],
                    f"unsupported document apiVersion={api!r} kind={kind!r}",
                    "torchjob reads " + "; ".join(SUPPORTED),
                )
            ],
            doc.source,
        )
    converted = reader(doc)
    return advise(Loaded(converted.job, converted.notes, f"{api} {kind}"), doc)


def job_from_document(doc: Document) -> TorchJob:
    return load_document(doc).job


def load(path: str | Path, runtimes: Sequence[str | Path] = ()) -> Loaded:
    """The job in a file. Training runtimes (Kubeflow Trainer's, for a TrainJob) may come with it in
    the same file or in `runtimes` files."""
    from torchjob.dialects.runtime import is_runtime

    docs = read_documents(path)
    jobs = [d for d in docs if not is_runtime(d.data)]
    given = [d for d in docs if is_runtime(d.data)]
    for file in runtimes:
        for d in read_documents(file):
            if not is_runtime(d.data):
                raise UserError(f"{file}: holds a {d.data.get('kind')!r}, not a training runtime",
                                fix="pass a ClusterTrainingRuntime or TrainingRuntime with --runtime")
            given.append(d)
    if len(jobs) != 1:
        source = docs[0].source
        raise UserError(f"{source}: the file holds {len(jobs)} jobs; torchjob runs one job per file"
                        if jobs else f"{source}: the file holds training runtimes but no job",
                        fix="split the jobs into separate files" if jobs else "add the TrainJob that uses them")
    job = jobs[0]
    job.companions = given
    loaded = load_document(job)
    if given and loaded.dialect != "trainer.kubeflow.org/v1alpha1 TrainJob":
        loaded.notes.append(f"{job.source}: the training runtimes given are used by a TrainJob only; ignored")
    return loaded


def load_job(path: str | Path) -> TorchJob:
    return load(path).job
