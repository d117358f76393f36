"""What the dashboard shows, as plain JSON-able data, read through the runtime interface (the same
calls `list`, `describe`, `logs`, `suspend`, `resume` and `delete` make) of the runtime
`torchjob.connect` gives for the target: the local store, or with --kube the cluster as the user's
own kubeconfig lets them see it. Blocking; the server runs it in threads: locally one call at a time
(the store's one connection), on a cluster side by side (the client's pool is thread-safe)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from typing import Any

import yaml

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.api.output import hidden
from torchjob.api.spec_facts import processes
from torchjob.connect import ALL_NAMESPACES, Target, connect
from torchjob.progress.history import first_is_loss
from torchjob.runtime import SUMMARY_OVER, JobView, OutputGone, Runtime, summarised


class Action(StrEnum):
    """What a page may ask of a job (each a verb of the runtime interface of the same name)."""

    SUSPEND = "suspend"
    RESUME = "resume"
    DELETE = "delete"


class OutOfScope(UserError):
    """A namespace the dashboard was not started for (`torchjob ui --kube -n NS` serves NS only)."""


def job_ref(kind: str | None, name: str) -> str:
    """How the runtime is asked for a job a page names: `KIND/NAME` (as `torchjob describe --kube
    trainjob/foo` is; the runtime reads the kind, any case, and refuses one it does not know), or the
    bare NAME when the page names no kind."""
    return f"{kind}/{name}" if kind else name


LOG_LINES = 5000  # the log view shows a replica's last this many lines (search and follow work on them)


def _ts(dt: Any) -> float | None:
    return dt.timestamp() if dt is not None else None


def row(v: JobView) -> dict[str, Any]:
    """One line of the jobs page."""
    st, p = v.status, v.status.progress
    procs, world = processes(v.job)
    return {
        "name": v.name, "namespace": v.namespace or "", "kind": v.kind, "state": str(st.state),
        "percent": p.percent if p else None, "step": p.step if p else None, "total": p.total if p else None,
        "eta": p.etaSeconds if p else None,
        "metrics": [{"name": m.name, "value": m.value} for m in (p.metrics if p else [])][:4],
        "replicas": sum(v.replicas.values()), "procs": procs, "world": world,
        "restarts": st.restartCount, "created": v.created,
        "reason": st.failure.reason if st.failure else None,
        "suspended": bool(v.job.run_policy.suspend),
    }


def _spec(job: TorchJob) -> list[dict[str, Any]]:
    out = []
    for rtype, spec in job.spec.pytorchReplicaSpecs.items():
        c = spec.template.spec.containers[0] if spec.template.spec.containers else None
        out.append({"type": str(rtype), "replicas": job.replica_count(rtype),
                    "restartPolicy": str(spec.restartPolicy) if spec.restartPolicy else None,
                    "image": c.image if c else None, "command": [*(c.command or []), *(c.args or [])] if c else []})
    return out


def detail(v: JobView, every_replica: bool = False) -> dict[str, Any]:
    """The job page: a job of more than SUMMARY_OVER replicas with its replicas counted by state
    (replicaCounts) and only the attempts not running listed, unless `every_replica` (?replicas=all)."""
    st, p = v.status, v.status.progress
    shown, counts = v.attempts, None
    if not every_replica and sum(v.replicas.values()) > SUMMARY_OVER:
        counts, shown = summarised(v.attempts)
    document = v.job.model_dump(mode="json", exclude_none=True, exclude={"status"})
    rp = v.job.run_policy
    return {
        **row(v),
        "uid": v.uid,
        "spec": _spec(v.job),
        "runPolicy": rp.model_dump(mode="json", exclude_none=True),
        "progress": p.model_dump(mode="json", exclude_none=True, exclude={"history"}) if p else None,
        "history": _history(p.history if p else None),
        "attempts": [{"replica": a.replica, "attempt": a.attempt, "started": a.started, "ended": a.ended,
                      "exit_code": a.exit_code, "reason": a.reason, "pod": a.pod, "pid": a.pid,
                      "waiting": a.waiting} for a in shown],
        "replicaCounts": counts,
        "conditions": [{"type": str(c.type), "status": str(c.status), "reason": c.reason, "message": c.message,
                        "time": _ts(c.lastTransitionTime)} for c in st.conditions],
        "events": [{"type": e.type, "reason": e.reason, "message": e.message, "time": e.time} for e in v.events],
        "rootCause": v.root_cause,
        "startTime": _ts(st.startTime), "completionTime": _ts(st.completionTime),
        "document": yaml.safe_dump(document, sort_keys=False),
    }


def _history(h: Any) -> dict[str, Any] | None:
    if h is None or not h.steps:
        return None
    order = first_is_loss([s.name for s in h.series])
    by_name = {s.name: s.values for s in h.series}
    return {"stride": h.stride, "steps": h.steps, "omitted": h.omitted,
            "series": [{"name": n, "values": by_name[n]} for n in order]}


LISTING_SHARE = 4  # the lister waits at least this many times as long as its last listing took
RUNTIMES = 16  # with -A: the runtimes of the namespaces acted in lately kept (one client each)


class Source:
    """The dashboard's one way to the jobs of a target: a runtime per namespace acted in (locally
    the one store, whatever the namespace), connected when first asked. A page acts only in the
    namespace the target names (its context's when it names none), or in any with `-A`."""

    def __init__(self, target: Target, refresh_s: float = 1.0,
                 connect_to: Callable[[Target], Runtime[Any]] = connect) -> None:
        self.target = target
        self._connect = connect_to
        self._runtimes: OrderedDict[str | None, Runtime[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.refresh_s = refresh_s
        self._rows: list[dict[str, Any]] | None = None
        self._listed = threading.Condition()
        self._stale = threading.Event()
        self._lister: threading.Thread | None = None
        self.problem: str | None = None  # why the last listing failed (RBAC, a cluster away)
        self._own: str | None = None  # the context's namespace, once known (a target that names none)

    def _runtime(self, key: str | None) -> Runtime[Any]:
        """The runtime of a namespace (None: the target's own). Under the lock."""
        if key not in self._runtimes:
            self._runtimes[key] = self._connect(self.target.in_namespace(key))
            while len(self._runtimes) > RUNTIMES:
                self._runtimes.popitem(last=False)
        self._runtimes.move_to_end(key)
        return self._runtimes[key]

    def scope(self, namespace: str | None, name: str) -> str | None:
        """The namespace a page's call on job `name` (NAME or KIND/NAME) acts in (None: the target's
        own), or OutOfScope. A target of one namespace acts only there, whatever a URL says; with none
        named, that is the context's (learnt from the listing, else from the job itself)."""
        t = self.target
        if not t.kube:
            return None
        if t.namespace == ALL_NAMESPACES:
            if not namespace:
                raise OutOfScope(f"job {name!r}: a dashboard of every namespace needs the job's namespace",
                                 fix="open the job from the jobs page")
            return namespace
        own = t.namespace or self._own
        if own is None and namespace:
            rows = self._rows
            if rows:
                own = rows[0]["namespace"]
            else:  # nothing listed yet: the job itself says (a call to the cluster, with no lock held)
                with self._lock:
                    rt = self._runtime(None)
                own = rt.describe(name).namespace
            self._own = own
        if namespace and namespace != own:
            raise OutOfScope(f"namespace {namespace!r} is not served here: this dashboard was started for "
                             f"namespace {own!r}",
                             fix=f"start `torchjob ui --kube -n {namespace}`, or `-A` for every namespace")
        return t.namespace

    def start(self) -> Source:
        """List the jobs in the background, every `refresh_s`, or LISTING_SHARE times as long as the last
        listing took if that is longer (and at once after an action): every
        page reads the latest listing instead of making one, so a page's first paint never waits
        for a listing of a thousand jobs, however many pages are open."""
        if self._lister is None:
            self._lister = threading.Thread(target=self._list_forever, name="torchjob-ui-lister", daemon=True)
            self._lister.start()
        return self

    def _list_forever(self) -> None:
        lister: Runtime[Any] | None = None
        while True:
            began = time.monotonic()
            try:
                if lister is None:  # its own (store connection, client): no lock with the pages' calls
                    lister = self._connect(self.target)
                rows = [row(v) for v in lister.list()]
                self.problem = None
            except Exception as e:  # the cluster refused or went away: the pages say so, and it goes on
                rows = self._rows or []
                self.problem = e.render() if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
            with self._listed:
                self._rows = rows
                self._listed.notify_all()
            # listing takes at most a fifth of the time (a thousand jobs on a busy machine take a second
            # or more to list: listing again every second would take a core, and the GIL from the pages)
            self._stale.wait(max(self.refresh_s, LISTING_SHARE * (time.monotonic() - began)))
            self._stale.clear()

    def jobs(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Every job's row, from the latest listing (the first one waited for)."""
        self.start()
        with self._listed:
            self._listed.wait_for(lambda: self._rows is not None, timeout_s)
            if self._rows is None:
                raise TimeoutError(f"listing the jobs took over {timeout_s:g}s")
            return self._rows

    def latest(self) -> list[dict[str, Any]] | None:
        """The latest listing's rows, or None before the first one: never waits."""
        return self._rows

    def _calling(self) -> AbstractContextManager[object]:
        """Held around a runtime's call: locally the store's one SQLite connection serves one thread at
        a time; a cluster's client is shared (its connection pool is thread-safe), so that no page waits
        for another page's API call."""
        return nullcontext() if self.target.kube else self._lock

    def _runtime_for(self, namespace: str, ref: str) -> Runtime[Any]:
        key = self.scope(namespace or None, ref)  # may ask the cluster: before the lock
        with self._lock:
            return self._runtime(key)

    def job(self, namespace: str, name: str, kind: str | None = None, every_replica: bool = False) -> dict[str, Any]:
        """The job page of `name`, of `kind` where a page names it (on a cluster a TorchJob and a
        TrainJob may share a name: a bare one that two kinds hold is an AmbiguousJob)."""
        ref = job_ref(kind, name)
        rt = self._runtime_for(namespace, ref)
        with self._calling():
            return detail(rt.describe(ref, summary=not every_replica), every_replica)

    def log(self, namespace: str, name: str, replica: str, attempt: int | None,
            kind: str | None = None) -> dict[str, Any]:
        """A replica attempt's output, its last LOG_LINES lines (on a cluster, at most 4 MiB of them)."""
        ref = job_ref(kind, name)
        rt = self._runtime_for(namespace, ref)
        with self._calling():
            try:
                lines = list(rt.logs(ref, replica, attempt, tail=LOG_LINES + 1))
            except OutputGone:
                return {"text": "", "truncated": False, "gone": True}
        prefix = f"[{replica}] "  # a cluster's lines name their pod's replica: the view shows one
        text = "\n".join(line.removeprefix(prefix) for line in lines[-LOG_LINES:] if not hidden(line))
        return {"text": text, "truncated": len(lines) > LOG_LINES}

    def stacks(self, namespace: str, name: str, kind: str | None = None) -> dict[str, Any]:
        """Where the job's ranks are now (`torchjob stacks`): its data (`-o json`'s) and its `text`."""
        from torchjob.runtime import stacks_view

        ref = job_ref(kind, name)
        rt = self._runtime_for(namespace, ref)
        with self._calling():
            taken = rt.stacks(ref)
        return stacks_view(taken)

    def act(self, namespace: str, name: str, verb: str, kind: str | None = None) -> None:
        ref = job_ref(kind, name)
        rt = self._runtime_for(namespace, ref)
        with self._calling():
            verbs = {Action.SUSPEND: rt.suspend, Action.RESUME: rt.resume, Action.DELETE: rt.delete}
            verbs[Action(verb)](ref)
        self._stale.set()  # the jobs page shows it at once
