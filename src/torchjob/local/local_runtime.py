"""The local runtime behind the runtime interface (`torchjob.runtime.Runtime`): a job's replicas
are processes run by a supervisor on this machine, recorded in the store.

`dryrun` renders the processes (argv, env, working directory, mounts, GPUs) with the ports it
picked; `schedule`/`run` start exactly that plan: the ports travel with it to the supervisor. Code the
job ships (a function's files) is written to TORCHJOB_HOME/code/NAME, its working directory, as a
cluster's replicas run in the ConfigMap that carries it.
Readers (`describe`, `list`, `logs`) write nothing; a writing verb first records core's verdict on
the stored jobs (`read.settle`: a lost supervisor, a TTL passed).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.console import Console
from torchjob.core.diagnosis.stacks import Stacks
from torchjob.local.inspect import read
from torchjob.local.inspect.render import warnings
from torchjob.local.start.launch import LaunchSpec, LocalOptions
from torchjob.local.start.prepare import claim_name, placement, prepare_job, supervisor_alive
from torchjob.local.store.files import private_dir, private_file
from torchjob.local.store.store import JobRecord, Store
from torchjob.local.supervisor import pids
from torchjob.local.supervisor.supervisor import Supervisor
from torchjob.runtime import (
    Code,
    JobView,
    OutputGone,
    Show,
    name_taken,
    no_output,
    no_such_job,
    refuse_resume,
    refuse_suspend,
)

CHUNK = 65536


@dataclass
class LocalPlan:
    """Exactly what a local run starts: the job (its uid set), every replica's process, the options
    (with the ports picked for this plan)."""

    job: TorchJob
    opts: LocalOptions
    specs: list[LaunchSpec]
    notes: list[str] = field(default_factory=list)
    code: Code | None = None  # written to opts.cwd before the job starts
    document: dict[str, Any] = field(default_factory=dict)  # the job as given, to keep
    warnings: list[str] = field(default_factory=list)  # none: this runtime does all a job asks

    def documents(self) -> list[dict[str, Any]]:
        return [self.document]

    @property
    def hint(self) -> str | None:
        if self.opts.document_ports:
            return None
        return "note: ports are picked per plan: a later run picks its own; pass --document-ports to use the document's"

    @property
    def ports(self) -> tuple[int, int]:
        assert self.opts.ports is not None
        return self.opts.ports

    def data(self) -> Any:
        replicas = [
            {"replica": s.name, "command": s.argv, "workingDir": s.cwd, "env": dict(sorted(s.env.items())),
             "mounts": [m.__dict__ for m in s.mounts], "gpus": s.gpus, "torchrun": s.torchrun,
             "gracePeriodSeconds": s.grace_period_s}
            for s in self.specs
        ]
        return {"name": self.job.name, "replicas": replicas, "warnings": self.notes}

    def text(self) -> str:
        out: list[str] = []
        for s in self.specs:
            out.append(f"{s.name}:" + ("  (torchrun)" if s.torchrun else ""))
            out.append(f"  command: {shlex.join(s.argv)}")
            out.append(f"  workingDir: {s.cwd}")
            out.append("  env:")
            out += [f"    {k}={v}" for k, v in sorted(s.env.items())]
            out += [f"  mount: {m.source} -> {m.target}" + (" (read-only)" if m.read_only else "") for m in s.mounts]
            if s.gpus is not None:
                out.append(f"  gpus: {','.join(s.gpus) or '(none)'}")
        return "\n".join(out)


class LocalRuntime:
    flags = ""

    def __init__(self, opts: LocalOptions | None = None, store: Store | None = None) -> None:
        self.opts = opts or LocalOptions()
        self._store = store

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store()
        return self._store

    # --- plan and schedule ---

    def dryrun(self, job: TorchJob, lenient: bool = False, code: Code | None = None) -> LocalPlan:
        """The plan, with its ports picked now. `lenient` (`render`, which goes on whatever happens):
        what only a run would refuse is noted in the plan's notes; otherwise it is refused here."""
        from torchjob.dialects.convert import explicit

        notes = warnings(job) if lenient else None
        where = placement(job, self.opts)
        opts = dataclasses.replace(self.opts, ports=(where.master_port, where.rdzv_port))
        if code is not None:  # run where the code is written (a container's own workingDir still wins)
            opts = dataclasses.replace(opts, cwd=str(self.store.root / "code" / job.name))
        document = explicit(job)
        job, specs = prepare_job(job, opts, self.store, notes)
        return LocalPlan(job, opts, specs, notes if notes is not None else [], code, document)

    def _create(self, plan: LocalPlan) -> TorchJob:
        """Record the plan's job (nothing runs yet); a finished job of that name gives way."""
        read.settle(self.store)
        old = self.store.get(plan.job.name)
        if old is not None and not old.status.finished and supervisor_alive(old):
            raise name_taken(old.name, old.status)
        claim_name(self.store, plan.job.name)
        try:
            self.store.create_job(plan.job, plan.opts.to_json())
        except sqlite3.IntegrityError:  # another process recorded a job of this name since the check above
            raise UserError(f"a job named {plan.job.name!r} was just started by another process",
                            fix=f"wait for it, delete it with `torchjob delete {plan.job.name}`, or change its name")
        if plan.code is not None:  # only once the name is this run's: never under another run of the name
            _write_code(Path(plan.opts.cwd), plan.code)
        return plan.job

    def schedule(self, plan: LocalPlan) -> str:
        """Start the job's supervisor detached; it outlives this shell."""
        job = self._create(plan)
        rec = self._record(job.name)
        log = private_file(rec.dir / "supervisor.log")
        env = {**os.environ, "TORCHJOB_HOME": str(self.store.root)}
        # Started with SIGUSR1 blocked (a child inherits the mask), so that a `suspend` or `delete` signalled
        # before the supervisor's handler is in place waits for it instead of killing it (SIGUSR1's default).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "torchjob.local.supervisor.daemon", job.name],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env, cwd=plan.opts.cwd,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self.store.set_supervisor(job.name, proc.pid)
        return f"job {job.name} submitted; follow it with: torchjob logs {job.name} -f"

    def run(self, plan: LocalPlan, quiet: bool = False, console: Show | None = None) -> JobView:
        """Run in the foreground, streaming output; returns the final view. `console` makes the console
        from the job's combined log (the Python API's, in a notebook); default: this terminal's."""
        job = self._create(plan)
        rec = self._record(job.name)
        private_file(rec.dir / "job.log").close()  # the console appends to it, keeping its mode
        shown = console(rec.dir / "job.log") if console is not None else \
            Console(rec.dir / "job.log", out=None if quiet else sys.stdout, err=sys.stderr)
        try:
            status = Supervisor(self.store, job.name, shown).run()
        finally:
            shown.close()
        final = self.store.get(job.name)
        if final is None:  # removed at the end (ttlSecondsAfterFinished: 0)
            rec.status = status
            return read.view(self.store, rec, read.Verdict(status))
        return read.view(self.store, final, read.Verdict(final.status))

    # --- readers: they write nothing ---

    def _record(self, name: str) -> JobRecord:
        rec = self.store.get(name)
        if rec is None:
            raise no_such_job(name, [r.name for r, _ in read.visible(self.store)])
        return rec

    def _find(self, name: str) -> tuple[JobRecord, read.Verdict]:
        found = read.find(self.store, name)
        if found is None:
            raise no_such_job(name, [r.name for r, _ in read.visible(self.store)])
        return found

    def describe(self, name: str, summary: bool = False) -> JobView:
        rec, v = self._find(local_name(name))  # the store's rows are cheap: `summary` reads no less
        return read.view(self.store, rec, v)

    def list(self) -> list[JobView]:
        return [read.view(self.store, rec, v, details=False) for rec, v in read.visible(self.store)]

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None, *, follow: bool = False,
             tail: int | None = None) -> Iterator[str]:
        """The combined log (every replica's lines, prefixed), or one attempt's own file."""
        name = local_name(name)
        rec, _ = self._find(name)
        path = self._attempt_log(rec, replica, attempt) if replica else rec.dir / "job.log"
        if not path.exists():
            raise no_output(name, None, [])
        with path.open("rb") as f:
            if tail is not None:
                f.seek(_tail_start(f, tail))
            pending = b""
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    if not follow:
                        break
                    fresh = self.store.get(name)
                    if fresh is None or not supervisor_alive(fresh):
                        chunk = f.read()  # what it wrote before it ended
                        follow = False
                    else:
                        time.sleep(0.1)
                *done, pending = (pending + chunk).split(b"\n")
                for line in done:
                    yield line.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")

    def _attempt_log(self, rec: JobRecord, replica: str, attempt: int | None) -> Path:
        mine = [a for a in self.store.attempts(rec.name) if a.replica == replica]
        if not mine:
            raise no_output(rec.name, replica, list({a.replica for a in self.store.attempts(rec.name)}))
        if attempt is not None:
            mine = [a for a in mine if a.attempt == attempt]
            if not mine:
                raise UserError(f"{replica} has no attempt {attempt}")
        chosen = max(mine, key=lambda a: a.attempt)
        if not chosen.log or not Path(chosen.log).exists():
            raise OutputGone(f"the output of {replica} attempt {chosen.attempt} was removed (cleanPodPolicy: All)")
        return Path(chosen.log)

    def stacks(self, name: str, wait_s: float | None = None) -> Stacks:
        """Every live process's Python stacks (all threads) of the job's current attempts
        (torchjob.local.inspect.stacks: faulthandler on SIGUSR2, registered by torchjob's start-up hook)."""
        from torchjob.local.inspect import stacks

        name = local_name(name)
        _, v = self._find(name)
        if v.status.finished:
            raise UserError(f"job {name} has ended ({v.status.state}): it has no process to take stacks from",
                            fix=f"a stalled attempt's stacks are kept: `torchjob describe {name}` says where")
        running = {a.replica: Path(a.log).parent for a in self.store.attempts(name)
                   if a.current and a.ended is None and a.log}
        return stacks.collect(running, stacks.WAIT_S if wait_s is None else wait_s)

    # --- writers ---

    def suspend(self, name: str) -> None:
        self._set_suspend(name, True)

    def resume(self, name: str) -> None:
        self._set_suspend(name, False)

    def _set_suspend(self, name: str, value: bool) -> None:
        name = local_name(name)
        read.settle(self.store)
        rec, v = self._find(name)
        (refuse_suspend if value else refuse_resume)(name, rec.job, v.status)
        if not supervisor_alive(rec):
            raise UserError(f"job {name!r} has no running supervisor", fix="delete it and run it again")
        rp = rec.job.run_policy.model_copy(update={"suspend": value})
        self.store.set_job(rec.job.model_copy(update={"spec": rec.job.spec.model_copy(update={"runPolicy": rp})}))
        _signal_supervisor(rec)

    def delete(self, name: str, wait_s: float = 60.0) -> None:
        name = local_name(name)
        read.settle(self.store)
        rec, _ = self._find(name)
        if supervisor_alive(rec):
            self.store.mark_deleting(name)
            _signal_supervisor(rec)
            end = time.monotonic() + wait_s
            while self.store.get(name) is not None and time.monotonic() < end:
                if not supervisor_alive(rec):  # it ended (its job finished) before it saw the signal
                    self.store.delete_job(name)
                    return
                time.sleep(0.05)
            if self.store.get(name) is not None:
                raise UserError(f"job {name!r} is still stopping after {wait_s:g}s", fix="try again")
            return
        self.store.delete_job(name)


