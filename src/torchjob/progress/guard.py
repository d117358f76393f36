"""The caps the progress endpoint keeps on its clients (progress/server.py says why), as a threading
HTTP server: connections at once, and per source address; each request's deadline; each source's
budget of refused tokens. Standard library only; knows nothing of reports."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from torchjob.progress.book import RateLimit

MAX_CONNECTIONS = 256  # open at once (a thread each); past it an idle kept-alive one goes, or the new one
MAX_PER_SOURCE = 16  # of them from one address (a pod reports over one kept-alive connection)
REQUEST_DEADLINE_S = 10.0  # a whole request, however slowly it comes
STALE_S = 1.0  # a connection that has sent no request this long may be let go for a new one, at a cap
REFUSALS_PER_S, REFUSALS_BURST = 1.0, 20  # refused costly token checks a source may cause before it gets 429
SERVE_POLL_S = 0.05  # how often the serving loop looks whether to stop (socketserver's default, 0.5 s, was what
# stop() waited for: up to half a second at the end of every local job, whose supervisor stops its endpoint last)
DRAIN_S = 1.0  # after a refusal, how long the rest of a request's body may take (then the connection is cut)
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


@dataclass
class _Conn:
    source: str
    since: float  # accepted, or done with its last request (a kept-alive one)
    until: float  # the deadline of its current request (and of the wait for it)
    # new: no request yet; idle: kept alive between two; busy: a request's headers read; refused: answered
    # with a refusal, the rest of its body being read and dropped
    state: str = "new"
    let_go: bool = False  # cut for a new one; its thread has not ended yet


class GuardedServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    # The limits (class attributes, as socketserver's own; an instance may set its own before start()).
    max_connections: int = MAX_CONNECTIONS
    max_per_source: int | None = MAX_PER_SOURCE
    request_deadline_s: float = REQUEST_DEADLINE_S
    stale_s: float = STALE_S
    refusals: tuple[float, int] = (REFUSALS_PER_S, REFUSALS_BURST)

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        self.counters = Counters()
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, _Conn] = {}
        self._refused: dict[str, RateLimit] = {}  # by source: its budget of refused tokens
        self._closed = threading.Event()
        super().__init__(address, handler)

    def server_bind(self) -> None:
        """Bound as socketserver binds, without http.server's lookup of the host's full name (a reverse DNS
        query, on the path to a local job's first replica, for a name nothing here reads)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.port

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def serve_in_thread(self, name: str) -> None:
        """Serve on a thread of that name, each request's deadline kept by another."""
        threading.Thread(target=self.serve_forever, args=(SERVE_POLL_S,), name=name, daemon=True).start()
        threading.Thread(target=self._reap, name=f"{name}-deadlines", daemon=True).start()

    def stop(self) -> None:
        self._closed.set()
        self.shutdown()
        self.server_close()

    # --- the caps: connections, per source, and each request's deadline ---

    def process_request(self, request: Any, client_address: Any) -> None:
        source = source_of(client_address)
        now = time.monotonic()
        with self._lock:
            victim = self._make_room(source, now)
            full = any(self._caps(source))
            if not full:
                self._conns[request] = _Conn(source, now, now + self.request_deadline_s)
        if victim is not None:
            self.counters.add(EVICTED)
            _cut(victim)
        if full:  # closed before any byte is read or any thread started
            self.counters.add(SHED)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._leave(request)
            raise

    def connections(self) -> int:
        """The connections the cap counts now: open, and not let go."""
        with self._lock:
            return len(self._live())

    def _live(self) -> list[_Conn]:
        """The connections the caps count (those let go are not); under the lock."""
        return [c for c in self._conns.values() if not c.let_go]

    def _caps(self, source: str) -> tuple[bool, bool]:
        """Whether all connections, and this source's, are at their caps (those let go not counted)."""
        live = self._live()
        return (len(live) >= self.max_connections,
                self.max_per_source is not None and sum(c.source == source for c in live) >= self.max_per_source)

    def _make_room(self, source: str, now: float) -> socket.socket | None:
        """At a cap, one connection is let go for the new one: a fair share, not first come. It is one
        of the source that holds the most connections, however young (a few sources that hold and
        re-open connections as fast as they are cut then only ever cut their own, and a source that
        connects now and then, a reporter, the kubelet's probe or a scraper, always gets in); or the
        newcomer's own when it holds the most itself or is at its own cap, and then only one that has
        sent no request for `stale_s` (a real client's request follows its connection at once), was
        refused and is being drained, or waits idle between two (its client makes a new one): else the
        newcomer is turned away. Of those, one refused or that has sent nothing for `stale_s` first,
        then an idle kept-alive one, the oldest; a connection in the middle of a request never is let
        go (its deadline bounds it)."""
        all_full, source_full = self._caps(source)
        if not (all_full or source_full):
            return None
        live = [(s, c) for s, c in self._conns.items() if not c.let_go]
        counts = Counter(c.source for _, c in live)
        heaviest = max(counts.values(), default=0)
        own = source_full or counts.get(source, 0) >= heaviest
        pool = [(s, c) for s, c in live if (c.source == source if own else counts[c.source] == heaviest)]
        stale = [(c.since, s) for s, c in pool if c.state == "refused" or (c.state == "new" and
                                                                           now - c.since >= self.stale_s)]
        idle = [(c.since, s) for s, c in pool if c.state == "idle"]
        young = [] if own else [(c.since, s) for s, c in pool if c.state == "new"]
        pick = min(stale or idle or young, default=None, key=lambda t: t[0])
        if pick is None:
            return None
        self._conns[pick[1]].let_go = True
        return pick[1]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._leave(request)

    def _leave(self, request: Any) -> None:
        with self._lock:
            self._conns.pop(request, None)

    def waiting(self, request: Any, idle: bool) -> None:
        """The connection waits for a request (`idle`: the next one of a kept-alive connection): the
        deadline of the request starts now."""
        with self._lock:
            conn = self._conns.get(request)
            if conn is not None:
                now = time.monotonic()
                conn.until = now + self.request_deadline_s
                if idle:
                    conn.state, conn.since = "idle", now

    def began(self, request: Any) -> None:
        """A request's line and headers have come: the connection is busy (never let go for another)."""
        with self._lock:
            conn = self._conns.get(request)
            if conn is not None:
                conn.state = "busy"

    def refused(self, request: Any) -> None:
        """The request was answered with a refusal before its body was read: the rest of it may take
        DRAIN_S more (not the whole deadline), and the connection gives way first at a cap."""
        with self._lock:
            conn = self._conns.get(request)
            if conn is not None:
                now = time.monotonic()
                conn.state, conn.until = "refused", min(conn.until, now + DRAIN_S)

    def _reap(self) -> None:
        """Cut the connections whose request is past its deadline: the thread blocked reading one
        wakes up (end of file) and ends."""
        while not self._closed.wait(min(0.25, self.request_deadline_s / 4)):
            now = time.monotonic()
            with self._lock:
                late = [s for s, c in self._conns.items() if c.until <= now and not c.let_go]
                for s in late:
                    self._conns[s].let_go = True
            for s in late:
                self.counters.add(408)
                _cut(s)

    # --- refused token checks, per source (and what else the caller keys them by) ---

    def may_try_token(self, source: str) -> float:
        """0 when this source may have a costly token check; else the seconds until it may."""
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
