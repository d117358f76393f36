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


class AnnotatingApi:
    """An API server that stores annotation patches on the pods of `pods` (or fails them all)."""

    def __init__(self, pods: dict[Any, Any], fail: bool = False) -> None:
        self.pods, self.fail = pods, fail
        self.patches: list[tuple[str, dict[str, Any], str | None]] = []

    async def patch_annotations(self, kind: str, name: str, namespace: str, annotations: dict[str, Any],
                                uid: str | None = None, resource_version: str | None = None) -> dict[str, Any]:
        if self.fail:
            raise ConnectionError("the API server is away")
        self.patches.append((name, annotations, uid))
        pod = self.pods[(namespace, name)]
        pod["metadata"]["annotations"] = {**pod["metadata"]["annotations"], **annotations}
        return pod


def test_a_pods_entry_point_gets_its_verdict_and_its_attempts_end_is_recorded_once(
        loop: asyncio.AbstractEventLoop) -> None:
    """The endpoint's `inplace` path as the receiver answers it (kube/objects/inplace.py): the verdict
    from the pod's annotations; an attempt's end patched onto its pod once, with the pod's uid; a stale
    attempt, a made-up end, another pod or one not restarting in place refused."""
    from torchjob.kube.objects import inplace
    from torchjob.progress.server import Conflict, Reporter

    pod = {"metadata": {"name": "demo-worker-0", "namespace": "team", "uid": "u1",
                        "annotations": {inplace.ANNOTATION_IN_PLACE: "true", "torchjob.dev/attempt": "2"}}}
    pods = {("team", "demo-worker-0"): pod}
    api = AnnotatingApi(pods)
    r = receiver(api, loop, pods=pods)
    who = Reporter("team", "demo", "worker-0", 2, pod_uid="u1", in_place=True)
    assert r.in_place(who, None) == {"attempt": 2, "stop": None, "release": False}
    end = {"attempt": 2, "exitCode": 137, "message": "killed", "finishedAt": "2026-11-28T06:00:00Z"}
    assert r.in_place(who, end) == {"attempt": 2, "stop": None, "release": False}
    assert r.in_place(who, end) and len(api.patches) == 1  # told twice (a lost answer): recorded once
    name, _, uid = api.patches[0]
    here = inplace.in_place(pod)
    assert (name, uid) == ("demo-worker-0", "u1") and here is not None and here.ended is not None
    assert (here.ended.exit_code, here.ended.message) == (137, "killed")
    with pytest.raises(Conflict):
        r.in_place(who, {**end, "attempt": 1})
    with pytest.raises(ValueError, match="exitCode 0 is reported only"):
        r.in_place(who, {**end, "exitCode": 0})
    for bad in ({**end, "exitCode": 300}, {**end, "finishedAt": "yesterday"}, [1, 2], {**end, "attempt": "2"}):
        with pytest.raises(ValueError):
            r.in_place(who, bad)
    with pytest.raises(LookupError):  # a token of an earlier pod of the same name
        r.in_place(Reporter("team", "demo", "worker-0", 2, pod_uid="u0", in_place=True), None)
    pod["metadata"]["annotations"][inplace.ANNOTATION_IN_PLACE] = "false"
    with pytest.raises(LookupError):
        r.in_place(who, None)
    # an attempt asked to stop may end with 0 (it handled SIGTERM); the API server away: try again later
    pod["metadata"]["annotations"].update({inplace.ANNOTATION_IN_PLACE: "true", inplace.ANNOTATION_STOP: "3",
                                           "torchjob.dev/attempt": "3"})
    assert r.in_place(who, {**end, "attempt": 3, "exitCode": 0})["stop"] == 3
    api.fail = True
    pod["metadata"]["annotations"]["torchjob.dev/attempt"] = "4"
    with pytest.raises(TryLater):
        r.in_place(who, {**end, "attempt": 4})


def test_a_report_from_a_pod_restarting_in_place_counts_for_the_attempt_it_runs_now(
        loop: asyncio.AbstractEventLoop) -> None:
    from torchjob.progress.server import Reporter

    job = {"metadata": {"name": "demo", "namespace": "team", "uid": "j1"}}
    pod = {"metadata": {"name": "demo-worker-0", "namespace": "team", "uid": "u1",
                        "annotations": {"torchjob.dev/in-place": "true", "torchjob.dev/attempt": "5"}}}
    r = receiver(None, loop, jobs={("team", "demo"): job}, pods={("team", "demo-worker-0"): pod})
    reviewed = Reporter("team", "demo", "worker-0", 2, pod_uid="u1", in_place=True)  # as its token was reviewed
    assert r._owned(reviewed, "j1") == Reporter("team", "demo", "worker-0", 5, pod_uid="u1", in_place=True)
    assert r._owned(Reporter("team", "demo", "worker-0", 2), "j1") == Reporter("team", "demo", "worker-0", 2)
