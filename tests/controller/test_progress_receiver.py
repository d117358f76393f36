"""The operator's progress receiver (kube/progress/receiver.py) in milliseconds, against a fake API
on an event loop of its own (the controller's, as the endpoint's threads see it): what a review
costs, what is refused, what is let through."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from torchjob.kube.progress import receiver as receiver_module
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.receiver import ProgressReceiver
from torchjob.kube.progress.view import KindCaches
from torchjob.kube.served.kinds import TORCHJOB
from torchjob.progress.server import TryLater


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


class HangingApi:
    """An API server that never answers a TokenReview (until cancelled)."""

    def __init__(self) -> None:
        self.running = 0
        self.started = 0

    async def review_token(self, token: str, audience: str) -> dict[str, Any]:
        self.started += 1
        self.running += 1
        try:
            await asyncio.sleep(60)
            return {}
        finally:
            self.running -= 1


def receiver(api: Any, loop: asyncio.AbstractEventLoop, jobs: dict[Any, Any] | None = None,
             pods: dict[Any, Any] | None = None) -> ProgressReceiver:
    caches = {"torchjobs": KindCaches(TORCHJOB, jobs or {}, pods or {})}
    return ProgressReceiver(api, caches, Books(), loop, on_first_report=lambda *a: None)


def test_reviews_past_the_queue_are_answered_at_once_and_those_given_up_on_are_cancelled(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiver_module, "REVIEW_TIMEOUT_S", 0.3)
    api = HangingApi()
    r = receiver(api, loop)
    r.review_queue = 4
    outcomes: list[tuple[str, float]] = []

    def ask(i: int) -> None:
        start = time.monotonic()
        try:
            r.authorize("team", "demo", f"made.up.{i}")
            outcomes.append(("answered", time.monotonic() - start))
        except TryLater:
            outcomes.append(("later", time.monotonic() - start))
        except Exception:
            outcomes.append(("gave up", time.monotonic() - start))

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(ask, range(12)))
    shed = [t for what, t in outcomes if what == "later"]
    assert len(shed) == 8 and max(shed) < 0.2, outcomes  # never waited on, never sent to the API server
    assert [what for what, _ in outcomes].count("gave up") == 4
    end = time.monotonic() + 2
    while api.running and time.monotonic() < end:
        time.sleep(0.01)
    assert api.started <= 4 + receiver_module.REVIEWS_IN_FLIGHT and api.running == 0  # nothing left on the loop
    pending = asyncio.run_coroutine_threadsafe(_tasks(), loop).result(2)
    assert pending == 0


async def _tasks() -> int:
    return len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])


class ReviewingApi:
    """An API server whose TokenReview says the token is a pod-bound one of `pod` (name, uid)."""

    def __init__(self) -> None:
        self.pod = ("", "")

    async def review_token(self, token: str, audience: str) -> dict[str, Any]:
        name, uid = self.pod
        return {"authenticated": True, "audiences": [audience],
                "user": {"username": "system:serviceaccount:team:default",
                         "extra": {"authentication.kubernetes.io/pod-name": [name],
                                   "authentication.kubernetes.io/pod-uid": [uid]}}}


def a_pod(name: str, uid: str, job: str, owner_uid: str, kind: str = "TorchJob") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "uid": uid,
                         "labels": {"torchjob.dev/job-name": job, "torchjob.dev/replica-type": "worker",
                                    "torchjob.dev/replica-index": "0"},
                         "annotations": {"torchjob.dev/attempt": "0"},
                         "ownerReferences": [{"kind": kind, "name": job, "uid": owner_uid, "controller": True}]}}


def test_a_report_counts_only_from_a_pod_whose_controller_is_the_job_itself(loop: asyncio.AbstractEventLoop) -> None:
    api = ReviewingApi()
    jobs = {("team", "demo"): {"metadata": {"name": "demo", "namespace": "team", "uid": "u-now"}}}
    pods = {("team", "demo-worker-0"): a_pod("demo-worker-0", "p-1", "demo", "u-now"),
            # labelled as demo's, but made by an earlier job of the name, another kind's object, or anyone
            ("team", "stale-0"): a_pod("stale-0", "p-2", "demo", "u-before"),
            ("team", "forged-0"): a_pod("forged-0", "p-3", "demo", "u-now-not", kind="PyTorchJob"),
            ("team", "orphan-0"): {"metadata": {**a_pod("orphan-0", "p-4", "demo", "")["metadata"],
                                                "ownerReferences": []}}}
    r = receiver(api, loop, jobs, pods)
    for i, (name, uid) in enumerate([("stale-0", "p-2"), ("forged-0", "p-3"), ("orphan-0", "p-4")]):
        api.pod = (name, uid)
        assert r.authorize("team", "demo", f"a.b.{i}") is None, name
    api.pod = ("demo-worker-0", "p-1")
    who = r.authorize("team", "demo", "a.b.good")
    assert who is not None and who.replica == "worker-0"
    # the review is cached; the job of that name is deleted and made again (a new uid): refused at once
    jobs[("team", "demo")] = {"metadata": {"name": "demo", "namespace": "team", "uid": "u-next"}}
    assert r.authorize("team", "demo", "a.b.good") is None
