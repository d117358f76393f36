"""The operator's progress receiver (kube/progress/receiver.py) in milliseconds, against a fake API
on an event loop of its own (the controller's, as the endpoint's threads see it): what a review
costs, what is refused, what is let through."""

from __future__ import annotations

import asyncio
import base64
import json
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
from torchjob.progress.server import TryLater, audience


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


def claiming(pod: str, uid: str, job: str = "demo", signature: str = "sig", namespace: str = "team") -> str:
    """A JWT-shaped token whose claims say what a projected one of `pod` would (its signature made up:
    only the review, the API server's, tells)."""
    claims = {"aud": [audience(namespace, job)], "kubernetes.io": {"namespace": namespace,
                                                                   "pod": {"name": pod, "uid": uid}}}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.{signature}"


def test_reviews_past_the_queue_are_answered_at_once_and_those_given_up_on_are_cancelled(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiver_module, "REVIEW_TIMEOUT_S", 0.3)
    api = HangingApi()
    r = receiver(api, loop, pods={("team", "demo-worker-0"): a_pod("demo-worker-0", "p-1", "demo", "u")})
    r.review_queue = 4
    outcomes: list[tuple[str, float]] = []

    def ask(i: int) -> None:
        start = time.monotonic()
        try:
            r.authorize("team", "demo", claiming("demo-worker-0", "p-1", signature=f"made-up-{i}"))
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
    for name, uid in [("stale-0", "p-2"), ("forged-0", "p-3"), ("orphan-0", "p-4")]:
        api.pod = (name, uid)
        assert r.authorize("team", "demo", claiming(name, uid)) is None, name
    api.pod = ("demo-worker-0", "p-1")
    good = claiming("demo-worker-0", "p-1", signature="good")
    who = r.authorize("team", "demo", good)
    assert who is not None and who.replica == "worker-0"
    # the review is cached; the job of that name is deleted and made again (a new uid): refused at once
    jobs[("team", "demo")] = {"metadata": {"name": "demo", "namespace": "team", "uid": "u-next"}}
    assert r.authorize("team", "demo", good) is None


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
    """The endpoint's `inplace` path as the receiver answers it (kube/objects/front/inplace.py): the verdict
    from the pod's annotations the operator sealed; an attempt's end patched onto its pod once, sealed,
    with the pod's uid; a stale attempt, a made-up end, another pod or one not restarting in place
    (its spec does not run the entry point) refused."""
    from tests.controller.test_inplace_sequencing import SEAL, wrapped_spec
    from torchjob.kube.objects.front import inplace
    from torchjob.progress.server import Conflict, Reporter

    pod = {"metadata": {"name": "demo-worker-0", "namespace": "team", "uid": "u1", "annotations": {}},
           "spec": wrapped_spec()}
    pod["metadata"]["annotations"] = SEAL.close("u1", {"torchjob.dev/attempt": "2", inplace.ANNOTATION_SINCE: "now"})
    pods = {("team", "demo-worker-0"): pod}
    api = AnnotatingApi(pods)
    r = receiver(api, loop, pods=pods)
    r.seal = SEAL
    who = Reporter("team", "demo", "worker-0", 2, pod_uid="u1", in_place=True)
    assert r.in_place(who, None) == {"attempt": 2, "stop": None, "release": False}
    end = {"attempt": 2, "exitCode": 137, "message": "killed", "finishedAt": "2026-11-28T06:00:00Z"}
    assert r.in_place(who, end) == {"attempt": 2, "stop": None, "release": False}
    assert r.in_place(who, end) and len(api.patches) == 1  # told twice (a lost answer): recorded once
    name, _, uid = api.patches[0]
    here = inplace.in_place(pod, SEAL)
    assert (name, uid) == ("demo-worker-0", "u1") and here is not None and here.ended is not None
    assert (here.ended.exit_code, here.ended.message) == (137, "killed")
    # someone removes the recorded end (or its seal): the entry point's report, sent again, records it again
    pod["metadata"]["annotations"] = {k: v for k, v in pod["metadata"]["annotations"].items()
                                      if k != inplace.seal_annotation("exit")}
    assert r.in_place(who, end) and len(api.patches) == 2 and inplace.in_place(pod, SEAL).ended is not None
    with pytest.raises(Conflict):
        r.in_place(who, {**end, "attempt": 1})
    with pytest.raises(ValueError, match="exitCode 0 is reported only"):
        r.in_place(who, {**end, "exitCode": 0})
    for bad in ({**end, "exitCode": 300}, {**end, "finishedAt": "yesterday"}, [1, 2], {**end, "attempt": "2"}):
        with pytest.raises(ValueError):
            r.in_place(who, bad)
    with pytest.raises(LookupError):  # a token of an earlier pod of the same name
        r.in_place(Reporter("team", "demo", "worker-0", 2, pod_uid="u0", in_place=True), None)
    spec, pod["spec"] = pod["spec"], {"containers": [{"name": "pytorch", "command": ["python", "train.py"]}]}
    with pytest.raises(LookupError):  # annotated as restarting in place, but its spec does not run the entry point
        r.in_place(who, None)
    pod["spec"] = spec
    def notes() -> dict[str, Any]:  # as the API has them now
        return pod["metadata"]["annotations"]  # type: ignore[no-any-return]

    # an attempt asked to stop may end with 0 (it handled SIGTERM); the API server away: try again later
    notes().update(SEAL.close("u1", {"torchjob.dev/attempt": "3", inplace.ANNOTATION_SINCE: "now"}))
    notes().update({inplace.ANNOTATION_STOP: "3", inplace.ANNOTATION_STOP_BY: "later"})  # not the operator's
    assert r.in_place(who, None) == {"attempt": 3, "stop": None, "release": False}
    with pytest.raises(ValueError, match="exitCode 0 is reported only"):
        r.in_place(who, {**end, "attempt": 3, "exitCode": 0})
    notes().update(SEAL.close("u1", {inplace.ANNOTATION_STOP: "3", inplace.ANNOTATION_STOP_BY: "later"}))
    assert r.in_place(who, {**end, "attempt": 3, "exitCode": 0})["stop"] == 3
    # not the operator's either: the attempt the pod's spec names (core: a stale one), nothing released
    notes().update({"torchjob.dev/attempt": "4", inplace.ANNOTATION_RELEASE: "4"})
    assert r.in_place(who, None) == {"attempt": 0, "stop": 3, "release": False}
    api.fail = True
    notes().update(SEAL.close("u1", {"torchjob.dev/attempt": "4", inplace.ANNOTATION_SINCE: "now"}))
    with pytest.raises(TryLater):
        r.in_place(who, {**end, "attempt": 4})


