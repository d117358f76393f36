"""The `torchjob` command: a thin layer over the runtime interface (`torchjob.runtime`): its flags
name a `Target` (this machine or, with --kube, a cluster), `torchjob.connect` gives the runtime
there, once, and each verb is one call of it.

Exit codes: 0 success; 1 the job failed; 2 a mistake in the input (nothing was started);
130/143 the job was stopped by SIGINT/SIGTERM.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from torchjob.api.errors import UserError
from torchjob.api.status import ConditionType
from torchjob.cli.cluster import install, operator
from torchjob.cli.quick import QuickCommand, examples, quick_options
from torchjob.cli.stacks import stacks_command
from torchjob.cli.uninstall import uninstall
from torchjob.cli.version import version
from torchjob.connect import HERE, Target, connect
from torchjob.dialects.convert import TARGETS
from torchjob.mcp.command import mcp_command
from torchjob.ui.command import ui_command
from torchjob.version import __version__

if TYPE_CHECKING:
    from torchjob.runtime import Runtime

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text",
                      show_default=True, help="Output format (json and yaml are for scripts).")


def _dump(data: Any, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())


def local_options(f: F) -> F:
    f = click.option("--configmap", "configmaps", multiple=True, metavar="NAME=PATH",
                     help="Fill configMap NAME from a file or directory (repeatable), like "
                          "kubectl create configmap NAME --from-file=PATH.")(f)
    f = click.option("--pvc", "pvcs", multiple=True, metavar="NAME=DIR",
                     help="Stand in local directory DIR for persistentVolumeClaim NAME (repeatable).")(f)
    f = click.option("--document-ports", is_flag=True,
                     help="Use the ports the document names (23456 by default) instead of free ones.")(f)
    f = click.option("--no-resolve-python", is_flag=True,
                     help="Run `python`/`torchrun` from PATH instead of torchjob's own interpreter.")(f)
    f = click.option("--grace-period", type=float, default=None, metavar="SECONDS",
                     help="SIGTERM-to-SIGKILL grace when stopping replicas "
                          "(default: terminationGracePeriodSeconds, else 30).")(f)
    return f


def kube_options(f: F) -> F:
    f = click.option("--kube", is_flag=True, help="Act on the Kubernetes cluster (the operator runs the job).")(f)
    f = click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="With --kube (default ~/.kube/config).")(f)
    f = click.option("--context", "kube_context", default=None, help="With --kube: the kubeconfig context.")(f)
    f = click.option("-n", "--namespace", default=None, help="With --kube: the namespace (default: the context's).")(f)
    return f


def _pairs(flag: str, items: tuple[str, ...], example: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"{flag} {item!r} is not NAME=PATH", fix=f"e.g. {flag} {example}")
        out[name] = str(Path(path).resolve())
    return out


def target_of(kube: bool = False, kubeconfig: str | None = None, kube_context: str | None = None,
              namespace: str | None = None, **_: Any) -> Target:
    """Where the --kube flags point: a cluster with --kube (the others mean nothing without it)."""
    return Target(True, kubeconfig, kube_context, namespace) if kube else HERE


def _runtime(configmaps: tuple[str, ...] = (), pvcs: tuple[str, ...] = (), document_ports: bool = False,
             no_resolve_python: bool = False, grace_period: float | None = None, **where: Any) -> Runtime[Any]:
    """The runtime a command acts on, connected once: the cluster's with --kube, else this machine's."""
    target = target_of(**where)
    if target.kube:
        return connect(target)
    from torchjob.local.start.launch import LocalOptions

    return connect(target, LocalOptions(
        configmaps=_pairs("--configmap", configmaps, "scripts=./train.py"),
        pvcs=_pairs("--pvc", pvcs, "data=/mnt/data"),
        document_ports=document_ports, resolve_python=not no_resolve_python, grace_period_s=grace_period,
    ))


RUNTIME = click.option("--runtime", "runtimes", multiple=True, metavar="FILE",
                       help="A Kubeflow Trainer runtime (ClusterTrainingRuntime or TrainingRuntime) a TrainJob "
                            "names (repeatable; torch-distributed is known without one).")


def _load(path: str, runtimes: tuple[str, ...] = ()) -> Any:
    """Read a job in any dialect; what its reader ignored or decided is shown as warnings."""
    from torchjob.core.shape.advice import advise
    from torchjob.dialects.load import load

    loaded = load(path, runtimes)
    for note in [*loaded.notes, *advise(loaded.job, loaded.doc)]:
        click.echo(f"warning: {note}", err=True)
    return loaded.job


class Commands(click.Group):
    """The command list in `--help` with each command's whole first sentence (click cuts it at the
    terminal's width with "...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="torchjob")
def cli() -> None:
    """Run PyTorch distributed training jobs: on this machine as supervised processes, or with --kube
    on a Kubernetes cluster where `torchjob operator` runs them."""


TARGET = click.argument("target", nargs=-1, metavar="JOB.yaml | [-j NxM] SCRIPT [-- ARGS] | -m MODULE | -- COMMAND")


