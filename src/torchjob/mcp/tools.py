"""The tools of `torchjob mcp` as plain functions: each takes the arguments an agent passes and returns
an `Answer` (a short text and the structured data beside it), or raises a `Mistake` (the argument, the
reason, the fix). Each is one or two calls of the runtime interface that `torchjob.connect` gives, the
same calls the command line makes; nothing here knows of MCP, so that a test or a bench calls them
as they are.

Where an agent acts: this machine, or a cluster (`kube`, with the kubeconfig, context and namespace the
command line takes). The server's own flags say which is the default and what it may reach: started
for one namespace (`-n`), a call acts only there; with `-A`, in any; with neither, in the context's own,
as the dashboard's scope is.

A job is started only from a plan the agent saw: `preview` dry-runs the job and keeps the plan under a
random id; `submit` starts that very plan (its name, its ports), and only for the same content and
the same place. Each id starts one job.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from torchjob.api.errors import UserError
from torchjob.api.status import JobState
from torchjob.connect import ALL_NAMESPACES, Target, connect
from torchjob.mcp.answers import Answer, Mistake, detail, mistake_of, progress_text, row
from torchjob.mcp.documents import built_from_command, load_text
from torchjob.mcp.places import Scope, Where, reap
from torchjob.runtime import JobView, OutputGone, created

if TYPE_CHECKING:
    from torchjob.api.build import Built
    from torchjob.api.model import TorchJob
    from torchjob.runtime import DryRun, Runtime

T = TypeVar("T")

ENDED = "ended"  # wait_job's default: until the job succeeds or fails
STATES = tuple(s.value for s in JobState)
TAIL = 100  # job_logs' default lines
MAX_TAIL = 2000
MAX_LOG_CHARS = 64 * 1024  # what one job_logs answer carries at most (the last lines kept)
MAX_WAIT_S = 300.0  # wait_job's bound: an agent's call never hangs past it
POLL_S = 0.5
PLAN_TTL_S = 3600.0  # a preview is good for an hour
EVENTS = 20  # describe_job's latest events
HISTORY_POINTS = 50  # describe_job's points of each metric's history


@dataclass
class Plan:
    key: str  # what it was made from, and where (sha256)
    plan: DryRun
    runtime: Runtime[Any]
    made: float
    target: Target


@dataclass
class Tools:
    """The verbs an agent calls. One runtime per place, made when first asked (locally one store: its
    one SQLite connection serves one call at a time, so local calls hold a lock)."""

    scope: Scope = field(default_factory=Scope)
    connect_to: Callable[[Target], Runtime[Any]] = connect
    _runtimes: dict[Target, Runtime[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.Lock = field(default_factory=threading.Lock)
    _plans: dict[str, Plan] = field(default_factory=dict)
    _own: dict[tuple[str | None, str | None], str] = field(default_factory=dict)

    # --- places ---

    def target(self, where: Where, listing: bool = False) -> Target:
        """The place a call acts on, within the server's scope; a Mistake naming the argument when out of it.
        `listing`: a server of every namespace lists every one unless the call names one."""
        base = self.scope.target
        kube = base.kube if where.kube is None else where.kube
        if not kube:
            for arg, value in (("namespace", where.namespace), ("kubeconfig", where.kubeconfig),
                               ("context", where.context)):
                if value:
                    raise Mistake(arg, f"{arg} {value!r} names a cluster, and this call acts on this machine",
                                  "pass kube=true with it, or leave it out for a job on this machine")
            return Target()
        for arg, pinned, asked in (("kubeconfig", base.kubeconfig, where.kubeconfig),
                                   ("context", base.context, where.context)):
            if pinned and asked and asked != pinned:
                raise Mistake(arg, f"{arg} {asked!r} is not served here: this server was started for {arg} "
                                   f"{pinned!r}", f"leave {arg} out, or start another `torchjob mcp --{arg} {asked}`")
        kubeconfig, context = where.kubeconfig or base.kubeconfig, where.context or base.context
        ns = where.namespace or None
        if base.namespace == ALL_NAMESPACES:  # -A: any namespace
            return Target(True, kubeconfig, context, ns or (ALL_NAMESPACES if listing else None))
        own = base.namespace or self._context_namespace(kubeconfig, context)
        if ns and ns != own:
            raise Mistake("namespace", f"namespace {ns!r} is not served here: this server acts in namespace {own!r}",
                          f"leave namespace out, or start `torchjob mcp --kube -n {ns}` (or -A for every namespace)")
        return Target(True, kubeconfig, context, base.namespace)

    def _context_namespace(self, kubeconfig: str | None, context: str | None) -> str:
        """The namespace a context names (default: `default`), read from the kubeconfig; contacts nothing."""
        key = (kubeconfig, context)
        if key not in self._own:
            from torchjob.kube.clientside.kube_runtime import client

            try:
                self._own[key] = client(kubeconfig.split(":")[0] if kubeconfig else None, context).namespace \
                    or "default"
            except Exception as e:
                raise Mistake("kubeconfig", f"cannot read the kubeconfig: {e}",
                              "check KUBECONFIG / kubeconfig and context") from None
        return self._own[key]

    def runtime(self, target: Target) -> Runtime[Any]:
        with self._lock:
            if target not in self._runtimes:
                self._runtimes[target] = self.connect_to(target)
            return self._runtimes[target]

    def _calling(self, target: Target) -> AbstractContextManager[object]:
        return nullcontext() if target.kube else self._local

    def _call(self, target: Target, arg: str, fn: Callable[[Runtime[Any]], T]) -> T:
        """One call of the runtime at `target`; what it refuses is the agent's Mistake about `arg`."""
        rt = self.runtime(target)
        try:
            with self._calling(target):
                return fn(rt)
        except UserError as e:
            raise mistake_of(e, arg) from None
        except Mistake:
            raise
        except Exception as e:
            if not target.kube:
                raise
            from torchjob.kube.clientside.kube_runtime import explain

            user = explain(e)
            if user is None:
                raise
            raise Mistake("kube", user.message, user.fix) from None

    # --- reading ---

    def list_jobs(self, where: Where) -> Answer:
        t = self.target(where, listing=True)
        views = self._call(t, "namespace", lambda rt: rt.list())
        jobs = [row(v) for v in views]
        if not jobs:
            return Answer(f"no jobs on {t.where}", {"jobs": []})
        lines = [f"{j['name']}: {j['state']}" + (f", {progress_text(j['progress'])}" if j["progress"] else "")
                 for j in jobs]
        return Answer("\n".join(lines), {"jobs": jobs})

    def describe(self, name: str, where: Where) -> Answer:
        t = self.target(where)
        v = self._call(t, "name", lambda rt: rt.describe(_ref(name, t)))
        data = detail(v)
        text = f"job {v.name}: {data['state']}"
        if data["progress"]:
            text += f", {progress_text(data['progress'])}"
        h = data["history"]
        for metric, values in (h["series"].items() if h else ()):
            text += f"\n{metric} at steps {h['steps'][-10:][0]}..{h['steps'][-1]}: " + " ".join(
                "-" if x is None else f"{x:.4g}" for x in values[-10:])
        text += f"\nworld size {data['world_size']}, {data['replicas']} replica(s), {data['restarts']} restart(s)"
        for a in data["attempts"]:
            ended = a["exit_code"] is not None or a["ended"] is not None
            text += f"\n{a['replica']} attempt {a['attempt']}: " + (
                f"exit code {a['exit_code']} ({a['reason']})" if ended else "running")
        if data["root_cause"]:
            text += f"\nroot cause:\n{data['root_cause']}"
        return Answer(text, data)

    def logs(self, name: str, tail: int, replica: str | None, ranks: str | None, where: Where) -> Answer:
        from torchjob.api.output import hidden

        if isinstance(tail, bool) or not 1 <= tail <= MAX_TAIL:
            raise Mistake("tail", f"tail {tail!r} is not a number of lines from 1 to {MAX_TAIL}", "e.g. tail=100")
        t = self.target(where)
        ref = _ref(name, t)

        def read(rt: Runtime[Any]) -> list[str]:
            keep = _rank_filter(rt.describe(ref).job, ranks) if ranks is not None else None
            try:
                lines = [line for line in rt.logs(ref, replica, tail=tail) if not hidden(line)]
            except OutputGone:
                return []
            if keep is not None:
                from torchjob.cli.ranks import keep_logged

                lines = [line for line in lines if keep_logged(keep, replica, line)]
            return lines[-tail:]

        lines = self._call(t, "replica" if replica else "name", read)
        text, truncated = "\n".join(lines), False
        if len(text) > MAX_LOG_CHARS:
            text, truncated = text[-MAX_LOG_CHARS:].split("\n", 1)[-1], True
        shown = text.count("\n") + 1 if text else 0
        return Answer(text or f"job {name} has no output yet",
                      {"name": name, "replica": replica, "lines": shown, "truncated": truncated, "text": text})

    def stacks(self, name: str, all_threads: bool, where: Where) -> Answer:
        """Where a running job's ranks are now, as `torchjob stacks` prints it (its -o json's data)."""
        from torchjob.core.diagnosis import stacks as core_stacks

        t = self.target(where)
        taken = self._call(t, "name", lambda rt: rt.stacks(_ref(name, t)))
        return Answer(core_stacks.text(taken, all_threads), core_stacks.as_data(taken, all_threads))

    def validate(self, document: str) -> Answer:
        loaded = load_text(document)
        from torchjob.core.shape.advice import advise
        from torchjob.local.inspect.render import warnings

        notes = [*loaded.notes, *advise(loaded.job, loaded.doc), *warnings(loaded.job)]
        text = f"valid {loaded.dialect} {loaded.job.name!r}" + "".join(f"\nwarning: {n}" for n in notes)
        return Answer(text, {"valid": True, "name": loaded.job.name, "dialect": loaded.dialect, "warnings": notes})

    def convert(self, document: str, to: str) -> Answer:
        import yaml

        from torchjob.dialects.convert import TARGETS
        from torchjob.dialects.convert import convert as convert_to

        if to not in TARGETS:
            raise Mistake("to", f"{to!r} is not a dialect torchjob writes", f"use one of {', '.join(TARGETS)}")
        job = load_text(document).job
        data, lost = convert_to(job, to)
        text = yaml.safe_dump(data, sort_keys=False)
        lost = list(lost)
        return Answer(text + "".join(f"# not expressible in {to}: {item}\n" for item in lost),
                      {"to": to, "document": text, "lost": lost})

    def wait(self, name: str, state: str | None, step: int | None, timeout_s: float, where: Where) -> Answer:
        if state is not None and state != ENDED and state not in STATES:
            raise Mistake("state", f"{state!r} is not a job state", f"use {ENDED!r} or one of {', '.join(STATES)}")
        if step is not None and (isinstance(step, bool) or step < 1):
            raise Mistake("step", f"step {step!r} is not a step number", "e.g. step=10")
        if isinstance(timeout_s, bool) or not (isinstance(timeout_s, int | float) and 0 <= timeout_s <= MAX_WAIT_S) \
                or math.isnan(timeout_s):
            raise Mistake("timeout_s", f"timeout_s {timeout_s!r} is not from 0 to {MAX_WAIT_S:g} seconds",
                          f"wait in rounds of at most {MAX_WAIT_S:g} s: call wait_job again")
        t = self.target(where)
        ref = _ref(name, t)
        want = state or (None if step is not None else ENDED)
        began = time.monotonic()
        while True:
            v = self._call(t, "name", lambda rt: rt.describe(ref))
            st = v.status
            p = st.progress
            reached = (want == ENDED and st.finished) or (want is not None and want != ENDED and st.state == want) \
                or (step is not None and p is not None and p.step is not None and p.step >= step)
            waited = time.monotonic() - began
            if reached or st.finished or waited >= timeout_s:
                break
            time.sleep(min(POLL_S, max(0.0, timeout_s - waited)))
        data = {**detail(v, brief=True), "reached": bool(reached), "waited_s": round(waited, 2)}
        goal = f"step {step}" if step is not None and want is None else (want if want != ENDED else "its end")
        text = f"job {v.name}: {data['state']}" + (f", {progress_text(data['progress'])}" if data["progress"] else "")
        if not reached:
            text += (f"; ended before {goal}" if st.finished else
                     f"; not at {goal} after {waited:.0f}s (it goes on: call wait_job again)")
        if data.get("root_cause"):
            text += f"\nroot cause:\n{data['root_cause']}"
        return Answer(text, data)

    # --- changing ---

    def preview(self, document: str | None, command: str | None, where: Where) -> Answer:
        t = self.target(where)
        built = self._built(document, command, t)
        rt = self.runtime(t)
        try:
            with self._calling(t):
                plan = rt.dryrun(built.job, code=built.code)
        except UserError as e:
            raise mistake_of(e, "document" if document is not None else "command") from None
        self._forget_old()
        plan_id = secrets.token_hex(8)
        self._plans[plan_id] = Plan(_key(document, command, t), plan, rt, time.monotonic(), t)
        import yaml

        documents = plan.documents()
        warns = [*plan.warnings, *plan.notes]
        shipped = built.shipped() if t.kube else None
        text = (f"plan {plan_id}: job {built.job.name} on {t.where}\n{plan.text()}"
                + "".join(f"\nwarning: {w}" for w in warns) + (f"\nnote: {shipped}" if shipped else "")
                + f"\nto start it: submit_job with plan_id={plan_id!r} and the same "
                + ("document" if document is not None else "command"))
        return Answer(text, {"plan_id": plan_id, "name": built.job.name, "where": t.where, "warnings": warns,
                             "plan": plan.data(), "documents": yaml.safe_dump_all(documents, sort_keys=False)})

    def submit(self, document: str | None, command: str | None, plan_id: str | None, where: Where) -> Answer:
        what = "document" if document is not None else "command"
        if document is not None and command is not None:
            raise Mistake("command", "give the job as a document or as a command, not both",
                          "pass the one you passed to preview_job")
        t = self.target(where)
        if not plan_id:
            raise Mistake("plan_id", "submit_job starts only a plan the agent has seen",
                          f"call preview_job with the same {what} (and place) first, then submit_job with its plan_id")
        self._forget_old()
        kept = self._plans.get(plan_id)
        if kept is None:
            raise Mistake("plan_id", f"no plan {plan_id!r} (unknown, already submitted, or older than an hour)",
                          f"call preview_job with the {what} again and use the plan_id it returns")
        if document is None and command is None:
            raise Mistake("document", "submit_job needs the document (or command) the plan was made for",
                          f"pass the same {what} you passed to preview_job")
        if kept.key != _key(document, command, t):
            raise Mistake("plan_id", f"plan {plan_id!r} was made for another {what} or place than this call's",
                          f"pass the very {what} (and kube/namespace) you previewed, or preview this one")
        del self._plans[plan_id]  # one job per plan
        rt, plan = kept.runtime, kept.plan
        try:
            with self._calling(t):
                rt.schedule(plan)
                v = rt.describe(_ref(plan.job.name, t))
                if not t.kube:
                    reap(v.supervisor)
                    v = created(rt, v)
        except UserError as e:
            raise mistake_of(e, what) from None
        return Answer(f"job {v.name} submitted on {t.where}: {v.status.state}; follow it with wait_job, "
                      "describe_job and job_logs", {**detail(v, brief=True), "where": t.where})

    def act(self, verb: str, name: str, where: Where) -> Answer:
        t = self.target(where)
        ref = _ref(name, t)

        def do(rt: Runtime[Any]) -> JobView | None:
            getattr(rt, verb)(ref)
            return None if verb == "delete" else rt.describe(ref)

        v = self._call(t, "name", do)
        words = {"suspend": "suspending", "resume": "resuming", "delete": "deleted"}
        if v is None:
            return Answer(f"job {name} deleted", {"name": name, "state": "Deleted", "progress": None})
        return Answer(f"job {v.name} {words[verb]}: {v.status.state}", detail(v, brief=True))

    # --- helpers ---

    def _built(self, document: str | None, command: str | None, t: Target) -> Built:
        from torchjob.api.build import Built

        if (document is None) == (command is None):
            raise Mistake("document", "give the job as a document or as a command, one of the two",
                          "document: the job's YAML text (any dialect); or command: '-j 1x2 train.py -- --lr 0.1'")
        if document is not None:
            return Built(load_text(document).job)
        assert command is not None
        return built_from_command(command, t.kube)

    def _forget_old(self) -> None:
        now = time.monotonic()
        for k in [k for k, p in self._plans.items() if now - p.made > PLAN_TTL_S]:
            del self._plans[k]


def _ref(name: str, t: Target) -> str:
    if not isinstance(name, str) or not name.strip():
        raise Mistake("name", "no job named", "pass the job's name, as list_jobs shows it")
    return name.strip()


def _key(document: str | None, command: str | None, t: Target) -> str:
    what = f"document\0{document}" if document is not None else f"command\0{' '.join((command or '').split())}"
    return hashlib.sha256(f"{what}\0{t}".encode()).hexdigest()


def _rank_filter(job: TorchJob, ranks: str) -> Any:
    from torchjob.cli import ranks as r

    try:
        wanted = r.parse(ranks)
    except UserError as e:
        raise Mistake("ranks", e.message.replace("--ranks-filter", "ranks"), "e.g. ranks='0' or ranks='0,3'") from None
    assert wanted is not None
    return r.line_filter(job, wanted)


