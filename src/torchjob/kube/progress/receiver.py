"""What the progress endpoint calls (from its threads): it authenticates a report's token, finds the
replica attempt that sent it, and hands the report's book over. One receiver serves every kind the
operator serves (a TorchJob's reports and a PyTorchJob's come by their own paths, with their own
audiences).

Authentication follows Kubeflow Trainer (`pkg/statusserver/auth.go` @8c0f505: a projected token
whose audience names the job, the namespace checked), by TokenReview instead of OIDC discovery, so
that it needs no access to the issuer's keys. A pod-bound token (what the kubelet projects) carries
the pod's name and uid (`authentication.kubernetes.io/pod-name`, `pod-uid` in the review's extra):
that says which replica attempt reports. Reviews are cached by the token's hash (positive for
REVIEW_TTL_S, negative for DENY_TTL_S), at most REVIEWS_IN_FLIGHT run at once, at most
REVIEW_QUEUE wait or run (past it the endpoint answers 503 at once: nothing piles up on the
controller's event loop), and one the endpoint's thread stops waiting for is cancelled. A token whose
own claims (read, not trusted: the review decides) do not name this job's audience and one of its
pods is refused without a review; with the endpoint's budget of refused reviews per source and
claimed pod, a flood of bad tokens costs the API server little, and a report whose review is cached
is never held back by it (issue 43).

Reports never wait on the API server for anything but that review: they go to the job's book (in
memory); `writer.py` writes them to the job's status.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import Api
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.labels import LABEL_JOB, attempt_of, replica_name
from torchjob.kube.objects.labels.ownership import controller_of
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.view import CachesView, Key
from torchjob.kube.progress.waits import PodWaits
from torchjob.progress.book import Book
from torchjob.progress.server import Conflict, Reporter, TryLater, audience

REVIEW_TTL_S = 300.0
DENY_TTL_S = 10.0
REVIEWS_IN_FLIGHT = 8
REVIEW_QUEUE = 64  # reviews waiting or in flight at once; past it a report is answered 503 (try again)
REVIEW_TIMEOUT_S = 5.0
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"


class ProgressReceiver:
    """The endpoint's `Receiver`. `on_first_report(plural, key)` is called on the event loop when a
    replica attempt reports for the first time (core starts judging its stalls then)."""

    review_queue = REVIEW_QUEUE

    def __init__(self, api: Api, caches: CachesView, books: Books, loop: asyncio.AbstractEventLoop,
                 on_first_report: Callable[[str, Key], None], seal: inplace.Seal = inplace.NO_SEAL,
                 waits: PodWaits | None = None) -> None:
        self.api, self.caches, self.books, self.loop = api, caches, books, loop
        self.seal = seal  # the operator's (objects/inplace.py): what it records is sealed, and read only so
        self.waits = waits or PodWaits()  # woken by the controllers' pod events (waits.py)
        self.on_first_report = on_first_report
        # by token: the reporter it stands for, the uid of its pod's controller, until when it holds
        self.reviews: dict[str, tuple[Reporter | None, str, float]] = {}
        self._limit = asyncio.Semaphore(REVIEWS_IN_FLIGHT)
        self._queued = 0  # reviews asked for and not answered (waiting for the semaphore, or in flight)
        self._queued_lock = threading.Lock()

    def review_key(self, namespace: str, job: str, credentials: str, plural: str = "torchjobs") -> str | None:
        """The pod a token claims, when checking it costs a review; None when `authorize` answers at
        no cost (a cached review, or a token refused by its shape or its claims)."""
        if credentials.count(".") != 2 or plural not in self.caches:
            return None
        cached = self.reviews.get(self._key(namespace, job, credentials, plural))
        if cached is not None and cached[2] > time.monotonic():
            return None
        return self._claimed_pod(namespace, job, credentials, plural)

    def authorize(self, namespace: str, job: str, credentials: str, plural: str = "torchjobs") -> Reporter | None:
        if credentials.count(".") != 2 or plural not in self.caches:  # not a JWT, or a kind not served
            return None
        key = self._key(namespace, job, credentials, plural)
        cached = self.reviews.get(key)
        if cached is not None and cached[2] > time.monotonic():
            return self._owned(*cached[:2])
        if self._claimed_pod(namespace, job, credentials, plural) is None:
            return None  # its own claims name no pod of this job: no review (a made-up token costs nothing)
        with self._queued_lock:
            if self._queued >= self.review_queue:
                metrics.PROGRESS_REVIEWS.labels("shed").inc()
                raise TryLater("too many tokens are being checked now; try again in a second")
            self._queued += 1
        future = asyncio.run_coroutine_threadsafe(self._review(credentials, plural, namespace, job), self.loop)
        try:
            who, owner = future.result(REVIEW_TIMEOUT_S + 1)
        except BaseException:
            future.cancel()  # not left waiting on the controller's loop after nobody waits for it
            raise
        finally:
            with self._queued_lock:
                self._queued -= 1
        self.reviews[key] = (who, owner, time.monotonic() + (REVIEW_TTL_S if who else DENY_TTL_S))
        if len(self.reviews) > 100_000:  # expired entries go now and then
            now = time.monotonic()
            self.reviews = {k: v for k, v in self.reviews.items() if v[2] > now}
        return self._owned(who, owner)

    @staticmethod
    def _key(namespace: str, job: str, credentials: str, plural: str) -> str:
        return hashlib.sha256(f"{audience(namespace, job, plural)}\0{credentials}".encode()).hexdigest()

    def _claimed_pod(self, namespace: str, job: str, credentials: str, plural: str) -> str | None:
        """The uid of the pod of this job that a token's own claims say it is bound to (a projected
        token's `aud` and `kubernetes.io` claims, read without checking the signature: the review
        does that); None when they name no pod of the job as cached, for its audience."""
        try:
            payload = credentials.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            aud = claims["aud"]
            bound = claims["kubernetes.io"]
            name, uid = bound["pod"]["name"], bound["pod"]["uid"]
        except (ValueError, binascii.Error, TypeError, KeyError, IndexError, RecursionError):
            return None
        auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if audience(namespace, job, plural) not in auds or bound.get("namespace") != namespace:
            return None
        pod = self.caches[plural].pods.get((namespace, name)) if isinstance(name, str) else None
        meta = pod["metadata"] if pod is not None else {}
        if not uid or meta.get("uid") != uid or (meta.get("labels") or {}).get(LABEL_JOB) != job:
            return None
        return str(uid)

    def in_place(self, reporter: Reporter, ended: Any) -> dict[str, Any]:
        """The `InPlace` answer to a pod's entry point: its verdict, after recording the end of its
        attempt (`ended`, a report) in its annotations under the operator's seal, where the operator's
        next round reads it (the only way an attempt's end is believed: objects/inplace.py)."""
        pod = self.caches[reporter.plural].pods.get((reporter.namespace, f"{reporter.job}-{reporter.replica}"))
        here = (inplace.in_place(pod, self.seal) if pod is not None and pod["metadata"].get("uid") == reporter.pod_uid
                else None)
        if pod is None or here is None:
            raise LookupError(f"no pod of {reporter.replica} restarting in place")
        if ended is not None:
            end = inplace.parse_exit(ended)
            if end.exit_code == 0 and here.stop != end.attempt:
                raise ValueError("exitCode 0 is reported only for an attempt asked to stop: one that succeeded "
                                 "on its own ends its pod")
            if end.attempt != here.attempt:
                raise Conflict(f"attempt {end.attempt} is not the pod's current one ({here.attempt})")
            if here.ended is None:
                meta = pod["metadata"]
                note = self.seal.close(reporter.pod_uid, inplace.exit_note(end))
                future = asyncio.run_coroutine_threadsafe(self.api.patch_annotations(
                    "Pod", meta["name"], reporter.namespace, note, uid=reporter.pod_uid), self.loop)
                try:
                    here = inplace.in_place(future.result(REVIEW_TIMEOUT_S), self.seal) or here
                except Exception as e:
                    future.cancel()
                    raise TryLater("the attempt's end could not be recorded now; try again") from e
        return here.verdict()

    def wait_in_place(self, reporter: Reporter, seen: tuple[int, int | None, bool], timeout_s: float) -> bool:
        """The inplace path's long poll (progress/server.py): until the pod's verdict is no longer `seen`
        (as its cache has it: each change of the pod wakes this), at most timeout_s."""
        def same() -> bool:
            try:
                verdict = self.in_place(reporter, None)
            except Exception:  # whatever it is now, the GET that follows says it
                return False
            return (verdict["attempt"], verdict["stop"], verdict["release"]) == seen

        pod = (reporter.plural, reporter.namespace, f"{reporter.job}-{reporter.replica}")
        return self.waits.wait(pod, same, timeout_s)

    def _owned(self, who: Reporter | None, owner: str) -> Reporter | None:
        """The reporter, when its pod's controller is the job the report is for, as the job is now
        (looked at every time: the review is cached, and a job of that name may since be another):
        a pod labelled as this job's but made by something else (another kind, an earlier job of the
        same name, anyone) never reports for it."""
        if who is None:
            return None
        job = self.caches[who.plural].jobs.get((who.namespace, who.job))
        if job is None or not owner or job["metadata"].get("uid") != owner:
            return None
        if who.in_place:  # its attempts come and go in the same pod: the one it runs now
            pod = self.caches[who.plural].pods.get((who.namespace, f"{who.job}-{who.replica}"))
            ours = pod is not None and pod["metadata"].get("uid") == who.pod_uid
            here = inplace.in_place(pod, self.seal) if pod is not None and ours else None
            if here is not None:
                return replace(who, attempt=here.attempt)
        return who

    async def _review(self, token: str, plural: str, namespace: str, job: str) -> tuple[Reporter | None, str]:
        """Who the token stands for (None: nobody of this job's), and the uid of its pod's controller."""
        aud = audience(namespace, job, plural)
        async with self._limit:
            status = await asyncio.wait_for(self.api.review_token(token, aud), REVIEW_TIMEOUT_S)
        metrics.PROGRESS_REVIEWS.labels("authenticated" if status.get("authenticated") else "denied").inc()
        if not status.get("authenticated") or aud not in (status.get("audiences") or []):
            return None, ""
        user = status.get("user") or {}
        parts = str(user.get("username", "")).split(":")
        if parts[:2] != ["system", "serviceaccount"] or len(parts) != 4 or parts[2] != namespace:
            return None, ""  # a token of another namespace, or not a service account's
        extra = user.get("extra") or {}
        pod_name, pod_uid = (extra.get(POD_NAME) or [""])[0], (extra.get(POD_UID) or [""])[0]
        pod = self.caches[plural].pods.get((namespace, pod_name))  # this kind's pods only
        if pod is None or pod["metadata"].get("uid") != pod_uid:
            return None, ""  # not bound to a pod, or to one the operator does not know (of another job or kind)
        labels = pod["metadata"].get("labels") or {}
        replica = replica_name(labels)
        if labels.get(LABEL_JOB) != job or replica is None:
            return None, ""
        owner = controller_of(pod)
        here = inplace.in_place(pod, self.seal)
        return (Reporter(namespace, job, replica, attempt_of(pod) if here is None else here.attempt, plural, pod_uid,
                         in_place=here is not None), str((owner or {}).get("uid") or ""))

    def book(self, reporter: Reporter) -> Book | None:
        return self.books.open(reporter, self.caches)

    def received(self, reporter: Reporter, first: bool) -> None:
        metrics.PROGRESS_REPORTS.inc()
        if first:  # core starts judging this attempt: reconcile now, so it schedules the deadline
            self.loop.call_soon_threadsafe(self.on_first_report, reporter.plural, (reporter.namespace, reporter.job))