def _plan(target: tuple[str, ...], runtimes: tuple[str, ...], where: dict[str, Any]) -> Any:
    from torchjob.cli import quick

    return quick.plan(target, where, lambda path: _load(path, runtimes), _runtime, lambda s: click.echo(s, err=True),
                      _dump)


RUN_EXAMPLES = examples(
    ("torchjob run examples/ddp/job.yaml", "a job document: TorchJob, PyTorchJob, TrainJob, Volcano, T9k"),
    ("torchjob run -j 1x4 train.py -- --lr 0.1", "1 replica of 4 processes, through torchrun"),
    ("torchjob run -j 2x2 --max-restarts 3 train.py", "2 replicas of 2; the job restarted up to 3 times"),
    ("torchjob run --nproc-per-node gpu train.py", "one process per GPU"),
    ("torchjob run -j 1x4 --ranks-filter 0 train.py", "show rank 0's lines (every rank's are logged)"),
    ("torchjob run -m mypkg.train -- --epochs 2", "a module, as python -m runs it"),
    ("torchjob run -- bash run.sh", "a command, in every process"),
    ("torchjob run -j 2x8 --kube --image IMG train.py", "on the cluster; the script travels with the job"),
)


@cli.command(cls=QuickCommand, epilog=RUN_EXAMPLES)
@TARGET
@quick_options
@local_options
@click.option("-q", "--quiet", is_flag=True, help="Do not stream replica output (it is still logged).")
@click.option("--ranks-filter", "--local-ranks-filter", "ranks_filter", default=None, metavar="RANKS",
              help="Show only these ranks' lines, e.g. 0 or 0,3 (as torchrun's --local-ranks-filter, which it "
                   "also takes; by global rank); every line is still logged.")
@kube_options
@RUNTIME
def run(target: tuple[str, ...], quiet: bool, ranks_filter: str | None, runtimes: tuple[str, ...],
        **where: Any) -> None:
    """Run a job in the foreground until it ends; exit 0 when it succeeded. The job is a document
    (any dialect), or built from torchrun-style flags: `torchjob run -j 2x4 train.py -- --lr 0.1`."""
    from torchjob.cli import ranks

    wanted = ranks.parse(ranks_filter)
    planned = _plan(target, runtimes, where)
    if planned is None:
        return
    from torchjob.cli import views

    rt, made = planned
    shown = None
    if wanted is not None:
        from torchjob.console import Console

        keep = ranks.line_filter(made.job, wanted)
        shown = lambda log: Console(log, out=None if quiet else sys.stdout, err=sys.stderr, show=keep)  # noqa: E731
    job = rt.run(made, quiet, shown)
    if not job.status.is_true(ConditionType.SUCCEEDED) and job.root_cause:
        cause = job.root_cause
        if not quiet:  # its traceback was just streamed here: once is enough
            cause = views.briefly(cause, job, rt, bool(where.get("kube")),
                                  ranks.line_filter(made.job, wanted) if wanted is not None else None)
        click.echo(cause, err=True)
    views.outcome(job.name, job.status, rt.flags)


@cli.command(cls=QuickCommand)
@TARGET
@quick_options
@local_options
@kube_options
@RUNTIME
def submit(target: tuple[str, ...], runtimes: tuple[str, ...], **where: Any) -> None:
    """Start a job detached (a document, or built from flags as for `run`); follow it with
    `torchjob logs NAME -f`."""
    planned = _plan(target, runtimes, where)
    if planned is not None:
        click.echo(planned[0].schedule(planned[1]))


@cli.command()
@click.argument("job_file", metavar="JOB.yaml")
@OUTPUT
@RUNTIME
def validate(job_file: str, output: str, runtimes: tuple[str, ...]) -> None:
    """Check a job file; exit 2 with one message per problem when it is not valid."""
    from torchjob.local.inspect.render import warnings

    job = _load(job_file, runtimes)
    notes = warnings(job)
    if output != "text":
        _dump({"valid": True, "name": job.name, "warnings": notes}, output)
        return
    for w in notes:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"{job_file}: valid TorchJob {job.name!r}")


@cli.command()
@click.argument("job_file", metavar="JOB.yaml")
@local_options
@OUTPUT
@click.option("--kube", is_flag=True, help="Print the Kubernetes objects the operator would create (PodGroup, "
                                           "Pods, Service, TensorBoard) instead; contacts no cluster.")
@RUNTIME
def render(job_file: str, output: str, runtimes: tuple[str, ...], **where: Any) -> None:
    """Dry run: every replica's resolved command, env, working directory and mounts."""
    from torchjob.cli import views

    plan = _runtime(**where).dryrun(_load(job_file, runtimes), lenient=True)
    views.plan(plan, output, _dump)
    if output == "text":
        for w in [*plan.warnings, *plan.notes]:
            click.echo(f"warning: {w}", err=True)
        if plan.hint:
            click.echo(plan.hint, err=True)


