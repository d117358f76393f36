"""The operator's two small HTTP listeners, each served from threads behind the progress endpoint's
guard (progress/guard.py: connections at once and per source address, a whole-request deadline, a
budget of refused tokens per source), so that no pod of the cluster can hold their threads:

- the probes, `/healthz` and `/readyz`, on a port of their own (`--health-port`, as
  controller-runtime's health probe address): plain HTTP, no token (the kubelet sends none), on no
  Service;
- `/metrics` (Prometheus), over TLS where a context is given, answering only scrapers that `auth`
  lets through (scrapers.py) when it is given; a source whose tokens keep being refused gets 429
  without another TokenReview.

`/readyz` says that this process works, on every replica, not that it leads (controller-runtime's
meaning): its caches are synced (leading, or running without an election), or it waits for the
Lease; and, with an election, it reached the API server within `contact_window_s`."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from torchjob.progress.guard import GuardedServer, source_of

READ_TIMEOUT_S = 5.0  # one read of a socket; the guard's deadline bounds the whole request
REASONS = {401: b"unauthorized: send a bearer token (a ServiceAccount's) that may get /metrics",
           403: b"forbidden: this token's user may not get /metrics (bind it to the torchjob-metrics-reader role)",
           429: b"too many refused tokens from this address; wait",
           503: b"the token could not be checked now; try again"}


class Health:
    """What `/readyz` answers, set by the operator as it goes (read from the probe's thread)."""

    def __init__(self, contact_window_s: float | None = None) -> None:
        self.synced = False  # the controllers' caches are synced (the process reconciles)
        self.waiting = False  # a candidate waiting for the Lease (it has nothing to sync yet)
        self.stopping = False
        self.contact_window_s = contact_window_s  # None: no check of the API server's reach
        self._contact: float | None = None  # when the API server last answered (None: not yet)

    def contact(self) -> None:
        """The API server answered (a Lease read or renewal)."""
        self._contact = time.monotonic()

    def check(self) -> str | None:
        """None when ready, else why not."""
        if self.stopping:
            return "stopping"
        if not (self.synced or self.waiting):
            return "caches not synced yet"
        if self.contact_window_s is not None:
            if self._contact is None:
                return "the API server has not answered yet"
            if time.monotonic() - self._contact > self.contact_window_s:
                return f"the API server has not answered for more than {self.contact_window_s:.0f}s"
        return None

    @property
    def ready(self) -> bool:
        return self.check() is None


class GuardedHttp(GuardedServer):
    """A GuardedServer with its own limits and, with `tls`, TLS (the handshake in the request's
    thread, on its first read, under the request's deadline)."""

    max_connections = 32
    max_per_source = 8
    request_deadline_s = 5.0

    def __init__(self, address: tuple[str, int], handler: Any, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        super().__init__(address, handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.counters.add(0)  # a broken connection (a failed handshake, a reset): nothing to answer

    def start(self, name: str) -> GuardedHttp:
        self.serve_in_thread(name)
        return self


class _Handler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0): what a probe or a scrape sends."""

    server: GuardedHttp
    timeout = READ_TIMEOUT_S

    def handle_one_request(self) -> None:
        self.server.waiting(self.connection, idle=False)  # the request's deadline starts now
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.server.began(self.connection)
        return parsed

    def answer(self, code: int, body: bytes, ctype: str = "text/plain", headers: dict[str, str] | None = None) -> None:
        self.server.counters.add(code)
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_health(port: int, health: Health, host: str = "0.0.0.0") -> GuardedHttp:
    """`/healthz` (the process answers) and `/readyz` (Health.check) on `port` (0: any free one)."""

    class Handler(_Handler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self.answer(200, b"ok")
            elif path == "/readyz":
                why = health.check()
                self.answer(200, b"ok") if why is None else self.answer(503, f"not ready: {why}".encode())
            else:
                self.answer(404, b"not found: /healthz and /readyz are served here")

    return GuardedHttp((host, port), Handler).start("health-probes")


def serve_metrics(port: int, auth: Callable[[str | None], int] | None = None, tls: ssl.SSLContext | None = None,
                  host: str = "0.0.0.0") -> GuardedHttp:
    """`/metrics` on `port` (0: any free one), over TLS with `tls`, to the scrapers `auth` lets through."""

    class Handler(_Handler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.answer(404, b"not found: /metrics is served here")
                return
            headers: dict[str, str] = {}
            code = 200
            if auth is not None:
                source = source_of(self.client_address)
                wait = self.server.may_try_token(source)
                if wait > 0:
                    code = 429
                    headers["Retry-After"] = str(max(1, round(wait)))
                else:
                    code = auth(self.headers.get("Authorization"))
                    if code in (401, 403):
                        self.server.token_refused(source)
            if code == 200:
                self.answer(200, generate_latest(), CONTENT_TYPE_LATEST)
                return
            if code == 401:
                headers["WWW-Authenticate"] = 'Bearer realm="torchjob-operator"'
            self.answer(code, REASONS[code], headers=headers)

    return GuardedHttp((host, port), Handler, tls).start("metrics")
