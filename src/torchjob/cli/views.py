"""How `list`, `describe` and `render` print what a runtime gives: one printer for both runtimes'
`JobView`s and dry-run plans."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from torchjob.api.model import JobStatus, Progress
from torchjob.api.pod import training_container
from torchjob.api.spec_facts import processes  # (processes per replica, world size): the dashboard's too
from torchjob.api.status import ConditionType, Reason
from torchjob.progress import show
from torchjob.runtime import NAMED_AT_MOST, SUMMARY_OVER, AttemptView, DryRun, JobView, summarised

Dump = Callable[[Any, str], None]


def _age(created: float | None) -> str:
    if created is None:
        return "-"
    s = int(time.time() - created)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _when(t: float | datetime | None) -> str:
    if t is None:
        return "-"
    if isinstance(t, datetime):
        t = t.timestamp()
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _conditions(st: JobStatus) -> list[str]:
    out = ["Conditions:"]
    for cond in st.conditions:
        when = _when(cond.lastTransitionTime)
        out.append(f"  {cond.type:<11}{cond.status:<6}{cond.reason:<22}{when}  {cond.message}")
    return out


def _fields(data: dict[str, Any], prefix: str = "") -> str:
    """A policy's fields as a reader writes them in YAML, on one line: `backoffLimit: 3,
    schedulingPolicy.queue: q` (nested fields by their path)."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.append(_fields(value, f"{prefix}{key}."))
        else:
            out.append(f"{prefix}{key}: {value if isinstance(value, str) else json.dumps(value)}")
    return ", ".join(out)


def _decided(nproc: str) -> str:
    """Who decides a world size the spec does not say: torchrun (`auto`, `gpu`, `cpu`) or the
    replica's own launcher (`accelerate launch`)."""
    if nproc in ("auto", "gpu", "cpu"):
        return f"decided by torchrun ({nproc})"
    return f"decided by {nproc} in each replica"


def _each(nproc: str) -> str:
    """A replica's processes: `2 process(es)`, or `the processes accelerate launch starts`."""
    return f"{nproc} process(es)" if nproc.isdigit() or nproc in ("auto", "gpu", "cpu") else \
        f"the processes {nproc} starts"


def summary(v: JobView) -> dict[str, Any]:
    st = v.status
    row: dict[str, Any] = {"name": v.name}
    if v.namespace is not None:
        row["namespace"] = v.namespace
    if v.kind is not None:  # a kind the operator serves beside TorchJob (TrainJob, PyTorchJob, ...)
        row["kind"] = v.kind
    row.update({
        "state": st.state.value,
        "replicas": sum(v.replicas.values()),
        "replicasByType": v.replicas,
        "nprocPerNode": processes(v.job)[0],
        "worldSize": processes(v.job)[1],
        "restarts": st.restartCount,
        "created": _when(v.created),
        "reason": st.failure.reason if st.failure else None,
        "progress": show.percent(st.progress) + show.straggler_mark(st.progress) if st.progress else None,
    })
    return row


def _progress_lines(p: Progress | None, running: bool = True) -> list[str]:
    """describe's Progress block: percent, step, rate, ETA (while the job runs: a suspended or ended
    job has none), the time of the last report, metrics."""
    if p is None:
        return []
    if not running:
        p = p.model_copy(update={"etaSeconds": None})
    now = datetime.now(UTC)
    out = [f"Progress:    {show.summary(p.model_copy(update={'metrics': []}), now)}"]
    if p.reporter:
        out[-1] += f" (from {p.reporter})"
    if p.metrics:
        out.append("Metrics:     " + ", ".join(f"{m.name}={m.value}" for m in p.metrics))
    return out + show.stragglers(p) + show.history_lines(p.history)


def list_jobs(views: list[JobView], fmt: str, dump: Dump, every_namespace: bool = False) -> None:
    if fmt != "text":
        dump([summary(v) for v in views], fmt)
        return
    from rich.console import Console
    from rich.table import Table

    if not views and not every_namespace:
        print("no jobs; start one with: torchjob run JOB.yaml")
        return
    table = Table(box=None, pad_edge=False)
    kinds = any(v.kind for v in views)  # a KIND column where other kinds than TorchJob are listed
    columns = ("NAME", *(("KIND",) if kinds else ()), "STATE", "PROGRESS", "REPLICAS", "WORLD", "RESTARTS", "AGE",
               "REASON")
    for col in ("NAMESPACE", *columns) if every_namespace else columns:
        table.add_column(col)
    for v in views:
        s = summary(v)
        shape = f"{s['replicas']}x{s['nprocPerNode']}"  # replicas x processes each, as -j NxM
        world = "-" if s["worldSize"] is None else str(s["worldSize"])
        row = [v.name, *([v.kind or "TorchJob"] if kinds else []), s["state"], s["progress"] or "-", shape, world,
               str(s["restarts"]), _age(v.created), s["reason"] or ""]
        table.add_row(*([v.namespace or "-", *row] if every_namespace else row))
    # A pipe (a script, grep) gets every cell whole; rich would fit the table to 80 columns, cutting names.
    Console(soft_wrap=True, width=None if sys.stdout.isatty() else 1000).print(table)


def _attempt_rows(v: JobView, every: bool) -> tuple[list[str], list[AttemptView]]:
    """The Attempts block's first lines and the attempts it shows: each one, or (a job of more than
    SUMMARY_OVER replicas, unless `every`) a line of counts by state and those not running named."""
    total = sum(v.replicas.values())
    if every or total <= SUMMARY_OVER:
        return ["Attempts:"], v.attempts
    counts, odd = summarised(v.attempts)
    said = ", ".join(f"{n} {state}" for state, n in counts.items())
    lines = [f"Attempts:    {total} replicas: {said} (each replica's line: --replicas all)"]
    if len(odd) > NAMED_AT_MOST:
        lines.append(f"  the first {NAMED_AT_MOST} of {len(odd)} not running:")
    return lines, odd[:NAMED_AT_MOST]


def describe(v: JobView, fmt: str, dump: Dump, every_replica: bool = False) -> None:
    """`every_replica`: each replica attempt's line, however many (--replicas all)."""
    if fmt != "text":
        dump(v.raw if v.raw is not None else summary(v), fmt)
        return
    st, job = v.status, v.job
    rp = job.run_policy
    out: list[str] = [f"Name:        {v.name}"]
    if v.kind is not None:
        out.append(f"Kind:        {v.kind}")
    if v.namespace is not None:
        out.append(f"Namespace:   {v.namespace}")
    if v.uid:
        out.append(f"UID:         {v.uid}")
    out += [
        f"State:       {st.state}" + (f" ({st.failure.reason})" if st.failure else ""),
        f"Created:     {_when(v.created)}",
        f"Started:     {_when(st.startTime)}",
        f"Completed:   {_when(st.completionTime)}",
        f"Restarts:    {st.restartCount}"
        + (f" (backoffLimit {rp.backoffLimit})" if rp.backoffLimit is not None else ""),
    ]
    if v.directory is not None:  # a local job
        out += [f"Supervisor:  {v.supervisor or '-'}", f"Directory:   {v.directory}"]
    nproc, world = processes(job)
    out += [*_progress_lines(st.progress, st.state == "Running"),
            f"World size:  {world if world is not None else _decided(nproc)} "
            f"({sum(v.replicas.values())} replica(s) x {_each(nproc)} each)", "Replicas:"]
    for rtype, spec in job.spec.pytorchReplicaSpecs.items():
        pod = spec.template.spec
        c = pod.containers[training_container(pod.containers)]
        argv = shlex.join([*(c.command or []), *(c.args or [])])
        rs = st.replicaStatuses.get(rtype)
        counts = f"  active {rs.active}, succeeded {rs.succeeded}, failed {rs.failed}" if rs else ""
        n = job.replica_count(rtype)
        out.append(f"  {rtype}: {n} replica(s) x {_each(nproc)}: `{argv}`, restartPolicy "
                   f"{job.restart_policy(rtype)}{counts}")
    policies = rp.model_dump(mode="json", exclude_none=True)
    if policies:
        out.append(f"Run policy:  {_fields(policies)}")
    pods = any(a.pod for a in v.attempts)
    head, shown = _attempt_rows(v, every_replica)
    out += head
    w = max([12, *(len(a.replica) + 2 for a in shown)])  # an initializer's name is longer (model-initializer-0)
    if shown or head == ["Attempts:"]:
        out.append(f"  {'REPLICA':<{w}}{'ATTEMPT':<9}{'POD' if pods else 'PID':<{26 if pods else 9}}{'STARTED':<21}"
                   f"{'ENDED':<21}{'EXIT':<6}REASON")
    for a in shown:
        exit_ = "-" if a.exit_code is None else str(a.exit_code)
        who = (a.pod or "-") if pods else (a.pid or "-")
        reason = a.reason or ("Running" if a.ended is None else "")
        out.append(f"  {a.replica:<{w}}{a.attempt:<9}{who!s:<{26 if pods else 9}}{_when(a.started):<21}"
                   f"{_when(a.ended):<21}{exit_:<6}{reason}" + (f"  ({a.waiting})" if a.waiting else ""))
    out += _conditions(st)
    out.append("Events:")
    for e in v.events:
        out.append(f"  {_when(e.time)}  {e.type:<8}{e.reason:<22}{e.message}")
    print("\n".join(out))
    if v.root_cause:
        print(v.root_cause)


def plan(p: DryRun, fmt: str, dump: Dump) -> None:
    """`render`: the plan as data (json), the same data as YAML, or as text."""
    if fmt == "json":
        dump(p.data(), fmt)
    elif fmt == "yaml":
        data = p.data()
        if isinstance(data, list):  # Kubernetes objects: one YAML document each
            _yaml_documents(data)
        else:
            dump(data, fmt)
    else:
        print(p.text())


def documents(docs: list[dict[str, Any]], fmt: str, dump: Dump) -> None:
    """`run --dry-run`: what it would create, to keep: one document as it is; several as YAML
    documents, or in JSON as one v1 List (kubectl applies either as it is)."""
    if len(docs) == 1:
        dump(docs[0], fmt)
    elif fmt == "json":
        dump({"apiVersion": "v1", "kind": "List", "items": docs}, fmt)
    else:
        _yaml_documents(docs)


def _yaml_documents(docs: list[Any]) -> None:
    import yaml

    print(yaml.safe_dump_all(docs, sort_keys=False).rstrip())


def outcome(name: str, st: JobStatus, flags: str) -> None:
    """The last line of `run`, the same for both runtimes; exits non-zero unless the job succeeded."""
    took = ""
    if st.startTime and st.completionTime:
        took = f" in {(st.completionTime - st.startTime).total_seconds():.1f}s"
    restarts = f", {st.restartCount} restart{'s' if st.restartCount != 1 else ''}" if st.restartCount else ""
    if st.is_true(ConditionType.SUCCEEDED):
        click.echo(f"torchjob: job {name} succeeded{took}{restarts}", err=True)
        return
    click.echo(f"torchjob: job {name} {st.state.lower()}{took}{restarts}; "
               f"see `torchjob describe{flags} {name}` and `torchjob logs{flags} {name}`", err=True)
    stopped_by = st.failure.signal if st.failure and st.failure.reason == Reason.TERMINATED else None
    sys.exit({"SIGINT": 130, "SIGTERM": 143}.get(stopped_by or "", 1))


def briefly(cause: str, job: JobView, rt: Any, kube: bool, filt: Callable[[str, str], bool] | None) -> str:
    """`run`'s root cause under the output it just streamed: a traceback it quotes that was streamed
    is said in brief (torch_errors.brief), not twice. `filt`: --ranks-filter's (replica, line) -> shown.
    On a cluster, only the lines the pods' streams carried here count (a pod gone first gave none)."""
    from torchjob.core.diagnosis.torch_errors import brief

    f = job.status.failure
    failed = str(f.replica) if f is not None else None
    shown = None if filt is None or failed is None else lambda line: filt(failed, line)
    again = f"`torchjob logs {job.name}` shows it again"
    if kube:
        streamed = set(getattr(rt, "streamed", {}).get(failed, ()))
        shown = lambda line: line in streamed and (filt is None or failed is None or filt(failed, line))  # noqa: E731
        where = f" --replica {failed} --attempt {f.attempt}" if f is not None and f.attempt is not None else ""
        again = f"`torchjob logs --kube {job.name}{where}` shows it again"
    return brief(cause, again, shown)
