"""The local runtime's loop: observe processes -> core.reconcile -> apply -> record.

Event-driven: a thread per replica waits on its process and posts to a queue the moment it exits; signals
(Ctrl-C, SIGTERM, SIGUSR1 from `torchjob suspend|resume|delete`) post to the same queue. The loop sleeps
until an event or the plan's requeue time (deadline, restart backoff).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, assert_never

from torchjob.api.errors import UserError
from torchjob.api.model import JobStatus
from torchjob.api.status import EventType, ExitReason, Reason
from torchjob.console import Console
from torchjob.core.policies import policy
from torchjob.core.round.initializers import with_steps
from torchjob.core.round.reconcile import (
    Abandon,
    Create,
    DeleteJob,
    Forget,
    Observed,
    Phase,
    Plan,
    Purge,
    Refusal,
    Stop,
    World,
    reconcile,
)
from torchjob.local.inspect import flight, stacks, stalls
from torchjob.local.inspect.render import render, warnings
from torchjob.local.spares.keeper import SpareKeeper, SpareWarm
from torchjob.local.start import ports, tensorboard, volumes
from torchjob.local.start.launch import LaunchSpec, LocalOptions
from torchjob.local.start.prepare import now, placement
from torchjob.local.store.store import Store
from torchjob.local.supervisor import watchdog
from torchjob.local.supervisor.process import Exited, LogLost, ReplicaProcess, StartError
from torchjob.local.supervisor.progress import LocalEndpoint
from torchjob.local.supervisor.sweep import sweep

PROGRESS_WRITE_S = 1.0  # the job's progress is written to the store at most this often


@dataclass(frozen=True)
class _Signal:
    signum: int


@dataclass(frozen=True)
class _Reported:
    """A replica attempt's first progress report: `core` starts judging it (progressDeadlineSeconds)."""

    replica: str
    attempt: int


