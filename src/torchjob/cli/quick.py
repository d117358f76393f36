"""`torchjob run|submit` without a document, as torchrun and TorchX users type it:
`[-j NxM | --nnodes N --nproc-per-node M] [--name] [--image] [--env K=V]... SCRIPT [-- ARGS...]`,
`-m MODULE [-- ARGS...]`, or `-- COMMAND...`. The flags become a `JobSpec`; the job itself is built by
`torchjob.api.build` (pure), and `--dry-run -o yaml` prints it (with --kube, its code's ConfigMap
before it)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from torchjob.api.build import Built, Entry, JobSpec, build, parse_env, parse_shape
from torchjob.api.errors import UserError
from torchjob.api.model import RunPolicy, TorchJob
from torchjob.api.validate import validate
from torchjob.core.shape.topology import nproc_per_node, replica_total
from torchjob.runtime import DryRun, Runtime

F = TypeVar("F", bound=Callable[..., Any])
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")
# Put where the first `--` was, so that `-- COMMAND` (nothing before it) and `SCRIPT -- ARGS` differ.
DASHDASH = "\0--"


class QuickCommand(click.Command):
    """A command whose positionals may follow `--`; remembers where the first `--` was. Its help groups
    its flags (`GROUPS`) and ends with examples (the command's `epilog`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)
        if "--" in args:
            i = args.index("--")
            args = [*args[:i], "--", DASHDASH, *args[i + 1:]]
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            fixed = self._script_options_after_dashdash(ctx, given, e.option_name)
            if fixed is None:
                raise
            raise UserError(f"{e.option_name} is not an option of {ctx.command_path}; the script's own options go "
                            "after --", fix=fixed)

    def _script_options_after_dashdash(self, ctx: click.Context, given: list[str], unknown: str) -> str | None:
        """`torchjob run --name X train.py -- --epochs 2` for `torchjob run train.py --epochs 2 --name X`:
        what follows the script and is not torchjob's goes after `--`; torchjob's own flags stay before it.
        None when the unknown option comes before the script (it is a mistake, not the script's)."""
        if "--" in given:
            given = given[:given.index("--")]
        script = next((i for i, a in enumerate(given) if not a.startswith("-") and (a.endswith(".py")
                       or Path(a).is_dir()) and (i == 0 or not self._takes_value(given[i - 1]))), None)
        if script is None or unknown not in given[script + 1:]:
            return None
        ours, theirs = list(given[:script + 1]), []
        rest = given[script + 1:]
        i = 0
        while i < len(rest):
            word = rest[i]
            name = word.split("=", 1)[0]
            if word.startswith("-") and self._known(name):
                ours.append(word)
                if "=" not in word and self._takes_value(name) and i + 1 < len(rest):
                    ours.append(rest[i + 1])
                    i += 1
            else:
                theirs.append(word)
            i += 1
        script_at = ours.index(given[script])
        ours.append(ours.pop(script_at))  # the script last, then its arguments
        return " ".join([ctx.command_path, *ours, "--", *theirs])

    def _known(self, name: str) -> bool:
        return any(name in (*p.opts, *p.secondary_opts) for p in self.params if isinstance(p, click.Option))

    def _takes_value(self, name: str) -> bool:
        return any(name in p.opts and not p.is_flag for p in self.params if isinstance(p, click.Option))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[int, tuple[str, str]]]] = {title: [] for title, _ in GROUPS}
        for p in self.get_params(ctx):
            rec = p.get_help_record(ctx) if isinstance(p, click.Option) else None
            if rec is None:
                continue
            title, names = next(((t, names) for t, names in GROUPS if p.name in names), GROUPS[-1])
            rows[title].append((names.index(p.name) if p.name in names else len(names), rec))
        for title, records in rows.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl([rec for _, rec in sorted(records, key=lambda r: r[0])])


