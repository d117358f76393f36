"""Who may read `/metrics` (every namespace's job names and progress): a bearer token the API server
authenticates (TokenReview, for its own audience) whose user it authorizes for `get` on the
non-resource URL `/metrics` (SubjectAccessReview), as controller-runtime's secure metrics serving
does (`filters.WithAuthenticationAndAuthorization`); the install manifests make a ClusterRole that
grants it (`torchjob-metrics-reader`) for a scraper's ServiceAccount to be bound to. `/healthz` and
`/readyz` stay open (the kubelet probes them without a token).

Called from the HTTP server's threads; the reviews run on the operator's event loop. Answers are
cached by the token's hash (ALLOW_TTL_S when allowed, DENY_TTL_S when not); at most REVIEWS_QUEUED
wait or run at once (past it 503), and one its thread stops waiting for is cancelled."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from typing import Any

log = logging.getLogger("torchjob.kube")
ALLOW_TTL_S = 60.0
DENY_TTL_S = 10.0
REVIEWS_QUEUED = 16
REVIEW_TIMEOUT_S = 5.0
PATH = "/metrics"


class ScraperAuth:
    """`check(Authorization header)` -> the HTTP code to answer: 200, 401 (no token, or one the API
    server does not authenticate), 403 (its user may not get /metrics), 503 (cannot tell now)."""

    def __init__(self, api: Any, loop: asyncio.AbstractEventLoop, path: str = PATH) -> None:
        self.api, self.loop, self.path = api, loop, path
        self.answers: dict[str, tuple[int, float]] = {}
        self._queued = 0
        self._lock = threading.Lock()

    def check(self, authorization: str | None) -> int:
        parts = (authorization or "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer" or not parts[1]:
            return 401
        key = hashlib.sha256(parts[1].encode()).hexdigest()
        cached = self.answers.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        with self._lock:
            if self._queued >= REVIEWS_QUEUED:
                return 503
            self._queued += 1
        future = asyncio.run_coroutine_threadsafe(self._review(parts[1]), self.loop)
        try:
            code = future.result(2 * REVIEW_TIMEOUT_S + 1)
        except Exception as e:  # the API server is away or slow: nothing cached, try again
            future.cancel()
            log.warning("/metrics: the scraper's token could not be reviewed: %s", e)
            return 503
        finally:
            with self._lock:
                self._queued -= 1
        self.answers[key] = (code, time.monotonic() + (ALLOW_TTL_S if code == 200 else DENY_TTL_S))
        if len(self.answers) > 10_000:
            now = time.monotonic()
            self.answers = {k: v for k, v in self.answers.items() if v[1] > now}
        return code

    async def _review(self, token: str) -> int:
        status = await asyncio.wait_for(self.api.review_token(token, None), REVIEW_TIMEOUT_S)
        if not status.get("authenticated"):
            return 401
        allowed = await asyncio.wait_for(self.api.review_access(status.get("user") or {}, self.path, "get"),
                                         REVIEW_TIMEOUT_S)
        return 200 if allowed else 403
