"""The progress endpoint against bad clients (issue 19, findings 1 and 2): nesting that would blow
the JSON decoder's stack, slow and idle connections, bodies held back, tokens at a high rate. Each
case on a real endpoint in this process (the local one: the same server the operator runs)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from torchjob.local.supervisor.progress import LocalEndpoint
from torchjob.progress.protocol import BadReport, parse


@pytest.fixture
def endpoint() -> Any:
    ep = LocalEndpoint("j", lambda *a: None).start()
    yield ep
    ep.stop()


def path(ep: LocalEndpoint) -> str:
    return ep.url.split(str(ep.server.port), 1)[1]


def post(ep: LocalEndpoint, body: bytes, token: str | None, timeout: float = 5.0, source: str = "127.0.0.1",
         conn: http.client.HTTPConnection | None = None) -> tuple[int, dict[str, Any]]:
    """One POST (on `conn`, kept alive, when given)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", ep.server.port, timeout=timeout,
                                              source_address=(source, 0))
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        conn.request("POST", path(ep), body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        if own:
            conn.close()


def silent(ep: LocalEndpoint, source: str = "127.0.0.1") -> socket.socket:
    """A connection that sends nothing (yet)."""
    return socket.create_connection(("127.0.0.1", ep.server.port), timeout=5, source_address=(source, 0))


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (what it sends before is read)."""
    sock.settimeout(0.05)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


DEEP = b'{"step": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"  # 60 KB: under the body limit


def test_a_body_nested_too_deeply_is_a_bad_report() -> None:
    with pytest.raises(BadReport, match="nested too deeply"):
        parse(DEEP)


def test_a_body_nested_too_deeply_is_answered_422_and_the_endpoint_goes_on(endpoint: LocalEndpoint,
                                                                          tmp_path: Path) -> None:
    token = endpoint.token("master-0", 0)
    code, body = post(endpoint, DEEP, token)
    assert (code, body["reason"]) == (422, "Invalid") and "nested too deeply" in body["message"]
    assert post(endpoint, json.dumps({"step": 3}).encode(), token)[0] == 200


def test_a_failure_of_ours_is_answered_500_not_a_dropped_connection(endpoint: LocalEndpoint,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(reporter: Any) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(endpoint, "book", broken)
    code, body = post(endpoint, json.dumps({"step": 3}).encode(), endpoint.token("master-0", 0))
    assert (code, body["reason"]) == (500, "InternalError")


# --- finding 1: connections, deadlines, the token before the body, refused tokens ---------------


def test_a_client_trickling_its_request_is_cut_at_the_whole_request_deadline(endpoint: LocalEndpoint) -> None:
    endpoint.server.request_deadline_s = 1.0
    sock = silent(endpoint)
    sock.sendall(f"POST {path(endpoint)} HTTP/1.1\r\n".encode())
    start = time.monotonic()
    cut = False
    for _ in range(12):  # a byte every 0.25 s: each read is quick, the request never ends
        try:
            sock.sendall(b"X")
        except OSError:
            cut = True
            break
        if closed_within(sock, 0.25):
            cut = True
            break
    assert cut and time.monotonic() - start < 2.5
    assert post(endpoint, json.dumps({"step": 1}).encode(), endpoint.token("master-0", 0))[0] == 200


def test_connections_past_a_sources_cap_are_closed_at_once_and_a_report_still_lands(
        endpoint: LocalEndpoint) -> None:
    endpoint.server.max_per_source = 4
    held = [silent(endpoint, "127.0.0.2") for _ in range(10)]
    try:
        closed = [closed_within(s, 0.3) for s in held]
        assert closed.count(True) == 6 and closed[:4] == [False] * 4, closed
        start = time.monotonic()
        assert post(endpoint, json.dumps({"step": 1}).encode(), endpoint.token("master-0", 0))[0] == 200
        assert time.monotonic() - start < 1.0
    finally:
        for s in held:
            s.close()


def test_past_the_connection_cap_an_idle_kept_alive_connection_gives_way_and_a_busy_one_never(
        endpoint: LocalEndpoint) -> None:
    endpoint.server.max_connections = 2
    endpoint.server.stale_s = 60  # a connection with no request yet is not let go for being slow, here
    token = endpoint.token("master-0", 0)
    kept = [http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=5) for _ in range(2)]
    for i, conn in enumerate(kept):
        assert post(endpoint, json.dumps({"step": i + 1}).encode(), token, conn=conn)[0] == 200
    time.sleep(1.1)  # (the job's rate: one report a second per replica attempt past its burst)
    assert post(endpoint, json.dumps({"step": 3}).encode(), token)[0] == 200  # the oldest idle one went
    # That post's own connection, closed by its client, is counted until its thread has read the end
    # (seen in a whole-suite run: a busy one was refused while it still counted).
    for _ in range(100):
        if endpoint.server.connections() == 1:
            break
        time.sleep(0.05)
    assert endpoint.server.connections() == 1  # kept[1], idle
    busy = [silent(endpoint) for _ in range(2)]  # accepted: not yet a request, never let go
    try:
        assert not any(closed_within(s, 0.3) for s in busy)
        assert closed_within(silent(endpoint), 0.3)  # the cap, with no idle connection to let go
    finally:
        for s in busy:
            s.close()
        for conn in kept:
            conn.close()


def test_the_token_is_checked_before_the_body_is_read(endpoint: LocalEndpoint, monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    checked = threading.Event()
    real = endpoint.authorize

    def authorize(*args: Any) -> Any:
        checked.set()
        return real(*args)

    monkeypatch.setattr(endpoint, "authorize", authorize)
    sock = silent(endpoint)
    sock.sendall(f"POST {path(endpoint)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer made.up.token\r\n"
                 "Content-Length: 1000\r\n\r\n".encode())  # and no body
    sock.settimeout(2.0)
    answer = sock.recv(4096)  # answered without waiting for the body
    assert checked.is_set() and answer.startswith(b"HTTP/1.1 403")
    sock.close()


def test_made_up_tokens_from_the_reporters_own_address_never_hold_its_valid_reports_back(
        endpoint: LocalEndpoint) -> None:
    """Issue 43, item 6: a local token is an HMAC, checked at no cost, so no budget of refused tokens
    stands before it: made-up tokens from loopback (where every replica reports from) are each refused
    403, never 429, and the job's own token from the same address is let through at once (a budget
    per address answered it 429 until the job was declared stalled)."""
    endpoint.server.refusals = (0.5, 5)
    good = json.dumps({"step": 1}).encode()
    codes = [post(endpoint, good, f"tj1.master-0.0.{i:064x}")[0] for i in range(40)]
    assert set(codes) == {403}, codes
    assert post(endpoint, good, endpoint.token("master-0", 0))[0] == 200


def test_a_refused_client_trickling_its_body_holds_its_connection_a_moment_not_the_deadline(
        endpoint: LocalEndpoint) -> None:
    """A request refused before its body was read gets DRAIN_S to send the rest, not the whole
    request deadline, and its connection gives way first at the cap: slow sockets with made-up
    tokens cannot hold the endpoint's threads."""
    endpoint.server.max_connections = 4
    held = []
    for _ in range(4):
        sock = silent(endpoint)
        sock.sendall(f"POST {path(endpoint)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer made.up\r\n"
                     "Content-Length: 60000\r\n\r\n".encode())
        sock.settimeout(2.0)
        assert sock.recv(4096).startswith(b"HTTP/1.1 403")
        held.append(sock)
    try:
        start = time.monotonic()
        assert post(endpoint, json.dumps({"step": 1}).encode(), endpoint.token("master-0", 0))[0] == 200
        assert time.monotonic() - start < 1.0  # one refused connection gave way at once
        assert all(closed_within(s, 2.5) for s in held[1:])  # DRAIN_S (1 s), not the 10 s deadline
    finally:
        for s in held:
            s.close()