@cli.command()
@click.argument("job_file", metavar="FILE")
@click.option("--to", "target", type=click.Choice(TARGETS),
              default="torchjob", show_default=True, help="The dialect to write.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@RUNTIME
def convert(job_file: str, target: str, output: str, runtimes: tuple[str, ...]) -> None:
    """Print a job (any dialect) as a TorchJob, Kubeflow PyTorchJob, Volcano Job or Kubeflow Trainer
    TrainJob; what the target cannot express is listed on stderr."""
    from torchjob.dialects.convert import convert as to

    job = _load(job_file, runtimes)
    data, lost = to(job, target)
    _dump(data, output)
    for item in lost:
        click.echo(f"not expressible in {target}: {item}", err=True)


@cli.command(name="list")
@OUTPUT
@kube_options
@click.option("-A", "--all-namespaces", is_flag=True, help="With --kube: the jobs of every namespace.")
def list_jobs(output: str, all_namespaces: bool, **where: Any) -> None:
    """The jobs in the store, newest last (with --kube: the cluster's, in one namespace or all)."""
    from torchjob.cli import views

    every = all_namespaces and where["kube"]
    if every:
        where["namespace"] = "*"
    views.list_jobs(_runtime(**where).list(), output, _dump, every)


@cli.command()
@click.argument("name")
@OUTPUT
@kube_options
@click.option("--replicas", type=click.Choice(["auto", "all"]), default="auto", show_default=True,
              help="auto: each replica attempt's line up to 16 replicas; beyond, the replicas counted by state "
                   "and those not running named. all: each replica attempt's line, however many.")
def describe(name: str, output: str, replicas: str, **where: Any) -> None:
    """A job's spec summary, replica attempts with exit codes, conditions and events."""
    from torchjob.cli import views

    summary = output == "text" and replicas == "auto"  # -o json/yaml: each pod whole
    views.describe(_runtime(**where).describe(name, summary=summary), output, _dump, every_replica=replicas == "all")


@cli.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--replica", default=None, metavar="REPLICA", help="Only this replica, e.g. worker-1.")
@click.option("--attempt", type=int, default=None, help="That attempt of --replica (default: the latest).")
@click.option("--ranks-filter", "--local-ranks-filter", "ranks_filter", default=None, metavar="RANKS",
              help="Only these ranks' lines, e.g. 0 or 0,3 (a replica of several processes tags each line "
                   "[rankN]:; torchjob's own notes stay). --local-ranks-filter, torchrun's word, is the same.")
@kube_options
def logs(name: str, follow: bool, replica: str | None, attempt: int | None, ranks_filter: str | None,
         **where: Any) -> None:
    """A job's output (all replicas, prefixed), or one replica's."""
    from torchjob.api.output import hidden
    from torchjob.cli import ranks

    wanted = ranks.parse(ranks_filter)
    rt = _runtime(**where)
    keep = ranks.line_filter(rt.describe(name).job, wanted) if wanted is not None else None
    for line in rt.logs(name, replica, attempt, follow=follow):
        if hidden(line) or (keep is not None and not ranks.keep_logged(keep, replica, line)):
            continue
        click.echo(line)


@cli.command()
@click.argument("name")
@kube_options
def delete(name: str, **where: Any) -> None:
    """Stop a job if it runs, then remove its record and logs."""
    _runtime(**where).delete(name)
    click.echo(f"job {name} deleted")


@cli.command()
@click.argument("name")
@kube_options
def suspend(name: str, **where: Any) -> None:
    """Stop every replica of a running job; `resume` starts them again."""
    _runtime(**where).suspend(name)
    click.echo(f"job {name} suspending")


@cli.command()
@click.argument("name")
@kube_options
def resume(name: str, **where: Any) -> None:
    """Start a suspended job's replicas again (its deadline clock restarts). A job under a Kueue
    queue is given back to Kueue instead (its Workload activated): it starts when Kueue admits it."""
    _runtime(**where).resume(name)
    click.echo(f"job {name} resuming")


cli.add_command(install)  # the platform engineer's commands (cli/cluster.py)
cli.add_command(uninstall)  # what `torchjob install` made, removed (cli/uninstall.py)
cli.add_command(operator)
cli.add_command(version)  # torchjob version [--kube] (cli/version.py)
cli.add_command(stacks_command(kube_options, _runtime))  # torchjob stacks NAME (cli/stacks.py)
cli.add_command(ui_command(kube_options, target_of))  # torchjob ui: the web dashboard (src/torchjob/ui/)
cli.add_command(mcp_command(kube_options, target_of))  # torchjob mcp: the agents' tools (src/torchjob/mcp/)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except UserError as e:
        click.echo(f"error: {e.render()}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:  # a cluster that cannot be reached or refuses is the user's to fix, not a traceback
        from torchjob.kube.clientside.kube_runtime import explain

        user = explain(e)
        if user is None:
            raise
        click.echo(f"error: {user.render()}", err=True)
        sys.exit(user.exit_code)
