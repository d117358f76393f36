"""The endpoint's threads that wait for a pod's state to change: the long poll of the `inplace` path
(progress/server.py), so that a pod restarting in place learns the operator's verdict (stop its attempt,
start its next one) when the operator writes it, not at its next poll. The controller tells of every
change of a pod it caches (its informer's events, and what a round wrote: Controller._on_pod); only the
threads waiting for that very pod wake. Each waiting thread holds one of the endpoint's connections, so
at most `most` wait at once; past it a request is answered at once, as without a long poll."""

from __future__ import annotations

import threading
from collections.abc import Callable

LONG_POLLS = 128  # waiting at once: half the endpoint's connections (progress/guard.py MAX_CONNECTIONS)
PodKey = tuple[str, str, str]  # (the kind's plural, namespace, pod name)


class PodWaits:
    def __init__(self, most: int = LONG_POLLS) -> None:
        self.most = most
        self._lock = threading.Lock()
        self._waiting: dict[PodKey, tuple[threading.Condition, int]] = {}  # its condition, how many wait
        self._count = 0

    def changed(self, key: PodKey) -> None:
        """The pod's cached state changed (called from the controller's event loop: it never blocks long)."""
        with self._lock:
            held = self._waiting.get(key)
            if held is not None:
                held[0].notify_all()

    def wait(self, key: PodKey, same: Callable[[], bool], timeout_s: float) -> bool:
        """Block while `same()` (checked again at each change of the pod) for at most `timeout_s`; False at
        once when `most` threads wait already."""
        with self._lock:
            if self._count >= self.most:
                return False
            cond, n = self._waiting.get(key) or (threading.Condition(self._lock), 0)
            self._waiting[key] = (cond, n + 1)
            self._count += 1
            try:
                cond.wait_for(lambda: not same(), timeout_s)
            finally:
                self._count -= 1
                cond, n = self._waiting[key]
                if n > 1:
                    self._waiting[key] = (cond, n - 1)
                else:
                    del self._waiting[key]
        return True