def test_a_local_token_whose_attempt_is_not_ascii_digits_is_refused(endpoint: LocalEndpoint) -> None:
    assert post(endpoint, json.dumps({"step": 1}).encode(), "tj1.master-0.².abc")[0] == 403


def test_at_the_cap_a_connection_that_sent_nothing_gives_way_before_a_reporters_kept_alive_one(
        endpoint: LocalEndpoint) -> None:
    """A flood of silent connections from many sources cannot take a reporter's place: at the cap the
    oldest one that has sent no request for stale_s goes first (a real client's request follows its
    connection at once); the reporter's kept-alive connection goes only when there is none."""
    endpoint.server.max_connections, endpoint.server.stale_s = 2, 0.3
    token = endpoint.token("master-0", 0)
    reporter = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=5)
    assert post(endpoint, json.dumps({"step": 1}).encode(), token, conn=reporter)[0] == 200
    quiet = silent(endpoint, "127.0.0.7")
    time.sleep(0.5)
    newcomer = silent(endpoint, "127.0.0.8")  # at the cap: the quiet one goes
    try:
        assert closed_within(quiet, 0.5) and not closed_within(newcomer, 0.2)
        time.sleep(1.0)  # (the job's rate)
        assert post(endpoint, json.dumps({"step": 2}).encode(), token, conn=reporter)[0] == 200  # still its own
    finally:
        for s in (quiet, newcomer):
            s.close()
        reporter.close()


