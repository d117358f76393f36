"""One HTTP port for `/healthz`, `/readyz` and `/metrics` (Prometheus), served from a thread.
`/metrics` answers only scrapers that `auth` lets through (scrapers.py) when it is given."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

MAX_CONNECTIONS = 32  # probes and scrapers at once; past it a connection is closed at once
READ_TIMEOUT_S = 10.0
REASONS = {401: b"unauthorized: send a bearer token (a ServiceAccount's) that may get /metrics",
           403: b"forbidden: this token's user may not get /metrics (bind it to the torchjob-metrics-reader role)",
           503: b"the token could not be checked now; try again"}


class Health:
    def __init__(self) -> None:
        self.ready = False


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve_http(port: int, health: Health, auth: Callable[[str | None], int] | None = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            headers = {}
            if path == "/metrics":
                code = auth(self.headers.get("Authorization")) if auth is not None else 200
                body, ctype = (generate_latest(), CONTENT_TYPE_LATEST) if code == 200 else (REASONS[code], "text/plain")
                if code == 401:
                    headers["WWW-Authenticate"] = 'Bearer realm="torchjob-operator"'
            elif path == "/healthz":
                body, ctype, code = b"ok", "text/plain", 200
            elif path == "/readyz":
                body, ctype, code = (b"ok", "text/plain", 200) if health.ready else (b"not ready", "text/plain", 503)
            else:
                body, ctype, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _Server(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
