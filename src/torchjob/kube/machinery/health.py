"""One HTTP port for `/healthz`, `/readyz` and `/metrics` (Prometheus), served from a thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class Health:
    def __init__(self) -> None:
        self.ready = False


def serve_http(port: int, health: Health) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype, code = generate_latest(), CONTENT_TYPE_LATEST, 200
            elif self.path == "/healthz":
                body, ctype, code = b"ok", "text/plain", 200
            elif self.path == "/readyz":
                body, ctype, code = (b"ok", "text/plain", 200) if health.ready else (b"not ready", "text/plain", 503)
            else:
                body, ctype, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