def test_at_the_cap_the_sources_holding_the_most_give_way_to_a_reporter_however_young_theirs(
        endpoint: LocalEndpoint) -> None:
    """A fair share, not first come: sources that fill the cap with connections re-opened as fast as
    they are cut (always younger than stale_s) give way to a reporter's new connection (one of the
    source holding the most goes), and one of them opening more cuts only its own, never the
    reporter's kept-alive connection (first come turned the reporter away, then cut its connection)."""
    endpoint.server.max_connections, endpoint.server.max_per_source = 5, 4
    endpoint.server.stale_s = 30  # every flood connection is younger than that, however slow this machine
    token = endpoint.token("master-0", 0)
    flood = [silent(endpoint, "127.0.0.9") for _ in range(3)] + [silent(endpoint, "127.0.0.10") for _ in range(2)]
    reporter = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=5)
    try:
        # at the cap, every connection younger than stale_s: the oldest of 127.0.0.9's (3, the most) goes
        assert post(endpoint, json.dumps({"step": 1}).encode(), token, conn=reporter)[0] == 200
        assert closed_within(flood[0], 0.5) and not any(closed_within(s, 0.1) for s in flood[1:])
        flood.append(silent(endpoint, "127.0.0.9"))  # 127.0.0.9 holds as many as anyone: only its own
        assert closed_within(flood[-1], 0.5)  # nothing of its own waits long enough: turned away
        assert not any(closed_within(s, 0.1) for s in flood[1:-1])
        time.sleep(1.0)  # (the job's rate)
        assert post(endpoint, json.dumps({"step": 2}).encode(), token, conn=reporter)[0] == 200  # still its own
    finally:
        for s in flood:
            s.close()
        reporter.close()


def test_the_inplace_path_is_a_clusters_only_and_status_takes_no_get(endpoint: LocalEndpoint) -> None:
    """Beside `status`, the `inplace` path (a pod restarting in place asks its verdict, GET, or reports an
    attempt's end, POST) is the operator's: a local endpoint restarts no pod in place (404, after the
    token is checked: 403 without one); GET on `status` is 405."""
    token = endpoint.token("master-0", 0)
    conn = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=5)
    inplace = path(endpoint).removesuffix("/status") + "/inplace"
    try:
        for method, where, auth, code in (("GET", inplace, token, 404), ("POST", inplace, token, 404),
                                          ("GET", inplace, None, 403), ("GET", path(endpoint), token, 405)):
            conn.request(method, where, b"{}" if method == "POST" else None,
                         {"Authorization": f"Bearer {auth}"} if auth else {})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            assert (resp.status, answer["code"]) == (code, code), (method, where, answer)
            if code == 404:
                assert answer["message"] == "this endpoint restarts no pod in place"
            conn.close()
    finally:
        conn.close()


def test_an_endpoint_stops_at_once() -> None:
    """A local job's supervisor stops its endpoint last (every job's end waited for it): its serving loop looks
    whether to stop every 0.05 s, not socketserver's 0.5 s (a stop took 0-0.5 s, 0.33 s in a profile)."""
    took = []
    for _ in range(5):
        ep = LocalEndpoint("j", lambda *a: None)
        ep.start()
        time.sleep(0.05)
        t = time.monotonic()
        ep.stop()
        took.append(time.monotonic() - t)
    assert max(took) < 0.2, took