# What `KIND/NAME` may say for the one kind there is locally (as on a cluster: `torchjob/foo`, `tj/foo`)
TORCHJOB_WORDS = ("torchjob", "torchjobs", "tj", "torchjob.torchjob.dev", "torchjobs.torchjob.dev")
CLUSTER_KINDS = {"pytorchjob": "PyTorchJob", "trainjob": "TrainJob", "pytorchtrainingjob": "PyTorchTrainingJob"}


def local_name(ref: str) -> str:
    """The job a local verb's `ref` names: NAME, or `torchjob/NAME` as `--kube` takes KIND/NAME (every
    local job is a TorchJob). A kind only a cluster has (`trainjob/NAME`) is a UserError saying to add
    --kube; any other word before a "/" is part of the name (the store takes any name)."""
    word, sep, name = ref.partition("/")
    if not sep or not name or "/" in name:
        return ref
    if word.lower() in TORCHJOB_WORDS:
        return name
    cluster = CLUSTER_KINDS.get(word.lower().split(".")[0].removesuffix("s"))
    if cluster is not None:
        raise UserError(f"{ref!r}: a {cluster} runs on a cluster only; every local job is a TorchJob",
                        fix=f"add --kube to ask the cluster, or write {name} (or torchjob/{name}) for a local job")
    return ref


def _signal_supervisor(rec: JobRecord) -> None:
    if rec.supervisor_pid:
        pids.send(rec.supervisor_pid, signal.SIGUSR1, pids.started_at(rec.supervisor_start))



def _tail_start(f: BinaryIO, lines: int) -> int:
    """Where the last `lines` lines of a file begin, read backwards: what comes before is not read."""
    end = f.seek(0, os.SEEK_END)
    at, seen = end, 0
    while at > 0:
        step = min(CHUNK, at)
        at -= step
        f.seek(at)
        block = f.read(step)
        if at + step == end and block.endswith(b"\n"):
            block = block[:-1]  # the last line's end starts no line
        for i in range(len(block) - 1, -1, -1):
            if block[i] == 0x0A:
                seen += 1
                if seen == lines:
                    return at + i + 1
    return 0


def _write_code(where: Path, files: Code) -> None:
    """A job's shipped files, written again for each run (private: they may hold the user's code)."""
    shutil.rmtree(where, ignore_errors=True)
    private_dir(where.parent)
    private_dir(where)
    for rel, data in files.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
