"""What a reader sees of a local job: the store's record, judged by core from the facts, and
written nowhere.

Two facts are only learned when someone looks: a job's supervisor is gone (killed, or the machine
rebooted; its watchdog stopped every replica), and a finished job's `ttlSecondsAfterFinished`
has passed. Core decides what each means (`verdict`); a reader shows that decision, and a
writing command (`settle`) records it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.diagnosis import flight_recorder, rank_errors, torch_errors
from torchjob.core.round.initializers import step_named
from torchjob.core.round.reconcile import Abandon, DeleteJob, Event, Observed, Phase, World, reconcile
from torchjob.core.shape.topology import ReplicaId, node_rank, nproc_per_node
from torchjob.local.inspect import flight
from torchjob.local.start.prepare import supervisor_alive
from torchjob.local.store.store import JobRecord, Store
from torchjob.local.supervisor.process import error_file_summary
from torchjob.runtime import AttemptView, EventView, JobView


@dataclass
class Verdict:
    """Core's reading of a stored job: its status now, and what a writer is to record of it."""

    status: JobStatus
    lost: str | None = None  # the supervisor is gone: how that was found
    expired: bool = False  # finished, and its ttlSecondsAfterFinished has passed
    events: list[Event] = field(default_factory=list)  # what core says happened (the job failed)
    abandoned: list[Abandon] = field(default_factory=list)  # attempts whose runner is gone
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


def lost_message(rec: JobRecord) -> str | None:
    """The fact: the job is unfinished and the supervisor that ran it is gone."""
    if rec.status.finished or rec.supervisor_pid is None or supervisor_alive(rec):
        return None
    return f"the supervisor (pid {rec.supervisor_pid}) is gone; its watchdog stopped every replica"


def _with_status(job: TorchJob, status: JobStatus) -> TorchJob:
    return job.model_copy(update={"status": status})


def _open_attempts(store: Store, rec: JobRecord) -> dict[str, Observed]:
    """The replica attempts the store has as running: the world as the lost supervisor left it (an
    initializer's attempt, which the watchdog stopped too, is no replica's)."""
    return {a.replica: Observed(ReplicaId.parse(a.replica), a.attempt, Phase.RUNNING)
            for a in store.attempts(rec.name) if a.current and a.ended is None and not step_named(rec.job, a.replica)}


def verdict(store: Store, rec: JobRecord, now: datetime | None = None) -> Verdict:
    now = now or datetime.now(UTC)
    msg = lost_message(rec)
    if msg is not None:  # core decides what a lost runner means (issue 10: a fact in the world)
        world = World(_open_attempts(store, rec), runner_lost=msg)
        plan = reconcile(_with_status(rec.job, rec.status), world, now)
        return Verdict(plan.status, msg, events=plan.events,
                       abandoned=[a for a in plan.actions if isinstance(a, Abandon)], at=now)
    expired = False
    if rec.status.finished and not supervisor_alive(rec):
        plan = reconcile(_with_status(rec.job, rec.status), World(), now)
        expired = any(isinstance(a, DeleteJob) for a in plan.actions)
    return Verdict(rec.status, expired=expired, at=now)


def settle(store: Store, now: datetime | None = None) -> None:
    """A writing command records core's verdict on every stored job: a lost supervisor's job is
    failed (its open attempts ended, core's events), a job past its TTL is removed."""
    for rec in store.all_jobs():
        v = verdict(store, rec, now)
        if v.expired:
            store.delete_job(rec.name)
        elif v.lost is not None:
            store.set_status(rec.name, v.status)
            for a in v.abandoned:
                store.abandon_attempt(rec.name, a.replica.name, a.attempt, a.reason, v.at.timestamp())
            for ev in v.events:
                store.add_event(rec.name, ev.type, ev.reason, ev.message, v.at.timestamp())
            store.set_supervisor(rec.name, None)


def visible(store: Store) -> list[tuple[JobRecord, Verdict]]:
    """The stored jobs a reader shows (one past its TTL is gone), with core's verdict on each."""
    out = []
    for rec in store.all_jobs():
        v = verdict(store, rec)
        if not v.expired:
            out.append((rec, v))
    return out


def find(store: Store, name: str) -> tuple[JobRecord, Verdict] | None:
    rec = store.get(name)
    if rec is None:
        return None
    v = verdict(store, rec)
    return None if v.expired else (rec, v)


