"""The local runtime's verbs, for the CLI: run, submit, suspend/resume, delete, and the
after-the-fact views (root cause, TTL clean-up)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from torchjob.api.errors import UserError
from torchjob.api.model import FailureInfo, TorchJob
from torchjob.core import policy
from torchjob.core.reconcile import set_condition
from torchjob.core.topology import ReplicaId, node_rank
from torchjob.local.console import Console
from torchjob.local.process import error_file_summary
from torchjob.local.spec import LocalOptions
from torchjob.local.store import JobRecord, Store
from torchjob.local.supervisor import Supervisor, claim_name, prepare_job, supervisor_alive


def create(store: Store, job: TorchJob, opts: LocalOptions) -> TorchJob:
    """Validate what a local start needs, then record the job (nothing runs yet)."""
    job, _ = prepare_job(job, opts, store)
    claim_name(store, job.name)
    store.create_job(job, opts.to_json())
    return job


def run(store: Store, job: TorchJob, opts: LocalOptions, *, quiet: bool = False) -> JobRecord:
    """Run in the foreground, streaming output; returns the final record."""
    job = create(store, job, opts)
    rec = get(store, job.name)
    console = Console(rec.dir / "job.log", out=None if quiet else sys.stdout, err=sys.stderr)
    try:
        status = Supervisor(store, job.name, console).run()
    finally:
        console.close()
    final = store.get(job.name)
    if final is None:  # removed at the end (ttlSecondsAfterFinished: 0)
        rec.status = status
        return rec
    return final


def submit(store: Store, job: TorchJob, opts: LocalOptions) -> TorchJob:
    """Start the job's supervisor detached; it outlives this shell."""
    job = create(store, job, opts)
    rec = store.get(job.name)
    assert rec is not None
    log = (rec.dir / "supervisor.log").open("ab")
    env = {**os.environ, "TORCHJOB_HOME": str(store.root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchjob.local.daemon", job.name],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env, cwd=opts.cwd,
    )
    store.set_supervisor(job.name, proc.pid)
    return job


def get(store: Store, name: str) -> JobRecord:
    rec = store.get(name)
    if rec is None:
        known = [r.name for r in store.all_jobs()]
        hint = f"known jobs: {', '.join(known)}" if known else "there are no jobs; start one with torchjob run"
        raise UserError(f"no job named {name!r}", fix=hint)
    return _settle(store, rec)


def _settle(store: Store, rec: JobRecord) -> JobRecord:
    """A job whose supervisor is gone (killed, or the machine rebooted) is failed: say so."""
    if rec.status.finished or rec.supervisor_pid is None or supervisor_alive(rec.supervisor_pid):
        return rec
    at = datetime.now(UTC)
    msg = f"the supervisor (pid {rec.supervisor_pid}) is gone; its watchdog stopped every replica"
    status = rec.status.model_copy(deep=True)
    set_condition(status, "Failed", True, "SupervisorLost", msg, at)
    status.completionTime = at
    status.failure = FailureInfo(reason="SupervisorLost", message=msg)
    store.set_status(rec.name, status)
    store.end_open_attempts(rec.name, "SupervisorLost")
    store.add_event(rec.name, "Warning", "SupervisorLost", msg)
    store.set_supervisor(rec.name, None)
    return store.get(rec.name) or rec


def signal_supervisor(rec: JobRecord) -> None:
    if rec.supervisor_pid and supervisor_alive(rec.supervisor_pid):
        os.kill(rec.supervisor_pid, signal.SIGUSR1)


def set_suspend(store: Store, name: str, suspend: bool) -> JobRecord:
    rec = get(store, name)
    if rec.status.finished:
        raise UserError(f"job {name!r} has already {rec.status.state.lower()}", fix="run it again instead")
    if not supervisor_alive(rec.supervisor_pid):
        raise UserError(f"job {name!r} has no running supervisor", fix="delete it and run it again")
    rp = rec.job.run_policy.model_copy(update={"suspend": suspend})
    job = rec.job.model_copy(update={"spec": rec.job.spec.model_copy(update={"runPolicy": rp})})
    store.set_job(job)
    signal_supervisor(rec)
    return rec


def delete(store: Store, name: str, wait_s: float = 60.0) -> None:
    rec = get(store, name)
    if supervisor_alive(rec.supervisor_pid):
        store.mark_deleting(name)
        signal_supervisor(rec)
        end = time.monotonic() + wait_s
        while store.get(name) is not None and time.monotonic() < end:
            time.sleep(0.05)
        if store.get(name) is not None:
            raise UserError(f"job {name!r} is still stopping after {wait_s:g}s", fix="try again")
        return
    store.delete_job(name)


def collect_expired(store: Store) -> list[str]:
    """Delete finished jobs whose ttlSecondsAfterFinished has passed."""
    gone = []
    at = datetime.now(UTC)
    for rec in store.all_jobs():
        expires = policy.ttl_expires_at(rec.status.completionTime, rec.job.run_policy.ttlSecondsAfterFinished)
        if expires is not None and at >= expires and not supervisor_alive(rec.supervisor_pid):
            store.delete_job(rec.name)
            gone.append(rec.name)
    return gone


def tail(path: Path, lines: int) -> list[str]:
    try:
        data = path.read_bytes()[-64 * 1024:]
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def root_cause(store: Store, rec: JobRecord, log_lines: int = 15) -> str | None:
    """torchrun-style summary of why a failed job failed: the first failing replica, its exit
    code or signal, and its traceback (torch's error file) or the end of its output."""
    st = rec.status
    if not st.is_true("Failed") or st.failure is None:
        return None
    f = st.failure
    bar = "=" * 72
    out = [bar, f"{rec.name} FAILED: {f.reason}", "-" * 72, f.message]
    if f.replica is not None:
        attempt = next(
            (a for a in store.attempts(rec.name) if a.replica == f.replica and a.attempt == f.attempt), None
        )
        rid = ReplicaId.parse(f.replica)
        out += ["", "Root cause (the failure that ended the job):",
                f"  replica   : {f.replica} (attempt {f.attempt}, node rank {node_rank(rec.job, rid)})"]
        if f.exitCode is not None:
            out.append(f"  exit code : {f.exitCode}" + (f" ({f.signal})" if f.signal else ""))
        if attempt is not None:
            if attempt.pid:
                out.append(f"  pid       : {attempt.pid}")
            if attempt.ended:
                out.append(f"  time      : {datetime.fromtimestamp(attempt.ended).isoformat(sep=' ')}")
            if attempt.log:
                log = Path(attempt.log)
                out.append(f"  log       : {log}")
                trace = error_file_summary(log.parent / "error.json")
                if trace:
                    out += ["  traceback (from torch's error file):", *("    " + t for t in trace.splitlines())]
                else:
                    last = tail(log, log_lines)
                    if last:
                        out += [f"  last {len(last)} lines of its output:", *("    " + t for t in last)]
    out.append(bar)
    return "\n".join(out)
