"""The progress endpoint both runtimes serve: replicas POST reports to it.

The standard library's threading HTTP server, not aiohttp: it adds no dependency to the operator
image, the local supervisor (which has no event loop) and the operator share this one handler, and
a report is one small request a second per replica at most. What keeps it safe under bad clients
(any pod of the cluster can reach the operator's), in the order a request meets them:

- at most `max_connections` connections served at once, `max_per_source` of them from one address;
  at a cap a fair share (GuardedServer._make_room): a waiting connection of the address that holds
  the most gives way, however young, or, when the newcomer's address holds the most itself (or is at
  its own cap), one of its own that has sent no request for a second or waits idle; when none can,
  the new connection is closed at once (it costs no thread);
- a whole-request deadline (`request_deadline_s`: TLS handshake, headers, body and the wait between
  two requests of a kept-alive connection), besides the 10 s socket timeout per read, so that a
  client trickling a byte at a time cannot hold a thread;
- the token checked before the body is read, and before any budget counts the request: a token the
  receiver answers at no cost (a local token's HMAC, a review it remembers, a token whose own claims
  do not fit the job: Receiver.review_key) is never held back, so a valid report gets through during
  any flood of invalid ones (issue 43: a flood of made-up tokens from loopback had the job's own
  reports answered 429 until it was declared stalled); only a token that costs a check (a
  TokenReview) meets a budget, of refused checks per address and the pod the token names
  (`refusals`: a token bucket each), so a flood of made-up tokens costs the API server little; a
  receiver that cannot check a token now (its queue of reviews is full, the API server is away)
  answers 503 with Retry-After;
- a request refused before its body was read gets its answer and then at most DRAIN_S to send the
  rest (a refused client trickling its body holds no thread for the whole deadline), and its
  connection is the first to give way at a cap;
- a 64 KiB body limit read from Content-Length before the body;
- the job's rate limit (a per-job token bucket, and one report a second per replica attempt past
  it: Book.admit; 429 with Retry-After), then the body, parsed (422 when it is not a report).

Paths: torchjob's `/apis/torchjob.dev/v1/namespaces/{ns}/torchjobs/{name}/status` (what
KUBEFLOW_TRAINER_SERVER_URL names for a TorchJob), the same shape for a Kubeflow PyTorchJob the
operator serves, `/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}/status`, Kubeflow Trainer's own
`/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status`
(`pkg/statusserver/utils.go` @8c0f505) for a TrainJob the operator serves, and the same shape for
T9k's PyTorchTrainingJob (`batch.tensorstack.dev/v1beta1/.../pytorchtrainingjobs`). Answers as Trainer's: 200 with the
parsed payload, errors as a metav1 Status object (`pkg/statusserver/server.go`).
"""

from __future__ import annotations

import json
import logging
import math
import re
import ssl
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from torchjob.progress.book import Book
from torchjob.progress.guard import GuardedServer, source_of
from torchjob.progress.protocol import MAX_BODY_BYTES, BadReport, parse

log = logging.getLogger("torchjob.progress")
PATH = re.compile(r"^/apis/(?:torchjob\.dev/v1/namespaces/(?P<ns>[^/]+)/torchjobs"
                  r"|kubeflow\.org/v1/namespaces/(?P<kns>[^/]+)/pytorchjobs"
                  r"|trainer\.kubeflow\.org/v1alpha1/namespaces/(?P<tns>[^/]+)/trainjobs"
                  r"|batch\.tensorstack\.dev/v1beta1/namespaces/(?P<t9ns>[^/]+)/pytorchtrainingjobs)"
                  r"/(?P<name>[^/]+)/(?P<sub>status|inplace)/?$")
TORCHJOBS = "torchjobs"
PYTORCHJOBS = "pytorchjobs"  # Kubeflow's kubeflow.org/v1 PyTorchJob, as the operator serves it
TRAINJOBS = "trainjobs"  # Kubeflow Trainer v2's TrainJob, as the operator serves it
PYTORCHTRAININGJOBS = "pytorchtrainingjobs"  # T9k's, as the operator serves it
GROUPS = {TORCHJOBS: "torchjob.dev/v1", PYTORCHJOBS: "kubeflow.org/v1", TRAINJOBS: "trainer.kubeflow.org/v1alpha1",
          PYTORCHTRAININGJOBS: "batch.tensorstack.dev/v1beta1"}
