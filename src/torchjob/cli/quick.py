"""`torchjob run|submit` without a document, as torchrun and TorchX users type it:
`[-j NxM | --nnodes N --nproc-per-node M] [--name] [--image] [--env K=V]... SCRIPT [-- ARGS...]`,
`-m MODULE [-- ARGS...]`, or `-- COMMAND...`. The flags become a `JobSpec`; the job itself is built by
`torchjob.api.build` (pure), and `--dry-run -o yaml` prints it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from torchjob.api.build import Entry, JobSpec, build_job, code_volume, collect, parse_env, parse_shape
from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob

F = TypeVar("F", bound=Callable[..., Any])
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")
# Put where the first `--` was, so that `-- COMMAND` (nothing before it) and `SCRIPT -- ARGS` differ.
DASHDASH = "\0--"


class QuickCommand(click.Command):
    """A command whose positionals may follow `--`; remembers where the first `--` was."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)
        if "--" in args:
            i = args.index("--")
            args = [*args[:i], "--", DASHDASH, *args[i + 1:]]
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            # A script's option before `--` (`train.py --epochs 2`): say where it goes, not "did you mean".
            if e.option_name not in given or not any(a.endswith(".py") or Path(a).is_dir() for a in given):
                raise
            i = given.index(e.option_name)
            fixed = " ".join([ctx.command_path, *given[:i], "--", *given[i:]])
            raise UserError(f"{e.option_name} is not an option of {ctx.command_path}; the script's own options go "
                            "after --", fix=fixed)


def quick_options(f: F) -> F:
    f = click.option("--dry-run", is_flag=True, help="Print the job that would run (-o yaml|json) and start "
                                                     "nothing.")(f)
    f = click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
                     help="With --dry-run: the format of the job printed.")(f)
    f = click.option("-e", "--env", "env", multiple=True, metavar="K=V", help="Set K=V in every process "
                     "(repeatable).")(f)
    f = click.option("--image", default=None, metavar="IMAGE",
                     help="The container image of every replica (required with --kube).")(f)
    f = click.option("--name", default=None, metavar="NAME",
                     help="The job's name (default: the script's, with a random suffix).")(f)
    f = click.option("-m", "--module", default=None, metavar="MODULE", help="Run a module, as python -m does.")(f)
    f = click.option("--nproc-per-node", type=int, default=None, metavar="M", help="Processes per replica.")(f)
    f = click.option("--nnodes", default=None, metavar="N|MIN:MAX", help="Replicas (nodes); MIN:MAX is elastic.")(f)
    f = click.option("-j", "shape", default=None, metavar="NxM",
                     help="N replicas of M processes each, through torchrun (TorchX's -j); MIN:MAXxM is elastic.")(f)
    return f


def split_target(target: tuple[str, ...], module: str | None) -> tuple[str | None, Entry | None]:
    """(a document to read, None) or (None, what to run) from the positionals."""
    if DASHDASH in target:
        i = target.index(DASHDASH)
        before, after = target[:i], target[i + 1:]
    else:
        before, after = target, ()
    if module is not None:
        if before:
            raise UserError(f"-m {module} and {before[0]!r}: run a module or a script, not both",
                            fix="put the module's arguments after --")
        return None, Entry(module=module, args=after)
    if not before:
        if not after:
            raise UserError("nothing to run", fix="name a job document (JOB.yaml), a script, -m MODULE, "
                                                  "or a command after --")
        return None, Entry(command=after)
    if len(before) > 1:
        raise UserError(f"{before[1]!r} after {before[0]!r}: a script's arguments go after --",
                        fix=f"torchjob run {before[0]} -- {' '.join(before[1:])}")
    if before[0].endswith(DOCUMENT_SUFFIXES) and not after:
        return before[0], None
    return None, Entry(script=before[0], args=after)


def used(opts: dict[str, Any]) -> list[str]:
    """The job-building flags given (they mean nothing with a document)."""
    flags = {"shape": "-j", "nnodes": "--nnodes", "nproc_per_node": "--nproc-per-node", "module": "-m",
             "name": "--name", "image": "--image", "env": "--env"}
    return [flag for key, flag in flags.items() if opts.get(key)]


def job_from_flags(entry: Entry, kube: bool, shape: str | None, nnodes: str | None, nproc_per_node: int | None,
                   name: str | None, image: str | None, env: tuple[str, ...], **_: Any,
                   ) -> tuple[TorchJob, dict[str, bytes] | None]:
    """The job, and with --kube the files its ConfigMap carries. Every mistake is refused here,
    before anything starts."""
    spec = JobSpec(entry, parse_shape(shape, nnodes, nproc_per_node), name, image, parse_env(env),
                   working_dir=os.getcwd())
    files = None
    if kube and not image:
        raise UserError("--kube needs --image: the image every replica runs (with python and torch in it)",
                        fix="e.g. --image pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime (python and torch in it)")
    if entry.script is not None:
        path = Path(entry.script)
        if not path.exists():
            raise UserError(f"script {entry.script!r} does not exist",
                            fix="check the path (relative to this directory), or pass -m MODULE or -- COMMAND")
        if path.is_dir() and not (path / "__main__.py").is_file():
            raise UserError(f"script {entry.script!r} is a directory without __main__.py",
                            fix="name the script in it, or add __main__.py (python DIR runs it)")
        if kube:
            files = collect(path)
    job = build_job(spec)  # the name, drawn once, is the ConfigMap's too
    if files is not None:
        code = code_volume(job.name, list(files), path.name if path.is_file() else ".")
        job = build_job(JobSpec(entry, spec.shape, job.name, image, spec.env, code=code))
    return job, files


JOB_FLAGS = ("shape", "nnodes", "nproc_per_node", "module", "name", "image", "env", "dry_run", "output")


def plan(target: tuple[str, ...], where: dict[str, Any], load: Callable[[str], TorchJob],
         runtime: Callable[..., Any], say: Callable[[str], None], dump: Callable[[Any, str], None]) -> Any:
    """The plan `run`/`submit` start (a document's, or one built from the flags), or None after
    --dry-run printed the job. `where` holds every flag; the job-building ones are taken out of it."""
    from torchjob.dialects.convert import explicit

    opts = {k: where.pop(k) for k in JOB_FLAGS}
    document, entry = split_target(target, opts["module"])
    files = None
    if document is not None:
        given = used(opts)
        if given:
            raise UserError(f"{', '.join(given)}: these build a job from a script, and {document} is a job already",
                            fix=f"drop them, or run a script instead of {document}")
        job = load(document)
    else:
        assert entry is not None
        job, files = job_from_flags(entry, bool(where.get("kube")), **opts)
    if opts["dry_run"]:
        dump(explicit(job), opts["output"])
        if files is not None:
            say(f"note: with --kube, the code ({len(files)} file(s), {sum(map(len, files.values())):,} bytes) "
                f"goes in ConfigMap {job.name}-code, made with the job and deleted with it")
        return None
    rt = runtime(**where)
    made = rt.dryrun(job)
    if files is not None:
        code = code_volume(job.name, list(files))
        made.code = {key: files[path] for key, path in code.items}
    return rt, made