# The help's sections: what each flag is for (the last takes the rest).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("The job (torchrun's and TorchX's flags)",
     ("shape", "nnodes", "nproc_per_node", "max_restarts", "warm_spares", "module", "name", "env", "runtimes")),
    ("What is shown", ("quiet", "ranks_filter", "dry_run", "output")),
    ("On this machine", ("grace_period", "pvcs", "configmaps", "document_ports", "no_resolve_python")),
    ("On a cluster (with --kube)", ("kube", "image", "namespace", "kube_context", "kubeconfig", "include")),
    ("Other options", ("help",)),
)
NPROC_WORDS = ("auto", "gpu", "cpu")


class Nproc(click.ParamType[int | str]):
    """torchrun's --nproc-per-node: a number, or auto, gpu (one per GPU) or cpu (one per core)."""

    name = "M|auto|gpu|cpu"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            return int(value)
        if isinstance(value, str) and value.strip().lower() in NPROC_WORDS:
            return value.strip().lower()
        self.fail(f"{value!r} is not a number of processes, auto, gpu or cpu (torchrun's words)", param, ctx)


def examples(*pairs: tuple[str, str]) -> str:
    """A command's help epilog: each example and what it does (click keeps a \\b paragraph as it is)."""
    width = max(len(cmd) for cmd, _ in pairs) + 2
    return "\b\nExamples:\n" + "\n".join(f"  {cmd:<{width}}# {what}" for cmd, what in pairs)


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
    f = click.option("--warm-spares", is_flag=True, default=False,
                     help="Keep a warm spare process per replica (torch imported) that becomes it when it is "
                          "restarted, and one per torchrun worker (runPolicy.warmSpares; with --max-restarts).")(f)
    f = click.option("--max-restarts", type=click.IntRange(min=0), default=None, metavar="N",
                     help="Restart the job up to N times when a process fails, as torchrun's --max-restarts "
                          "(every replica again; default 0).")(f)
    f = click.option("--nproc-per-node", type=Nproc(), default=None, metavar="M|auto|gpu|cpu",
                     help="Processes per replica: a number, or torchrun's gpu (one per GPU), cpu (one per core), "
                          "auto (gpu where there are GPUs, else cpu).")(f)
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


@dataclasses.dataclass(frozen=True)
class JobFlags:
    """The flags of `run`/`submit` that build a job from a script (JOB_FLAGS), and how it is shown."""

    shape: str | None = None
    nnodes: str | None = None
    nproc_per_node: int | str | None = None
    max_restarts: int | None = None
    warm_spares: bool = False
    module: str | None = None
    name: str | None = None
    image: str | None = None
    env: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    dry_run: bool = False
    output: str = "yaml"


def used(opts: JobFlags) -> list[str]:
    """The job-building flags given (they mean nothing with a document)."""
    flags = {"shape": "-j", "nnodes": "--nnodes", "nproc_per_node": "--nproc-per-node", "module": "-m",
             "name": "--name", "image": "--image", "env": "--env", "include": "--include",
             "max_restarts": "--max-restarts", "warm_spares": "--warm-spares"}
    return [flag for key, flag in flags.items() if getattr(opts, key) not in (None, (), False)]


def job_from_flags(entry: Entry, kube: bool, opts: JobFlags) -> Built:
    """The job, and with --kube the files it ships (`torchjob.api.build.build` refuses every mistake,
    before anything starts)."""
    nproc = opts.nproc_per_node
    word = nproc if isinstance(nproc, str) else None
    count = 1 if isinstance(nproc, str) else nproc
    spec = JobSpec(entry, parse_shape(opts.shape, opts.nnodes, count), opts.name, opts.image, parse_env(opts.env),
                   working_dir=os.getcwd(), include=tuple(opts.include))
    built = build(spec, kube=kube)
    if word is not None or opts.max_restarts is not None:
        built = dataclasses.replace(built, job=torchrun_words(built.job, word, opts.max_restarts))
    if opts.warm_spares:
        built = dataclasses.replace(built, job=with_warm_spares(built.job))
    return built


def with_warm_spares(job: TorchJob) -> TorchJob:
    """--warm-spares: runPolicy.warmSpares, checked as a document's is (a job nothing restarts is refused)."""
    rp = (job.spec.runPolicy or RunPolicy()).model_copy(update={"warmSpares": True})
    out = job.model_copy(update={"spec": job.spec.model_copy(update={"runPolicy": rp})})
    problems = validate(out)
    if problems:
        raise UserError(f"--warm-spares: {problems[0].message}",
                        fix="add --max-restarts N (N > 0), so that a failed process is started again")
    return out


