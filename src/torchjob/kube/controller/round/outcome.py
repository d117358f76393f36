"""What one round of a job asks of the work queue, as controller-runtime's `Reconcile` returns a
`Result`: the reconciler decides, the controller alone calls the queue (controller.py `_follow`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    requeue: bool = False  # look again at once: the round learned a fact for the next one
    requeue_after: float | None = None  # look again after this many seconds (a deadline, a poll)
    forget: bool = False  # the job is gone: drop all that was kept for it

    def after(self, seconds: float | None) -> Result:
        """This result, looking again by `seconds` at the latest (the earliest request wins)."""
        if seconds is None:
            return self
        soonest = max(0.0, seconds) if self.requeue_after is None else min(self.requeue_after, max(0.0, seconds))
        return Result(self.requeue, soonest, self.forget)

    def now(self) -> Result:
        """This result, looking again at once."""
        return Result(True, self.requeue_after, self.forget)


DONE = Result()  # nothing to look at again until something changes (a watch event brings the job back)
GONE = Result(forget=True)
