"""The caps the progress endpoint keeps on its clients (progress/server.py says why), as a threading
HTTP server: connections at once, and per source address; each request's deadline; each source's
budget of refused tokens. Standard library only; knows nothing of reports."""

from __future__ import annotations

import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from torchjob.progress.book import RateLimit

MAX_CONNECTIONS = 256  # open at once (a thread each); past it an idle kept-alive one goes, or the new one
MAX_PER_SOURCE = 16  # of them from one address (a pod reports over one kept-alive connection)
REQUEST_DEADLINE_S = 10.0  # a whole request, however slowly it comes
REFUSALS_PER_S, REFUSALS_BURST = 1.0, 20  # refused tokens a source may send before it gets 429
SHED = -1  # the counters' code of a connection closed at once (over a cap)
EVICTED = -2  # of a kept-alive idle connection let go for a new one


class Counters:
    """How the endpoint answered, by code (0: a broken connection; SHED, EVICTED; 408: cut at the deadline)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_code: dict[int, int] = {}

    def add(self, code: int) -> None:
        with self.lock:
            self.by_code[code] = self.by_code.get(code, 0) + 1


class GuardedServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    # The limits (class attributes, as socketserver's own; an instance may set its own before start()).
    max_connections: int = MAX_CONNECTIONS
    max_per_source: int | None = MAX_PER_SOURCE
    request_deadline_s: float = REQUEST_DEADLINE_S
    refusals: tuple[float, int] = (REFUSALS_PER_S, REFUSALS_BURST)

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.counters = Counters()
        self._lock = threading.Lock()
        self._open = 0
        self._by_source: dict[str, int] = {}
        self._deadlines: dict[socket.socket, float] = {}  # each connection's current request must end by
        self._sources: dict[socket.socket, str] = {}
        self._idle: dict[socket.socket, float] = {}  # kept-alive connections between two requests: since
        self._evicted: set[socket.socket] = set()  # let go for a new one, their thread not ended yet
        self._refused: dict[str, RateLimit] = {}  # by source: its budget of refused tokens
        self._closed = threading.Event()
        super().__init__(address, handler)

    def start_reaper(self) -> None:
        threading.Thread(target=self._reap, name="progress-endpoint-deadlines", daemon=True).start()

    def stop_reaper(self) -> None:
        self._closed.set()

    # --- the caps: connections, per source, and each request's deadline ---

    def process_request(self, request: Any, client_address: Any) -> None:
        source = source_of(client_address)
        now = time.monotonic()
        with self._lock:
            victim = self._make_room(source)
            full = self._full(source)
            if not full:
                self._open += 1
                self._by_source[source] = self._by_source.get(source, 0) + 1
                self._deadlines[request] = now + self.request_deadline_s
                self._sources[request] = source
        if victim is not None:  # a kept-alive connection between two reports: its client makes a new one
            self.counters.add(EVICTED)
            _cut(victim)
        if full:  # closed before any byte is read or any thread started
            self.counters.add(SHED)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._leave(request, source)
            raise

    def _caps(self, source: str) -> tuple[bool, bool]:
        """Whether all connections, and this source's, are at their caps (those let go not counted)."""
        at_source = self._by_source.get(source, 0) - sum(1 for s in self._evicted if self._sources.get(s) == source)
        return (self._open - len(self._evicted) >= self.max_connections,
                self.max_per_source is not None and at_source >= self.max_per_source)

    def _full(self, source: str) -> bool:
        return any(self._caps(source))

    def _make_room(self, source: str) -> socket.socket | None:
        """At a cap, the oldest idle kept-alive connection (this source's, when it is at its own cap)
        is let go for the new one; a connection in the middle of a request never is."""
        all_full, source_full = self._caps(source)
        if not (all_full or source_full):
            return None
        idle = [s for s in self._idle if not source_full or self._sources.get(s) == source]
        if not idle:
            return None
        victim = min(idle, key=lambda s: self._idle[s])
        del self._idle[victim]
        self._deadlines.pop(victim, None)
        self._evicted.add(victim)
        return victim

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._leave(request, source_of(client_address))

    def _leave(self, request: Any, source: str) -> None:
        with self._lock:
            self._open -= 1
            left = self._by_source.get(source, 1) - 1
            if left > 0:
                self._by_source[source] = left
            else:
                self._by_source.pop(source, None)
            self._deadlines.pop(request, None)
            self._idle.pop(request, None)
            self._evicted.discard(request)
            self._sources.pop(request, None)

    def waiting(self, request: Any, idle: bool) -> None:
        """The connection waits for a request (`idle`: the next one of a kept-alive connection): the
        deadline of the request starts now."""
        with self._lock:
            if request in self._deadlines:
                self._deadlines[request] = time.monotonic() + self.request_deadline_s
                if idle:
                    self._idle[request] = time.monotonic()

    def began(self, request: Any) -> None:
        """A request's first line has come: the connection is busy (never let go for another)."""
        with self._lock:
            self._idle.pop(request, None)

    def _reap(self) -> None:
        """Cut the connections whose request is past its deadline: the thread blocked reading one
        wakes up (end of file) and ends."""
        while not self._closed.wait(min(0.25, self.request_deadline_s / 4)):
            now = time.monotonic()
            with self._lock:
                late = [sock for sock, until in self._deadlines.items() if until <= now]
                for sock in late:
                    self._deadlines.pop(sock, None)
                    self._idle.pop(sock, None)
            for sock in late:
                self.counters.add(408)
                _cut(sock)

    # --- refused tokens, per source ---

    def may_try_token(self, source: str) -> float:
        """0 when this source may have a token checked; else the seconds until it may."""
        with self._lock:
            bucket = self._refused.get(source)
            return bucket.wait(time.monotonic()) if bucket is not None else 0.0

    def token_refused(self, source: str) -> None:
        with self._lock:
            if len(self._refused) > 10_000:  # sources whose budget is whole again are forgotten
                now = time.monotonic()
                self._refused = {k: b for k, b in self._refused.items() if not b.full(now)}
            bucket = self._refused.setdefault(source, RateLimit(*self.refusals))
            bucket.take(time.monotonic())


def _cut(sock: socket.socket) -> None:
    """Shut a connection down from another thread: its reader wakes up (end of file). The plain
    socket's shutdown, under a TLS one: no TLS state is touched from this thread."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def source_of(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) and client_address else ""