class Supervisor:
    def __init__(self, store: Store, name: str, console: Console) -> None:
        rec = store.get(name)
        assert rec is not None
        self.store = store
        self.name = name
        self.job = rec.job.model_copy(update={"status": rec.status})
        self.uid = rec.uid
        self.dir = rec.dir
        self.opts = LocalOptions.from_json(rec.options)
        self.console = console
        self.events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.procs: dict[str, ReplicaProcess] = {}  # current attempt per replica
        self.history: list[ReplicaProcess] = []
        self.stop_requested: str | None = None
        self.deleting = False
        self.created_mount_points: list[Path] = []
        self.specs: dict[str, LaunchSpec] = {}
        self._watchdog: IO[str] | None = None
        self._tensorboard: subprocess.Popen[bytes] | None = None
        self.endpoint: LocalEndpoint | None = None
        self._progress_version = 0  # the endpoint's book version last merged into the status
        self._progress_at = 0.0  # monotonic time of that merge
        self._progress_wake = False  # a wake-up for new progress is queued
        self._stall = stalls.StallStacks(lambda: self.events.put(None))  # None: the hang watch wakes the loop
        self.spares = SpareKeeper(self.events, lambda line: self.console.note(line, warning=True),
                                  self._tell_watchdog)

    # --- lifecycle ---

    def run(self) -> JobStatus:
        self.store.set_supervisor(self.name, os.getpid())
        self._install_signals()
        try:
            specs = render(self.job, placement(self.job, self.opts), self.opts, self.dir)
            specs = stacks.with_hook(specs)  # every rank answers SIGUSR2 with its stacks
            self.specs = {s.name: s for s in specs}
            self._start_watchdog()
            saved = self.job.status.progress if self.job.status else None  # its history goes on
            self.endpoint = LocalEndpoint(self.name, self._on_report, saved.history if saved else None).start()
            self.created_mount_points = volumes.prepare(
                self.job, self.dir, self.opts.configmaps, [m for s in specs for m in s.mounts]
            )
            for w in warnings(self.job):
                self.console.note(f"warning: {w}", warning=True)
            if self.job.spec.tensorboard is not None:
                self._tensorboard, line = tensorboard.start(self.job.spec.tensorboard, self.opts, ports.free_port(),
                                                            self.dir / "tensorboard.log")
                self.console.note(line)
            return self._loop()
        except UserError as e:
            # A local set-up problem found only now (e.g. a configMap key): the job fails with it.
            self._fail_setup(e)
            raise
        finally:
            self._shutdown()

    def _fail_setup(self, e: UserError) -> None:
        """Before any replica started: a fact for core, which fails the job (the CLI shows the error)."""
        self._record(reconcile(self.job, World(refused=Refusal(Reason.LOCAL_SETUP_FAILED, e.message)), now()),
                     echo=False)

    def _loop(self) -> JobStatus:
        while True:
            self._merge_progress()
            # One decision per wake-up, as the operator's round: a plan that changed the world
            # (started or stopped a replica) wakes the loop again at once, to decide on what it sees.
            plan = reconcile(self.job, self._observe(), now())
            self._record(plan)
            changed = self._apply(plan)
            ending = (plan.done or self.deleting or self.stop_requested is not None
                      or bool(self.job.run_policy.suspend))
            self.spares.tend(self.job, self.specs, self.procs, ending,
                             self.endpoint.shared_env() if self.endpoint is not None else {})
            if plan.done and not any(p.alive for p in self.procs.values()):
                if self.deleting:
                    self._wait_all(0)
                self._merge_progress(force=True)
                return self.job.status or plan.status
            if self.deleting and not any(p.alive for p in self.procs.values()):
                return plan.status
            timeout = 0.0 if changed else None
            if plan.requeue_at is not None and not changed:
                timeout = max(0.0, (plan.requeue_at - now()).total_seconds())
            if self._progress_pending():
                wait = max(0.0, self._progress_at + PROGRESS_WRITE_S - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            self._wait_event(timeout)

    def _wait_event(self, timeout: float | None) -> None:
        try:
            ev = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(ev)
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, ev: object) -> None:
        if isinstance(ev, Exited):
            # Recorded from the event itself: the attempt may already have been replaced.
            reason = ExitReason.COMPLETED if ev.exit_code == 0 else (
                ExitReason.STOPPED if ev.stopping else ExitReason.ERROR)
            self.store.end_attempt(self.name, ev.replica, ev.attempt, ev.exit_code, reason)
            # A failure is told by the decision it leads to (restart, or the job fails).
            how = policy.describe_exit(ev.exit_code)
            if ev.stopping:
                # "stopping X: why" said it; its exit code now (torchrun's 1) is news only if it was killed
                if ev.exit_code == 128 + signal.SIGKILL:
                    self.console.note(f"{ev.replica} killed ({how})")
            elif ev.exit_code == 0:
                self.console.note(f"{ev.replica} exited with {how}")
        elif isinstance(ev, LogLost):
            msg = (f"{ev.replica}'s log {ev.path} could not be written ({ev.error}): the rest of this "
                   "attempt's output is streamed but not kept")
            self.console.note(msg, warning=True)
            self.store.add_event(self.name, "Warning", "LogNotWritten", msg)
        elif isinstance(ev, _Reported):
            self._progress_wake = False
        elif isinstance(ev, SpareWarm):
            if self.spares.is_current(ev):
                sp = ev.spare
                self.store.add_event(self.name, "Normal", "SpareReady",
                                     f"{ev.replica}'s warm spare is ready (pid {sp.pid}: {sp.modules} modules "
                                     f"imported ahead in {sp.warm_s:.1f} s)")
        elif isinstance(ev, _Signal):
            if ev.signum == signal.SIGUSR1:
                self._reload()
            elif self.stop_requested is None:
                self.stop_requested = signal.Signals(ev.signum).name
                self.console.note(f"{self.stop_requested}: stopping every replica (again to kill at once)",
                                  warning=True)
            else:
                for p in self.procs.values():
                    p.kill()

    def _reload(self) -> None:
        rec = self.store.get(self.name)
        if rec is None or rec.deleting:
            self.deleting = True
            self.stop_requested = self.stop_requested or "torchjob delete"
            return
        self.job = rec.job.model_copy(update={"status": self.job.status})

    # --- progress ---

    def _on_report(self, replica: str, attempt: int, first: bool) -> None:
        """From the endpoint's thread: wake the loop for a first report (core starts judging that
        attempt) and for new progress to show, once per wake-up."""
        if first or not self._progress_wake:
            self._progress_wake = True
            self.events.put(_Reported(replica, attempt))

    def _progress_pending(self) -> bool:
        return self.endpoint is not None and self.endpoint.reports.version != self._progress_version

    def _merge_progress(self, force: bool = False) -> None:
        """The latest progress into the job's status, at most once per PROGRESS_WRITE_S (`force`: now,
        at the end, so that the last report is kept)."""
        if not self._progress_pending() or (not force and time.monotonic() < self._progress_at + PROGRESS_WRITE_S):
            return
        assert self.endpoint is not None
        self._progress_version = self.endpoint.reports.version
        self._progress_at = time.monotonic()
        progress = self.endpoint.progress(lambda kind, why, msg: self.store.add_event(self.name, kind, why, msg))
        status = (self.job.status or JobStatus()).model_copy(update={"progress": progress})
        self.job = self.job.model_copy(update={"status": status})
        self.store.set_status(self.name, status)  # for `list` and `describe`, from other processes
        if progress is not None:
            self.console.progress(progress, self.name)

    # --- observe / apply / record ---

    def _observe(self) -> World:
        seen: dict[str, Observed] = {}
        for name, p in self.procs.items():
            done = self.endpoint.reports.reported_done(name, p.attempt) if self.endpoint else False
            if p.alive:
                last = self.endpoint.reports.last_report(name, p.attempt) if self.endpoint else None
                seen[name] = Observed(p.spec.replica, p.attempt, Phase.RUNNING, stopping=p.stopping, last_report=last,
                                      reported_done=done)
            else:
                assert p.exit_code is not None and p.ended_at is not None
                phase = Phase.SUCCEEDED if p.exit_code == 0 else Phase.FAILED
                seen[name] = Observed(p.spec.replica, p.attempt, phase, p.exit_code, _reason(p), p.error,
                                      finished_at=datetime.fromtimestamp(p.ended_at, UTC), reported_done=done)
        # stacks before core stops a stalled or hung job (local/inspect/stalls.py): the short form is a fact
        brief, still = self._stall.take(self.job, seen, now(), {n: (p.attempt, p.log_path.parent) for n, p in
                                                                self.procs.items() if p.alive},
                                        lambda msg: self.store.add_event(self.name, "Warning", "StacksTaken", msg),
                                        self.console.block)
        return with_steps(self.job, World(replicas=seen, stop_requested=self.stop_requested, stacks=brief,
                                          still=still))

    def _apply(self, plan: Plan) -> bool:
        """Carry the plan out; returns whether the world changed (then core looks again at once)."""
        changed = False
        # a suspend says so once ("job suspended: every replica is stopped"), not once more per replica
        suspending = any(e.reason == Reason.SUSPENDED for e in plan.events)
        for a in plan.actions:
            match a:
                case Create():
                    self._create(a.replica.name, a.attempt)
                    changed = True
                case Stop():
                    p = self.procs.get(a.replica.name)
                    if p is not None and p.attempt == a.attempt and p.alive:
                        if not suspending:
                            self.console.note(f"stopping {a.replica.name}: {a.reason}")
                        p.terminate()
                case Forget() | Purge():
                    p = self.procs.get(a.replica.name)
                    if p is not None and p.attempt == a.attempt and not p.alive:
                        del self.procs[a.replica.name]
                        self.store.retire_attempt(self.name, a.replica.name, a.attempt)
                        if isinstance(a, Purge):
                            p.drain(1.0)
                            p.log_path.unlink(missing_ok=True)
                        changed = True
                case DeleteJob():
                    self.deleting = True  # the loop ends once nothing runs; the store forgets the job then
                case Abandon():  # planned for a lost supervisor (read.settle records it); this one is alive
                    pass
                case _:
                    assert_never(a)
        return changed

    def _create(self, name: str, attempt: int) -> None:
        spec = self.specs[name]
        adir = self.dir / "replicas" / name / f"attempt-{attempt}"
        progress = self.endpoint.env(name, attempt, adir) if self.endpoint is not None else {}
        spec = dataclasses.replace(spec, env={**spec.env, **progress, **stacks.env(adir), **flight.env(adir, spec.env)})
        p = ReplicaProcess(spec, attempt, adir / "output.log", adir / "error.json")
        spare = self.spares.take(name)
        try:
            p.start(self.events, self.console.line, spare, [q for q in self.history if q.spec.name == name])
        except StartError as e:
            # The command cannot even start: a user mistake, reported as that replica's failure.
            self.console.note(str(e), warning=True)
            p.exit_code, p.ended_at = 127, time.time()
            self.procs[name] = p
            self.store.start_attempt(self.name, name, attempt, 0, str(p.log_path))
            self.store.end_attempt(self.name, name, attempt, 127, ExitReason.START_ERROR)
            return
        self.procs[name] = p
        self.history.append(p)
        self._tell_watchdog(f"pg {p.pid}")
        self.store.start_attempt(self.name, name, attempt, p.pid, str(p.log_path))
        how = ", from its warm spare" if p.from_spare else ""
        self.console.note(f"{name} started (pid {p.pid}" + (f", attempt {attempt}" if attempt else "") + how + ")")
        if spare is not None and not p.from_spare:
            self.console.note(f"{name}'s warm spare could not take the attempt: started as a new process", warning=True)

    def _record(self, plan: Plan, echo: bool = True) -> None:
        before = self.job.status or JobStatus()
        self.job = self.job.model_copy(update={"status": plan.status})
        if plan.status != before:
            self.store.set_status(self.name, plan.status)
        for ev in plan.events:
            self.store.add_event(self.name, ev.type, ev.reason, ev.message)
            if echo and ev.reason != Reason.CREATED:
                self.console.note(ev.message, warning=ev.type == EventType.WARNING)

    # --- signals, watchdog, teardown ---

    def _install_signals(self) -> None:
        def handler(signum: int, frame: object) -> None:
            self.events.put(_Signal(signum))

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, handler)
        # A detached supervisor starts with SIGUSR1 blocked (LocalRuntime.schedule): one sent before the
        # handler was in place (a `suspend` right after `submit`) waited, and is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})

    def _start_watchdog(self) -> None:
        grace = max([s.grace_period_s for s in self.specs.values()] or [30.0])
        fd = watchdog.start(self.uid, grace)
        self._watchdog = os.fdopen(fd, "w", buffering=1)

    def _tell_watchdog(self, line: str) -> None:
        if self._watchdog is not None:
            try:
                self._watchdog.write(line + "\n")
            except OSError:
                pass

    def _wait_all(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for p in self.procs.values():
            if p.proc is not None and p.alive and not p.wait_ended(max(0.0, end - time.monotonic())):
                p.kill()

    def _shutdown(self) -> None:
        self._stall.close()
        self.spares.discard_all()
        if self.endpoint is not None:
            self.endpoint.stop()
        if self._tensorboard is not None:
            self._tensorboard.terminate()
        for p in self.procs.values():
            if p.alive:
                p.kill()
        for p in self.history:
            if p.proc is not None:
                p.wait_ended(5)
            p.drain(2.0)
        sweep(f"TORCHJOB_JOB_UID={self.uid}")
        for mp in reversed(self.created_mount_points):
            try:
                mp.rmdir() if mp.is_dir() else mp.unlink()
            except OSError:
                pass
        self._tell_watchdog("bye")
        if self._watchdog is not None:
            self._watchdog.close()
        if self.deleting:
            self.store.delete_job(self.name)
        elif self.job.status is not None and self.job.status.finished:
            self.store.set_supervisor(self.name, None)
        # Otherwise the pid stays: readers see it gone and report the job as SupervisorLost.


def _reason(p: ReplicaProcess) -> str | None:
    if p.exit_code is None:
        return None
    if p.exit_code == 0:
        return ExitReason.COMPLETED
    return ExitReason.STOPPED if p.stopping else ExitReason.ERROR