def test_a_report_from_a_pod_restarting_in_place_counts_for_the_attempt_it_runs_now(
        loop: asyncio.AbstractEventLoop) -> None:
    from tests.controller.test_inplace_sequencing import SEAL, wrapped_spec
    from torchjob.progress.server import Reporter

    job = {"metadata": {"name": "demo", "namespace": "team", "uid": "j1"}}
    notes = SEAL.close("u1", {"torchjob.dev/attempt": "5", "torchjob.dev/in-place-since": "x"})
    pod = {"metadata": {"name": "demo-worker-0", "namespace": "team", "uid": "u1", "annotations": notes},
           "spec": wrapped_spec()}
    r = receiver(None, loop, jobs={("team", "demo"): job}, pods={("team", "demo-worker-0"): pod})
    r.seal = SEAL
    reviewed = Reporter("team", "demo", "worker-0", 2, pod_uid="u1", in_place=True)  # as its token was reviewed
    assert r._owned(reviewed, "j1") == Reporter("team", "demo", "worker-0", 5, pod_uid="u1", in_place=True)
    pod["metadata"]["annotations"]["torchjob.dev/attempt"] = "7"  # not the operator's: the spec's first attempt
    assert r._owned(reviewed, "j1") == Reporter("team", "demo", "worker-0", 0, pod_uid="u1", in_place=True)
    assert r._owned(Reporter("team", "demo", "worker-0", 2), "j1") == Reporter("team", "demo", "worker-0", 2)


class CountingApi(ReviewingApi):
    """A ReviewingApi that counts the reviews asked of it and authenticates only `valid` tokens."""

    def __init__(self, valid: set[str]) -> None:
        super().__init__()
        self.valid, self.reviews = valid, 0

    async def review_token(self, token: str, audience: str) -> dict[str, Any]:
        self.reviews += 1
        return await super().review_token(token, audience) if token in self.valid else {"authenticated": False}