READ_TIMEOUT_S = 10.0  # one read of a socket
DRAIN_BYTES = 1 << 20  # an authorized body too large but below this is read (and dropped) after the 413
# The inplace path, per replica: its entry point asks for its verdict waiting up to 3 s for a change (a long
# poll), or at most every second (every 0.2 s once parked) where it got no wait; past this it is answered 429.
IN_PLACE_RATE = 10.0
IN_PLACE_BURST = 20.0
LONG_POLL_MAX_S = 4.0  # within the request deadline (10 s) and the entry point's read timeout (5 s)


def status_path(namespace: str, name: str, plural: str = TORCHJOBS) -> str:
    return f"/apis/{audience(namespace, name, plural)}"


def audience(namespace: str, name: str, plural: str = TORCHJOBS) -> str:
    """The audience a job's projected service-account token is issued for (Trainer's TokenAudience
    with the kind's group and plural: a token for one job is refused by every other, a TorchJob's
    by the PyTorchJob of the same name too)."""
    return f"{GROUPS[plural]}/namespaces/{namespace}/{plural}/{name}/status"


@dataclass(frozen=True)
class Reporter:
    """Who sent a report, as its token says."""

    namespace: str
    job: str
    replica: str
    attempt: int
    plural: str = TORCHJOBS  # the job's kind, as its path names it
    pod_uid: str = ""  # the pod its token is bound to (a cluster's)
    in_place: bool = False  # its pod restarts in place (kube/objects/front/inplace.py): its attempt is read anew


class TryLater(Exception):
    """The receiver cannot check a token now (too many checks in flight): 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Conflict(Exception):
    """The request is about a state that is no longer current (409)."""


class Receiver(Protocol):
    def authorize(self, namespace: str, job: str, credentials: str, plural: str = TORCHJOBS) -> Reporter | None:
        """The reporter a bearer token stands for on this job of that kind; None when it does not (403).
        Raises TryLater (or any error: 503) when it cannot tell now."""

    def review_key(self, namespace: str, job: str, credentials: str, plural: str = TORCHJOBS) -> str | None:
        """None when `authorize` answers this token at no cost (an HMAC, a remembered review, a token
        refused by its shape): no budget is consulted or charged. Else what its refused checks are
        counted under, beside the source address (the pod the token names)."""

    def book(self, reporter: Reporter) -> Book | None:
        """The job's book; None when there is no such job (404)."""

    def received(self, reporter: Reporter, first: bool) -> None:
        """A report was recorded (`first`: that attempt's first)."""


class InPlace(Protocol):
    """A receiver that restarts pods in place (the operator's) also answers their entry point on the
    `inplace` path beside `status` (kube/inpod/torchjob_inplace.py): `in_place(reporter, None)` is
    the pod's verdict (GET); with the report of an attempt that ended, it is recorded first (POST).
    Raises LookupError (404), ValueError (422), Conflict (409), TryLater (503). `wait_in_place(reporter, seen,
    timeout_s) -> bool`, where it has one, blocks a GET's `long_poll` until the verdict may differ from `seen`."""

    def in_place(self, reporter: Reporter, ended: Any) -> dict[str, Any]: ...


def long_poll(path: str) -> tuple[float, tuple[int, int | None, bool]] | None:
    """A GET's `?wait=S&seen=A,STOP,RELEASE` (STOP empty for none, RELEASE 0|1): how long it may wait for
    its verdict to differ from the one it holds (at most LONG_POLL_MAX_S); None: it is answered at once."""
    try:
        query = urllib.parse.parse_qs(path.partition("?")[2])
        wait, (attempt, stop, release) = float(query["wait"][0]), query["seen"][0].split(",")
        seen = (int(attempt), None if stop == "" else int(stop), release == "1")
    except (KeyError, ValueError):
        return None
    return (min(wait, LONG_POLL_MAX_S), seen) if math.isfinite(wait) and wait > 0 else None