def view(store: Store, rec: JobRecord, v: Verdict, *, details: bool = True) -> JobView:
    attempts: list[AttemptView] = []
    events: list[EventView] = []
    if details:
        abandoned = {(a.replica.name, a.attempt): a.reason for a in v.abandoned}
        for a in store.attempts(rec.name):
            gone = abandoned.get((a.replica, a.attempt))  # shown as settle will record it
            attempts.append(AttemptView(a.replica, a.attempt, a.started, v.at.timestamp() if gone else a.ended,
                                        a.exit_code, gone or a.reason, pid=a.pid, log=a.log))
        events = [EventView(e.type, e.reason, e.message, e.time) for e in store.events(rec.name)]
        events += [EventView(e.type, e.reason, e.message, v.at.timestamp()) for e in v.events]
    out = JobView(
        name=rec.name, job=rec.job, status=v.status, created=rec.created, uid=rec.uid, attempts=attempts,
        events=events, supervisor=rec.supervisor_pid if supervisor_alive(rec) else None,
        directory=str(rec.dir),
    )
    if details:
        out.root_cause = root_cause(out)
        out.raw = {
            "job": rec.job.model_dump(mode="json", exclude_none=True),
            "status": v.status.model_dump(mode="json", exclude_none=True),
            "attempts": [{"job": rec.name, "replica": a.replica, "attempt": a.attempt, "pid": a.pid,
                          "started": a.started, "ended": a.ended, "exit_code": a.exit_code, "reason": a.reason,
                          "log": a.log} for a in attempts],
            "events": [{"time": e.time, "type": e.type, "reason": e.reason, "message": e.message} for e in events],
            "directory": str(rec.dir),
        }
    return out


def tail(path: Path, lines: int, size: int = 64 * 1024) -> list[str]:
    try:
        data = path.read_bytes()[-size:]
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def last_words(log: Path, lines: int) -> list[str]:
    """The root cause's quote of a replica's output (core.torch_errors.last_words: the failing rank's
    own lines, or the end of the output)."""
    # several ranks interleave: the failing one's traceback may be far up
    return torch_errors.last_words(tail(log, 2000, 512 * 1024), lines)


def _first_own(job: JobView, failed: AttemptView, log: Path, log_lines: int) -> list[str]:
    """Where the replica that ended the job only failed after another one (a peer's error in a
    collective, torchrun stopped in the same moment), the other's own error (core.rank_errors)."""
    others = sorted((a for a in job.attempts if a.replica != failed.replica and a.log and a.exit_code
                     and a.started is not None and failed.ended is not None and a.started <= failed.ended
                     and (a.ended is None or failed.started is None or a.ended >= failed.started)),
                    key=lambda a: a.ended or 0.0)
    if not others:
        return []
    def own(path: Path) -> list[str]:  # its lines before torchrun's report, where it ends with one
        lines = tail(path, 2000, 512 * 1024)
        report = torch_errors.torchrun_report(lines)
        return report[0] if report is not None else lines

    found = rank_errors.first_own(own(log), [(a.replica, own(Path(a.log or ""))) for a in others])
    if found is None:
        return []
    name, error = found
    other = next(a for a in others if a.replica == name)
    rank = f", rank {error.rank}" if error.rank is not None else ""
    return [f"  own error : {name}{rank} raised it; {failed.replica} failed after it, in a collective:",
            *last_words(Path(other.log or ""), log_lines)]


def advice(job: JobView, said: str) -> list[str]:
    """What the root cause can add to a failure it recognises."""
    if "invalid device ordinal" not in said:
        return []
    nproc = nproc_per_node(job.job)
    return [f"  advice    : a rank asked for a GPU it cannot see: each replica starts {nproc} process(es) and "
            "torch.cuda.set_device(LOCAL_RANK) needs a GPU per process; run one process per GPU "
            "(--nproc-per-node gpu, or nprocPerNode: gpu), or fewer processes"]


def root_cause(job: JobView, log_lines: int = 15) -> str | None:
    """torchrun-style summary of why a failed job failed: the first failing replica, its exit
    code or signal, and its traceback (torch's error file) or the end of its output."""
    st = job.status
    if not st.is_true(ConditionType.FAILED) or st.failure is None:
        return None
    f = st.failure
    bar = "=" * 72
    out = [bar, f"{job.name} FAILED: {f.reason}", "-" * 72, f.message]
    if f.replica is not None:
        attempt = next((a for a in job.attempts if a.replica == f.replica and a.attempt == f.attempt), None)
        # an initializer's attempt has no rank (core/round/initializers.py)
        rank = "" if step_named(job.job, f.replica) else f", node rank {node_rank(job.job, ReplicaId.parse(f.replica))}"
        out += ["", "Root cause (the failure that ended the job):",
                f"  replica   : {f.replica} (attempt {f.attempt}{rank})"]
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
                    words = last_words(log, log_lines)
                    out += words + _first_own(job, attempt, log, log_lines)
                out += advice(job, "\n".join(out))
        out += flight_recorder.said(flight.dumps(Path(a.log).parent for a in job.attempts if a.log))
    out.append(bar)
    return "\n".join(out)