def test_a_valid_report_gets_through_the_operators_endpoint_during_a_flood_of_made_up_tokens(
        loop: asyncio.AbstractEventLoop) -> None:
    """Issue 43, item 6, on the operator's endpoint (a real ProgressServer with the operator's
    receiver; the API server's review stands in): tokens whose own claims name no pod of the job are
    refused without a review and charge no budget; tokens forged to claim the job's pod cost a review
    each until their address's budget for that pod is spent (429), and hold back no other address; a
    reporter whose review is cached is never held back, from any address."""
    import http.client

    from torchjob.progress.server import ProgressServer, status_path

    good = claiming("demo-worker-0", "p-1", signature="the-kubelets")
    api = CountingApi({good})
    api.pod = ("demo-worker-0", "p-1")
    jobs = {("team", "demo"): {"metadata": {"name": "demo", "namespace": "team", "uid": "u-now"}}}
    pods = {("team", "demo-worker-0"): a_pod("demo-worker-0", "p-1", "demo", "u-now")}
    server = ProgressServer(("127.0.0.1", 0), receiver(api, loop, jobs, pods)).start()
    server.refusals = (0.5, 5)

    def post(token: str, source: str = "127.0.0.1") -> int:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5, source_address=(source, 0))
        try:
            conn.request("POST", status_path("team", "demo"), json.dumps({"step": 1}).encode(),
                         {"Authorization": f"Bearer {token}"})
            return conn.getresponse().status
        finally:
            conn.close()

    try:
        # made up: not a JWT, claims of another pod or audience: 403 each, no review, no budget spent
        made_up = ["x.y.z", claiming("demo-worker-0", "p-other"), claiming("demo-worker-0", "p-1", job="else"),
                   "eyJhbGciOiJub25lIn0.bm90IGpzb24.x"]
        assert {post(t) for t in made_up * 10} == {403} and api.reviews == 0
        assert post(good) == 200 and api.reviews == 1  # the first one reviewed, from the same address
        # forged to claim the job's pod, from another address: 5 reviews, then 429 without one
        codes = [post(claiming("demo-worker-0", "p-1", signature=f"forged-{i}"), "127.0.0.9") for i in range(12)]
        assert codes == [403] * 5 + [429] * 7 and api.reviews == 6
        time.sleep(1.0)  # (the job's rate)
        assert post(good, "127.0.0.9") == 200  # cached: no budget stands before it, even at that address
        assert post(claiming("demo-worker-0", "p-1", signature="forged-x"), "127.0.0.10") == 403  # another address
    finally:
        server.stop()


def test_a_get_of_a_pods_verdict_waits_for_that_pod_to_change_and_no_longer(
        loop: asyncio.AbstractEventLoop) -> None:
    """The inplace path's long poll (kube/progress/waits.py): `wait_in_place` returns once the pod's verdict
    differs from what the entry point holds, woken by the controller's word that the pod changed (another
    pod's change does not end it), or at its timeout; past the cap of waiting threads it does not wait."""
    from tests.controller.test_inplace_sequencing import SEAL, wrapped_spec
    from torchjob.kube.objects.front import inplace
    from torchjob.kube.progress.waits import PodWaits
    from torchjob.progress.server import Reporter

    pod = {"metadata": {"name": "demo-worker-0", "namespace": "team", "uid": "u1", "annotations": {}},
           "spec": wrapped_spec()}
    pod["metadata"]["annotations"] = SEAL.close("u1", {"torchjob.dev/attempt": "2", inplace.ANNOTATION_SINCE: "now"})
    pods = {("team", "demo-worker-0"): pod}
    r = receiver(AnnotatingApi(pods), loop, pods=pods)
    r.seal, r.waits = SEAL, PodWaits(most=1)
    who = Reporter("team", "demo", "worker-0", 2, pod_uid="u1", in_place=True)
    held = (2, None, False)
    t = time.monotonic()
    assert r.wait_in_place(who, (1, None, False), 5) and time.monotonic() - t < 1  # it differs already
    t = time.monotonic()
    assert r.wait_in_place(who, held, 0.3) and 0.3 <= time.monotonic() - t < 2  # nothing changed: the timeout

    def operator() -> None:  # the operator's round asks the attempt to stop, and its cache tells the waits
        time.sleep(0.3)
        r.waits.changed((TORCHJOB.plural, "team", "demo-worker-1"))  # another pod: it waits on
        time.sleep(0.3)
        pod["metadata"]["annotations"].update(SEAL.close("u1", {inplace.ANNOTATION_STOP: "2",
                                                                inplace.ANNOTATION_STOP_BY: "later"}))
        r.waits.changed((TORCHJOB.plural, "team", "demo-worker-0"))

    with ThreadPoolExecutor(2) as pool:
        told = pool.submit(operator)
        t = time.monotonic()
        assert r.wait_in_place(who, held, 10)
        waited = time.monotonic() - t
        told.result()
        assert 0.5 <= waited < 5, waited
        assert r.in_place(who, None) == {"attempt": 2, "stop": 2, "release": False}
        # the cap: one thread waits (for another change), the next does not
        blocked = pool.submit(r.wait_in_place, who, (2, 2, False), 1.0)
        time.sleep(0.2)
        t = time.monotonic()
        assert not r.wait_in_place(who, (2, 2, False), 1.0) and time.monotonic() - t < 0.5
        assert blocked.result()
