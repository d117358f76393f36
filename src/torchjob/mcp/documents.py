"""A job as an agent gives it: a document's text in any dialect, or the command line's shape (`-j 1x2
train.py -- --lr 0.1`), read by the same readers and the same parser as `torchjob run`'s; each mistake
is the argument's (`document`, `command`)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from torchjob.api.errors import UserError
from torchjob.mcp.answers import Mistake, mistake_of

if TYPE_CHECKING:
    from torchjob.api.build import Built


def load_text(document: str) -> Any:
    """A job from its document's text, in any dialect (`torchjob.dialects.load.load`'s rules: one job,
    a TrainJob's runtimes beside it); its mistakes are the `document` argument's."""
    from torchjob.api.source import parse_documents
    from torchjob.dialects.load import load_document
    from torchjob.dialects.trainer_runtime import is_runtime

    if not isinstance(document, str) or not document.strip():
        raise Mistake("document", "the document is empty", "pass the job's YAML text (a TorchJob, PyTorchJob, "
                                                          "TrainJob, Volcano Job or T9k PyTorchTrainingJob)")
    try:
        docs = parse_documents(document, "document")
        jobs = [d for d in docs if not is_runtime(d.data)]
        if len(jobs) != 1:
            raise Mistake("document", f"the document holds {len(jobs)} jobs; a call takes one job",
                          "pass one job per call" if jobs else "add the job (its training runtimes alone run nothing)")
        jobs[0].companions = [d for d in docs if is_runtime(d.data)]
        return load_document(jobs[0])
    except UserError as e:
        raise mistake_of(e, "document") from None


def built_from_command(command: str, kube: bool) -> Built:
    """The command line's shape (`-j 1x2 train.py -- --lr 0.1`, `-m pkg.train`, `-- bash run.sh`), read
    by the very parser of `torchjob run` and built by its builder, so that the words mean the same."""
    import click

    from torchjob.cli.quick import JobFlags, QuickCommand, job_from_flags, quick_options, split_target

    if not isinstance(command, str):
        raise Mistake("command", "the command is not a string", "e.g. command='-j 1x2 train.py -- --steps 10'")
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise Mistake("command", f"cannot split it as a shell would: {e}", "check the quotes") from None
    for word in (["torchjob", "run"], ["torchjob", "submit"], ["torchjob"], ["run"], ["submit"]):
        if argv[:len(word)] == word:
            argv = argv[len(word):]
            break

    @click.command(cls=QuickCommand, name="command", add_help_option=False)
    @click.argument("target", nargs=-1)
    @quick_options
    def shape(**kw: Any) -> dict[str, Any]:
        return kw

    try:
        with shape.make_context("command", list(argv)) as ctx:
            opts = dict(ctx.params)
        if opts.pop("dry_run"):
            raise Mistake("command", "--dry-run has no place here: preview_job is the dry run",
                          "drop --dry-run")
        opts.pop("output")
        document, entry = split_target(opts.pop("target"), opts["module"])
        if document is not None:
            raise Mistake("command", f"{document} names a document file; this call takes the document's text",
                          "pass the file's text as document instead of command")
        assert entry is not None
        return job_from_flags(entry, kube, JobFlags(**opts))
    except click.ClickException as e:
        raise Mistake("command", e.format_message(), "the shape is torchjob run's: [-j NxM] SCRIPT [-- ARGS], "
                                                     "-m MODULE [-- ARGS] or -- COMMAND") from None
    except UserError as e:
        raise mistake_of(e, "command") from None


