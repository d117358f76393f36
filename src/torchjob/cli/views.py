"""What `list`, `describe` and `logs` show, from the store."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus, Progress
from torchjob.api.pod import training_container
from torchjob.local import runtime
from torchjob.local.store import JobRecord, Store
from torchjob.local.supervisor import supervisor_alive
from torchjob.progress import show

Dump = Callable[[Any, str], None]


def _age(created: float) -> str:
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


def _counts(rec: JobRecord) -> str:
    return "/".join(
        f"{rtype.lower()} {rs.active}a {rs.succeeded}s {rs.failed}f" for rtype, rs in rec.status.replicaStatuses.items()
    )


def _conditions(st: JobStatus) -> list[str]:
    out = ["Conditions:"]
    for cond in st.conditions:
        when = _when(cond.lastTransitionTime)
        out.append(f"  {cond.type:<11}{cond.status:<6}{cond.reason:<22}{when}  {cond.message}")
    return out


def summary(rec: JobRecord) -> dict[str, Any]:
    st = rec.status
    return {
        "name": rec.name,
        "state": st.state.value,
        "replicas": {t: rec.job.replica_count(t) for t in rec.job.spec.pytorchReplicaSpecs},
        "restarts": st.restartCount,
        "created": _when(rec.created),
        "reason": st.failure.reason if st.failure else None,
        "progress": show.percent(st.progress) if st.progress else None,
    }


def _progress_lines(p: Progress | None) -> list[str]:
    """describe's Progress block: percent, step, rate, ETA, the time of the last report, metrics."""
    if p is None:
        return []
    now = datetime.now(UTC)
    out = [f"Progress:    {show.summary(p.model_copy(update={'metrics': []}), now)}"]
    if p.reporter:
        out[-1] += f" (from {p.reporter})"
    if p.metrics:
        out.append("Metrics:     " + ", ".join(f"{m.name}={m.value}" for m in p.metrics))
    return out


def list_jobs(store: Store, fmt: str, dump: Dump) -> None:
    recs = [runtime.get(store, r.name) for r in store.all_jobs()]
    if fmt != "text":
        dump([summary(r) for r in recs], fmt)
        return
    from rich.console import Console
    from rich.table import Table

    if not recs:
        print("no jobs; start one with: torchjob run JOB.yaml")
        return
    table = Table(box=None, pad_edge=False)
    for col in ("NAME", "STATE", "PROGRESS", "REPLICAS", "RESTARTS", "AGE", "REASON"):
        table.add_column(col)
    for r in recs:
        s = summary(r)
        table.add_row(r.name, s["state"], s["progress"] or "-", str(sum(s["replicas"].values())), str(s["restarts"]),
                      _age(r.created), s["reason"] or "")
    Console(soft_wrap=True).print(table)


def describe(store: Store, name: str, fmt: str, dump: Dump) -> None:
    rec = runtime.get(store, name)
    attempts = store.attempts(name)
    events = store.events(name)
    if fmt != "text":
        dump({
            "job": rec.job.model_dump(mode="json", exclude_none=True),
            "status": rec.status.model_dump(mode="json", exclude_none=True),
            "attempts": [a.__dict__ for a in attempts],
            "events": [e.__dict__ for e in events],
            "directory": str(rec.dir),
        }, fmt)
        return
    st = rec.status
    out: list[str] = [
        f"Name:        {rec.name}",
        f"UID:         {rec.uid}",
        f"State:       {st.state}" + (f" ({st.failure.reason})" if st.failure else ""),
        f"Created:     {_when(rec.created)}",
        f"Started:     {_when(st.startTime)}",
        f"Completed:   {_when(st.completionTime)}",
        f"Restarts:    {st.restartCount}" + (f" (backoffLimit {rec.job.run_policy.backoffLimit})"
                                             if rec.job.run_policy.backoffLimit is not None else ""),
        f"Supervisor:  {rec.supervisor_pid if supervisor_alive(rec.supervisor_pid) else '-'}",
        f"Directory:   {rec.dir}",
        *_progress_lines(st.progress),
        "Replicas:",
    ]
    for rtype, spec in rec.job.spec.pytorchReplicaSpecs.items():
        pod = spec.template.spec
        c = pod.containers[training_container(pod.containers)]
        argv = shlex.join([*(c.command or []), *(c.args or [])])
        rs = st.replicaStatuses.get(rtype)
        counts = f"  active {rs.active}, succeeded {rs.succeeded}, failed {rs.failed}" if rs else ""
        out.append(f"  {rtype}: {rec.job.replica_count(rtype)} x `{argv}`, restartPolicy "
                   f"{rec.job.restart_policy(rtype)}{counts}")
    rp = rec.job.run_policy
    policies = {k: v for k, v in rp.model_dump(exclude_none=True).items()}
    if policies:
        out.append(f"Run policy:  {policies}")
    out.append("Attempts:")
    out.append(f"  {'REPLICA':<12}{'ATTEMPT':<9}{'PID':<9}{'STARTED':<21}{'ENDED':<21}{'EXIT':<6}REASON")
    for a in attempts:
        exit_ = "-" if a.exit_code is None else str(a.exit_code)
        out.append(f"  {a.replica:<12}{a.attempt:<9}{a.pid or '-'!s:<9}{_when(a.started):<21}{_when(a.ended):<21}"
                   f"{exit_:<6}{a.reason or ('Running' if a.ended is None else '')}")
    out += _conditions(st)
    out.append("Events:")
    for e in events:
        out.append(f"  {_when(e.time)}  {e.type:<8}{e.reason:<22}{e.message}")
    print("\n".join(out))
    cause = runtime.root_cause(store, rec)
    if cause:
        print(cause)