def bearer(header: str | None) -> str:
    """The credentials of an RFC 7235 `Bearer` header (the scheme in any case), else ''."""
    parts = (header or "").split()
    return parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class Rate:
    """A token bucket per key (a replica's requests on the inplace path)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.buckets: dict[Any, tuple[float, float]] = {}  # key -> (tokens, when)
        self.lock = threading.Lock()

    def take(self, key: Any, now: float) -> float:
        """0 when a request of `key` may go now (one token taken), else the seconds until it may."""
        with self.lock:
            tokens, at = self.buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens < 1:
                self.buckets[key] = (tokens, now)
                return (1 - tokens) / self.rate
            self.buckets[key] = (tokens - 1, now)
            if len(self.buckets) > 10_000:  # those full again are forgotten now and then
                self.buckets = {k: (t, w) for k, (t, w) in self.buckets.items()
                                if t + (now - w) * self.rate < self.burst}
            return 0.0


class ProgressServer(GuardedServer):
    def __init__(self, address: tuple[str, int], receiver: Receiver, tls: ssl.SSLContext | None = None) -> None:
        self.receiver = receiver
        self.tls = tls
        self.in_place_rate = Rate(IN_PLACE_RATE, IN_PLACE_BURST)
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:  # the handshake happens in the request's own thread, on first read
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.counters.add(0)  # a broken connection (a TLS handshake that failed, a reset): nothing to answer

    def start(self) -> ProgressServer:
        self.serve_in_thread("progress-endpoint")
        return self


class _Handler(BaseHTTPRequestHandler):
    server: ProgressServer
    answered = False  # this request's answer has begun (a failure after it cannot send another)
    unread = 0
    served = False  # a request was answered on this connection
    timeout = READ_TIMEOUT_S
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the headers and the body go in two writes: no 40 ms wait for an ACK

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.answered = True
        self.server.counters.add(code)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if code >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, code: int, reason: str, message: str, headers: dict[str, str] | None = None) -> None:
        self._send(code, _status(code, reason, message), headers)

    def do_PUT(self) -> None:
        self._fail(405, "MethodNotAllowed", "POST a progress report to this path")

    do_DELETE = do_PATCH = do_OPTIONS = do_PUT  # every answer a Status (not the stdlib's 501 page)

    def handle_one_request(self) -> None:
        # the deadline of this request, and of the wait for it (idle, after one: a kept-alive connection)
        self.server.waiting(self.connection, idle=self.served)
        super().handle_one_request()
        self.served = True

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # the request line and the headers
        self.server.began(self.connection)
        return parsed

    def do_GET(self) -> None:
        self._serve(post=False)

    def do_POST(self) -> None:
        self._serve(post=True)

    def _serve(self, post: bool) -> None:
        self.answered = False
        self.unread = 0  # bytes of the body not read (yet)
        try:
            self._handle(post)
            self._discard()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True
        except Exception:  # a bug of ours: the client still gets an answer, and the endpoint goes on
            log.exception("the progress endpoint failed on a request to %s", self.path)
            if not self.answered:
                self._fail(500, "InternalError", "the report could not be handled; it was not recorded")
            self.close_connection = True

    def _discard(self) -> None:
        """After an answer given before the body was read: read the body and drop it (in pieces), so
        that closing the connection sends the client its answer rather than a reset. After a refusal,
        for DRAIN_S at most, its connection the first to give way at a cap (GuardedServer.refused)."""
        if self.unread > 0 and self.close_connection:
            self.server.refused(self.connection)
        while self.unread > 0:
            chunk = self.rfile.read(min(self.unread, 1 << 14))
            if not chunk:
                break
            self.unread -= len(chunk)

    def _handle(self, post: bool) -> None:
        m = PATH.match(self.path.split("?", 1)[0])
        if m is None:
            self._fail(404, "NotFound", f"no such path {self.path!r}: POST to the URL in KUBEFLOW_TRAINER_SERVER_URL")
            return
        if not post and m["sub"] != "inplace":
            self._fail(405, "MethodNotAllowed", "POST a progress report to this path")
            return
        namespace, name = m["ns"] or m["kns"] or m["tns"] or m["t9ns"], m["name"]
        plural = (PYTORCHJOBS if m["kns"] else TRAINJOBS if m["tns"] else PYTORCHTRAININGJOBS if m["t9ns"]
                  else TORCHJOBS)
        length_text = self.headers.get("Content-Length", None if post else "0")
        if length_text is None or not (length_text.isascii() and length_text.isdigit()) or len(length_text) > 12:
            self._fail(411, "BadRequest", "send the body with a Content-Length header")
            return
        length = int(length_text)
        # Until the token is checked, at most a report's worth of body is ever read (and then dropped).
        self.unread = min(length, MAX_BODY_BYTES)
        receiver = self.server.receiver
        credentials = bearer(self.headers.get("Authorization"))
        # Only a check that costs something meets a budget: a valid token the receiver knows at once
        # is never held back by other clients' refused ones, however many.
        review = receiver.review_key(namespace, name, credentials, plural)
        budget = f"{source_of(self.client_address)} {review}" if review is not None else None
        wait = self.server.may_try_token(budget) if budget is not None else 0.0
        if wait > 0:
            self._fail(429, "TooManyRequests", "too many refused tokens from this address; wait",
                       {"Retry-After": str(max(1, round(wait)))})
            return
        try:
            who = receiver.authorize(namespace, name, credentials, plural)
        except TryLater as e:  # too many tokens being checked at once
            self._fail(503, "ServiceUnavailable", str(e), {"Retry-After": str(e.retry_after_s)})
            return
        except Exception:  # the token could not be checked (the API server is away): try again later
            self._fail(503, "ServiceUnavailable", "the token could not be checked now; try again",
                       {"Retry-After": "5"})
            return
        if who is None:
            if budget is not None:
                self.server.token_refused(budget)
            self._fail(403, "Forbidden", f"the token is not one of job {namespace}/{name}'s replicas")
            return
        if length > MAX_BODY_BYTES:
            # one of the job's replicas: its too-large body is read and dropped (up to a limit), so
            # that it gets the answer, not a reset
            self.unread = length if length <= DRAIN_BYTES else 0
            self._fail(413, "RequestEntityTooLarge", f"the body is {length} bytes; at most {MAX_BODY_BYTES}")
            return
        if m["sub"] == "inplace":
            self._in_place(who, length if post else None)
            return
        book = receiver.book(who)
        if book is None:
            self._fail(404, "NotFound", f"no job {namespace}/{name}")
            return
        wait = book.admit(who.replica, who.attempt, time.monotonic())
        if wait > 0:
            self._fail(429, "TooManyRequests", "too many progress reports for this job; report at most once a "
                       "second per replica", {"Retry-After": str(max(1, round(wait)))})
            return
        body = self.rfile.read(length)
        self.unread = 0
        try:
            report = parse(body)
        except BadReport as e:
            self._fail(422, "Invalid", str(e))
            return
        first = book.record(who.replica, who.attempt, report, datetime.now(UTC))
        receiver.received(who, first)
        self._send(200, {k: v for k, v in asdict(report).items() if v not in (None, {})})

    def _in_place(self, who: Reporter, length: int | None) -> None:
        """A pod's entry point asks for its verdict, or (a body) reports an attempt that ended first."""
        receiver = self.server.receiver
        serve = getattr(receiver, "in_place", None)
        if serve is None:
            self._fail(404, "NotFound", "this endpoint restarts no pod in place")
            return
        wait = self.server.in_place_rate.take((who.plural, who.namespace, who.job, who.replica), time.monotonic())
        if wait > 0:
            self._fail(429, "TooManyRequests", f"too many requests for {who.replica} on this path; at most "
                       f"{IN_PLACE_RATE:g} a second", {"Retry-After": str(max(1, math.ceil(wait)))})
            return
        ended = None
        if length is not None:
            body = self.rfile.read(length)
            self.unread = 0
            try:
                ended = json.loads(body)
            except ValueError:
                self._fail(422, "Invalid", "the body is not JSON")
                return
            except RecursionError:  # `[[[[...` deep: the decoder gives up, and so does the report
                self._fail(422, "Invalid", "the body is nested too deeply")
                return
        try:
            answer = serve(who, ended)
            poll, hold = long_poll(self.path) if ended is None else None, getattr(receiver, "wait_in_place", None)
            held = tuple(answer.get(k) for k in ("attempt", "stop", "release"))
            if poll is not None and hold is not None and held == poll[1] and hold(who, poll[1], poll[0]):
                answer = serve(who, None)  # changed, or the wait is over: the verdict as it is now
        except TryLater as e:
            self._fail(503, "ServiceUnavailable", str(e), {"Retry-After": str(e.retry_after_s)})
        except Conflict as e:
            self._fail(409, "Conflict", str(e))
        except LookupError as e:
            self._fail(404, "NotFound", str(e))
        except ValueError as e:
            self._fail(422, "Invalid", str(e))
        else:
            self._send(200, answer)
