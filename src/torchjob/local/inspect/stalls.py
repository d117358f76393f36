"""A stalled or hung local job's stacks, before core stops its replicas: a replica that stopped
reporting (runPolicy.progressDeadlineSeconds) has them taken then; a job none of whose ranks moved
(runPolicy.hangDeadlineSeconds) has the hang watch's latest sample, the same for the whole deadline."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from torchjob.api.model import TorchJob
from torchjob.core.policies import hangs
from torchjob.core.policies.stalls import quiet_replicas
from torchjob.core.round.world import Observed, Still
from torchjob.local.inspect.hangs import HangWatch
from torchjob.local.inspect.stacks import for_stall


class StallStacks:
    """A stalled job's stacks, taken once per set of quiet attempts (a policy that waits sees the same
    set again at each round), before core stops them; and the hang watch, which `wake`s the
    supervisor's loop when it finds the job hung."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._for: tuple[tuple[str, int], ...] = ()
        self._brief: str | None = None
        self.watch = HangWatch(wake)

    def take(self, job: TorchJob, seen: Mapping[str, Observed], now: datetime, live: dict[str, tuple[int, Path]],
             record: Callable[[str], None], show: Callable[[str], None]) -> tuple[str | None, Still | None]:
        """The short form for the stall's message (None when no replica is quiet or the job is not hung)
        and since when no rank moved (core's World.still); when taken now, the StacksTaken event's
        message is recorded and the full form shown (the job's log)."""
        self.watch.attempts(job, live)
        still = self.watch.still()
        folders = {n: d for n, (_, d) in live.items()}
        quiet, _ = quiet_replicas(job, seen, now)
        if quiet:
            key = tuple(sorted((o.replica.name, o.attempt) for o in quiet))
            if key != self._for:
                self._for = key
                event, block, self._brief = for_stall(folders, {n: folders[n] for n, _ in key if n in folders})
                record(event)
                show(block)
            return self._brief, still
        taken = self.watch.last()
        if taken is None or not hangs.hung(job, still):
            return None, still
        key = tuple(sorted((n, a) for n, (a, _) in live.items()))
        if key != self._for:
            self._for = key
            event, block, self._brief = for_stall(folders, folders, taken, "hung")
            record(event)
            show(block)
        return self._brief, still

    def close(self) -> None:
        self.watch.close()