def torchrun_words(job: TorchJob, nproc: str | None, max_restarts: int | None) -> TorchJob:
    """What torchrun's --nproc-per-node auto|gpu|cpu and --max-restarts N mean for a job: its
    nprocPerNode; its restarts (an elastic job's torchrun restarts, elasticPolicy.maxRestarts; else
    the whole job's, runPolicy.backoffLimit with restartPolicy OnFailure)."""
    spec = job.spec
    update: dict[str, Any] = {}
    if nproc is not None:
        update["nprocPerNode"] = nproc
    if max_restarts is not None:
        if spec.elasticPolicy is not None:
            update["elasticPolicy"] = spec.elasticPolicy.model_copy(update={"maxRestarts": max_restarts})
        else:
            update["pytorchReplicaSpecs"] = {t: rs.model_copy(update={"restartPolicy": "OnFailure"})
                                             for t, rs in spec.pytorchReplicaSpecs.items()}
            update["runPolicy"] = (spec.runPolicy or RunPolicy()).model_copy(update={"backoffLimit": max_restarts})
    return job.model_copy(update={"spec": spec.model_copy(update=update)})


def gpu_advice(job: TorchJob, gpus: int) -> str | None:
    """Said before a local job starts: more processes than the GPUs this machine shows, where it has
    some (a script that calls torch.cuda.set_device(LOCAL_RANK) fails in the ranks past them)."""
    nproc = nproc_per_node(job)
    if gpus == 0 or not nproc.isdigit():
        return None
    procs = int(nproc) * replica_total(job)
    if procs <= gpus:
        return None
    return (f"this job starts {procs} processes and this machine shows {gpus} GPU(s): a rank without a GPU of "
            "its own fails at torch.cuda.set_device(LOCAL_RANK) ('invalid device ordinal'); for one process per "
            "GPU pass --nproc-per-node gpu (or a number up to the GPUs), or run on the CPU (gloo) on purpose")


JOB_FLAGS = ("shape", "nnodes", "nproc_per_node", "max_restarts", "warm_spares", "module", "name", "image", "env",
             "include",
             "dry_run", "output")


def plan(target: tuple[str, ...], where: dict[str, Any], load: Callable[[str], TorchJob],
         runtime: Callable[..., Runtime[Any]], say: Callable[[str], None], dump: Callable[[Any, str], None],
         ) -> tuple[Runtime[Any], DryRun] | None:
    """The runtime and the plan `run`/`submit` start (a document's, or one built from the flags), or
    None after --dry-run printed what the plan would create. `where` holds every flag; the job-building
    ones are taken out of it."""
    opts = JobFlags(**{k: where.pop(k) for k in JOB_FLAGS})
    document, entry = split_target(target, opts.module)
    if document is not None:
        given = used(opts)
        if given:
            raise UserError(f"{', '.join(given)}: these build a job from a script, and {document} is a job already",
                            fix=f"drop them, or run a script instead of {document}")
        built = Built(load(document))
    else:
        assert entry is not None
        built = job_from_flags(entry, bool(where.get("kube")), opts)
    rt = runtime(**where)
    made = rt.dryrun(built.job, lenient=opts.dry_run, code=built.code)
    for warning in made.warnings:  # what the runtime does not do of what the job asks (a dry run too)
        say(f"warning: {warning}")
    shipped = built.shipped() if where.get("kube") else None
    if not opts.dry_run:
        if shipped:
            say(f"torchjob: {shipped}")
        if not where.get("kube"):
            from torchjob.local.inspect.render import available_gpus

            advice = gpu_advice(built.job, len(available_gpus()))
            if advice:
                say(f"warning: {advice}")
        return rt, made
    from torchjob.cli import views

    views.documents(made.documents(), opts.output, dump)
    if shipped:
        say(f"note: with --kube, {shipped}; it is made with the job and deleted with it (applied from a kept "
            "file, it is yours to delete)")
    return None
