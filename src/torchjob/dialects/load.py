"""File -> validated `TorchJob` in any dialect, with what its reader ignored or decided as notes.

A native document is validated by `torchjob.api.load`; a foreign one goes through its reader.
What torchjob does differently from what a valid job asks is core's to say (`core.advice.advise`,
from the job and its document).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torchjob.api.errors import InvalidJob, UserError
from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION, KIND, TorchJob
from torchjob.api.source import Document, problem_at, read_documents
from torchjob.dialects import SUPPORTED, reader_for
from torchjob.dialects.trainer_runtime import is_runtime


@dataclass
class Loaded:
    job: TorchJob
    notes: list[str] = field(default_factory=list)  # what a foreign document's reader ignored or decided
    dialect: str = f"{API_VERSION} {KIND}"
    doc: Document | None = None  # where it was read from (core.advice points at its lines)


def load_document(doc: Document) -> Loaded:
    api, kind = doc.data.get("apiVersion"), doc.data.get("kind")
    if api == API_VERSION and kind == KIND:
        return Loaded(job_from_data(doc.data, doc), doc=doc)

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
    return Loaded(converted.job, converted.notes, f"{api} {kind}", doc)


def load(path: str | Path, runtimes: Sequence[str | Path] = ()) -> Loaded:
    """The job in a file. Training runtimes (Kubeflow Trainer's, for a TrainJob) may come with it in
    the same file or in `runtimes` files."""
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
