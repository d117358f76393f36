"""The work queue of job keys: a key is queued once however often it is added, processed by one
worker at a time (added again while processing, it comes back after), delayed on request, and
retried with a per-key exponential backoff after failures, as client-go's rate-limited queue does.
A key may be rested after a round (`rest`): added within that time, it is queued once the time is up."""

from __future__ import annotations

import asyncio
import time

from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.informer import Key

BASE_DELAY_S = 0.25  # the first retry of a failed reconcile; doubled per failure in a row
MAX_DELAY_S = 300.0


class WorkQueue:
    def __init__(self, name: str = "torchjob", base_delay_s: float = BASE_DELAY_S,
                 max_delay_s: float = MAX_DELAY_S) -> None:
        self.name = name
        self.base_delay_s, self.max_delay_s = base_delay_s, max_delay_s
        self._failures: dict[Key, int] = {}
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._added_at: dict[Key, float] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._rest_until: dict[Key, float] = {}  # monotonic time

    def add(self, key: Key) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        until = self._rest_until.get(key)
        if until is not None:
            now = time.monotonic()
            if until > now:
                self.add_after(key, until - now)
                return
            del self._rest_until[key]
        self._queued.add(key)
        self._added_at[key] = time.monotonic()
        self._queue.put_nowait(key)
        metrics.WORKQUEUE_ADDS.labels(self.name).inc()
        metrics.WORKQUEUE_DEPTH.labels(self.name).set(len(self._queued))

    def add_after(self, key: Key, delay_s: float) -> None:
        """Reconcile `key` again after `delay_s` (the earliest of several requests wins)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay_s)
        old = self._timers.get(key)
        if old is not None and old.when() <= when:
            return
        if old is not None:
            old.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> Key:
        key = await self._queue.get()
        self._queued.discard(key)
        self._processing.add(key)
        metrics.WORKQUEUE_DEPTH.labels(self.name).set(len(self._queued))
        metrics.WORKQUEUE_QUEUE_DURATION.labels(self.name).observe(time.monotonic() - self._added_at.pop(key, 0.0))
        return key

    def done(self, key: Key) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def rest(self, key: Key, seconds: float) -> None:
        """The key's next round no sooner than `seconds` from now, however soon it is added again."""
        if seconds > 0:
            self._rest_until[key] = time.monotonic() + seconds

    def forget(self, key: Key) -> None:
        """The key is gone (its job was deleted): no timer, no failure count, no rest is kept for it."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._failures.pop(key, None)
        self._rest_until.pop(key, None)

    def add_rate_limited(self, key: Key) -> float:
        """After a failed reconcile: again after a delay that doubles with each failure in a row of
        this key (client-go's per-item exponential rate limiter), so one job that keeps failing
        does not hammer the API server. Returns the delay."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.base_delay_s * 2.0**n, self.max_delay_s)
        self.add_after(key, delay)
        return delay

    def failures(self, key: Key) -> int:
        """Failed reconciles of this key in a row."""
        return self._failures.get(key, 0)

    def succeeded(self, key: Key) -> None:
        """A reconcile of this key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._queued)
