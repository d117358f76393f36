"""`torchjob run|submit` without a document, as torchrun and TorchX users type it:
`[-j NxM | --nnodes N --nproc-per-node M] [--name] [--image] [--env K=V]... SCRIPT [-- ARGS...]`,
`-m MODULE [-- ARGS...]`, or `-- COMMAND...`. The flags become a `JobSpec`; the job itself is built by
`torchjob.api.build` (pure), and `--dry-run -o yaml` prints it (with --kube, its code's ConfigMap
before it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from torchjob.api.build import Built, Entry, JobSpec, build, parse_env, parse_shape
from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.runtime import DryRun, Runtime

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
    f = click.option("--include", "include", multiple=True, metavar="PATTERN",
                     help="With --kube and a directory: ship its dotfiles and .gitignore'd files that PATTERN "
                          "(gitignore syntax, relative to the directory) names too (repeatable).")(f)
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
             "name": "--name", "image": "--image", "env": "--env", "include": "--include"}
    return [flag for key, flag in flags.items() if opts.get(key)]


def job_from_flags(entry: Entry, kube: bool, shape: str | None, nnodes: str | None, nproc_per_node: int | None,
                   name: str | None, image: str | None, env: tuple[str, ...], include: tuple[str, ...] = (),
                   **_: Any) -> Built:
    """The job, and with --kube the files it ships (`torchjob.api.build.build` refuses every mistake,
    before anything starts)."""
    spec = JobSpec(entry, parse_shape(shape, nnodes, nproc_per_node), name, image, parse_env(env),
                   working_dir=os.getcwd(), include=tuple(include))
    return build(spec, kube=kube)


JOB_FLAGS = ("shape", "nnodes", "nproc_per_node", "module", "name", "image", "env", "include", "dry_run", "output")


def plan(target: tuple[str, ...], where: dict[str, Any], load: Callable[[str], TorchJob],
         runtime: Callable[..., Runtime[Any]], say: Callable[[str], None], dump: Callable[[Any, str], None],
         ) -> tuple[Runtime[Any], DryRun] | None:
    """The runtime and the plan `run`/`submit` start (a document's, or one built from the flags), or
    None after --dry-run printed what the plan would create. `where` holds every flag; the job-building
    ones are taken out of it."""
    opts = {k: where.pop(k) for k in JOB_FLAGS}
    document, entry = split_target(target, opts["module"])
    if document is not None:
        given = used(opts)
        if given:
            raise UserError(f"{', '.join(given)}: these build a job from a script, and {document} is a job already",
                            fix=f"drop them, or run a script instead of {document}")
        built = Built(load(document))
    else:
        assert entry is not None
        built = job_from_flags(entry, bool(where.get("kube")), **opts)
    rt = runtime(**where)
    made = rt.dryrun(built.job, lenient=bool(opts["dry_run"]), code=built.code)
    shipped = built.shipped() if where.get("kube") else None
    if not opts["dry_run"]:
        if shipped:
            say(f"torchjob: {shipped}")
        return rt, made
    from torchjob.cli import views

    views.documents(made.documents(), opts["output"], dump)
    if shipped:
        say(f"note: with --kube, {shipped}; it is made with the job and deleted with it (applied from a kept "
            "file, it is yours to delete)")
    return None