def _attempt_log(store: Store, rec: JobRecord, replica: str, attempt: int | None) -> Path:
    mine = [a for a in store.attempts(rec.name) if a.replica == replica]
    if not mine:
        names = sorted({a.replica for a in store.attempts(rec.name)})
        raise UserError(f"job {rec.name!r} has no replica {replica!r} with output",
                        fix=f"use one of {names}" if names else "it has not started any replica yet")
    if attempt is not None:
        mine = [a for a in mine if a.attempt == attempt]
        if not mine:
            raise UserError(f"{replica} has no attempt {attempt}")
    chosen = max(mine, key=lambda a: a.attempt)
    if not chosen.log or not Path(chosen.log).exists():
        raise UserError(f"the output of {replica} attempt {chosen.attempt} was removed (cleanPodPolicy: All)")
    return Path(chosen.log)


def logs(store: Store, name: str, replica: str | None, attempt: int | None, follow: bool) -> None:
    rec = runtime.get(store, name)
    path = _attempt_log(store, rec, replica, attempt) if replica else rec.dir / "job.log"
    if not path.exists():
        raise UserError(f"job {name!r} has no output yet", fix="try again in a moment, or use -f")
    out = sys.stdout.buffer
    with path.open("rb") as f:
        while True:
            chunk = f.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if not follow:
                return
            fresh = store.get(name)
            if fresh is None or not supervisor_alive(fresh.supervisor_pid):
                rest = f.read()
                out.write(rest)
                out.flush()
                return
            time.sleep(0.1)



def list_kube(kube: Any, namespace: str | None, fmt: str, dump: Dump) -> None:
    from torchjob.kube import jobs

    rows = []
    for data in jobs.list_jobs(kube, namespace):
        st = jobs.status_of(data)
        specs = data["spec"]["pytorchReplicaSpecs"]
        rows.append({"name": data["metadata"]["name"], "namespace": data["metadata"].get("namespace"),
                     "state": st.state.value, "replicas": sum(int(s.get("replicas", 1)) for s in specs.values()),
                     "restarts": st.restartCount, "reason": st.failure.reason if st.failure else None,
                     "progress": show.percent(st.progress) if st.progress else None})
    if fmt != "text":
        dump(rows, fmt)
        return
    every = namespace == "*"
    print(f"{'NAMESPACE':<20}" * every + f"{'NAME':<30}{'STATE':<12}{'PROGRESS':<10}{'REPLICAS':<10}{'RESTARTS':<10}"
          "REASON")
    for r in rows:
        print(f"{r['namespace']:<20}" * every + f"{r['name']:<30}{r['state']:<12}{r['progress'] or '-':<10}"
              f"{r['replicas']:<10}{r['restarts']:<10}{r['reason'] or ''}")


def describe_kube(kube: Any, name: str, namespace: str | None, fmt: str, dump: Dump) -> None:
    from torchjob.kube import jobs

    data = jobs.get(kube, name, namespace)
    pods = jobs.pods(kube, data)
    evs = jobs.events(kube, data)
    if fmt != "text":
        dump({"job": data, "pods": [p.to_dict() for p in pods],
              "events": [{"type": e.type, "reason": e.reason, "message": e.message} for e in evs]}, fmt)
        return
    st = jobs.status_of(data)
    out = [f"Name:        {name}", f"Namespace:   {data['metadata'].get('namespace')}",
           f"State:       {st.state}" + (f" ({st.failure.reason}: {st.failure.message})" if st.failure else ""),
           f"Started:     {_when(st.startTime)}", f"Completed:   {_when(st.completionTime)}",
           f"Restarts:    {st.restartCount}", *_progress_lines(st.progress), "Pods:"]
    for p in pods:
        phase = p.status.phase if p.status else "-"
        attempt = (p.metadata.annotations or {}).get("torchjob.dev/attempt", "0")
        why = jobs.waiting(p)
        out.append(f"  {p.metadata.name:<40}{phase or '-':<12}attempt {attempt}" + (f"  ({why})" if why else ""))
    out += _conditions(st)
    out.append("Events:")
    for e in evs:
        out.append(f"  {e.type or '':<8}{e.reason or '':<22}{e.message}")
    print("\n".join(out))
