"""The supervisor's warm spares (runPolicy.warmSpares): one kept ready per replica core gives one
(core/policies/spares.py), started SPARE_AFTER_S after the attempt it would replace, handed to the next
attempt of its replica, and discarded once the job stops, is suspended, deleted or done. The
supervisor's loop sees its wake-ups (`SpareWarm`, `SpareDue`) on the same queue as its other events."""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torchjob.api.model import TorchJob
from torchjob.core.policies import spares
from torchjob.local.spares.spare import SPARE_AFTER_S, Spare
from torchjob.local.start import volumes
from torchjob.local.start.launch import LaunchSpec
from torchjob.local.supervisor.process import ReplicaProcess


@dataclass(frozen=True)
class SpareWarm:
    """A replica's spare has imported what it could ahead and waits."""

    replica: str
    spare: Spare


@dataclass(frozen=True)
class SpareDue:
    """Wakes the loop when a replica's spare is due to start."""


class SpareKeeper:
    def __init__(self, events: queue.SimpleQueue[object], note: Callable[[str], None],
                 tell_watchdog: Callable[[str], None]) -> None:
        self.events, self.note, self.tell_watchdog = events, note, tell_watchdog
        self.spares: dict[str, Spare] = {}  # replica -> its warm spare
        self._due: dict[str, float] = {}  # replica -> monotonic time its next spare may start
        self._timers: list[threading.Timer] = []

    def take(self, name: str) -> Spare | None:
        """The replica's spare for the attempt starting now (None: none is warm); its next one is
        due SPARE_AFTER_S after this start."""
        self._due[name] = time.monotonic() + SPARE_AFTER_S
        return self.spares.pop(name, None)

    def is_current(self, ev: SpareWarm) -> bool:
        return self.spares.get(ev.replica) is ev.spare

    def tend(self, job: TorchJob, specs: Mapping[str, LaunchSpec], procs: Mapping[str, ReplicaProcess],
             ending: bool, shared_env: Mapping[str, str]) -> None:
        """Keep a warm spare for each replica core gives one while the job may still restart it; none
        once it is `ending` (stopped, suspended, deleted, done) or core says they are no longer useful."""
        restarting = any(name not in procs or not procs[name].alive for name in specs)
        ending = ending or not spares.spare_still_useful(job, restarting)
        for name, spec in specs.items():
            spare = self.spares.get(name)
            if spare is not None and (ending or not spare.alive):
                self.spares.pop(name).discard()
                spare = None
            if ending or spare is not None:
                continue
            entry = spares.python_entry(spec.argv, sys.executable)
            if spares.no_spare_reason(job, spec.replica.rtype, entry) is not None or entry is None:
                continue
            p = procs.get(name)
            due = self._due.get(name)
            if p is None or not p.alive or p.stopping or due is None:
                continue  # a spare is made beside a running attempt, after its start
            wait = due - time.monotonic()
            if wait > 0:
                if not any(t.is_alive() for t in self._timers):
                    timer = threading.Timer(wait, self.events.put, args=(SpareDue(),))
                    timer.daemon = True
                    timer.start()
                    self._timers = [timer]
                continue
            self._start(name, spec, entry, shared_env)

    def _start(self, name: str, spec: LaunchSpec, entry: spares.PythonEntry, shared_env: Mapping[str, str]) -> None:
        env = {**spec.env, **shared_env}
        enter = volumes.preexec(spec.mounts, spec.cwd)
        spare = Spare(name, spec.argv[0], entry, env, None if enter else spec.cwd, enter)
        try:
            spare.start(lambda sp: self.events.put(SpareWarm(name, sp)))
        except OSError as e:
            self.note(f"{name}: no warm spare ({e.strerror or e}); its restarts start new processes")
            self._due[name] = float("inf")
            return
        self.spares[name] = spare
        self.tell_watchdog(f"pg {spare.pid}")

    def discard_all(self) -> None:
        for t in self._timers:
            t.cancel()
        for spare in self.spares.values():
            spare.discard()
        self.spares.clear()
