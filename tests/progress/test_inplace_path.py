"""The endpoint's `inplace` path (a pod restarting in place asks its verdict, or reports an attempt's
end: kube/inpod/torchjob_inplace.py) against bad bodies and a client asking too often (issue 43, item
5), on a real endpoint in this process whose receiver answers that path as the operator's does."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from torchjob.local.supervisor.progress import LocalEndpoint
from torchjob.progress import server as server_module

DEEP = b"[" * 30_000 + b"]" * 30_000  # 60 KB: under the body limit


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Any:
    ep = LocalEndpoint("j", lambda *a: None)
    told: list[Any] = []

    def in_place(reporter: Any, ended: Any) -> dict[str, Any]:
        told.append(ended)
        if ended is not None and not isinstance(ended, dict):
            raise ValueError("the body must be a JSON object")
        return {"attempt": reporter.attempt, "stop": None, "release": False}

    monkeypatch.setattr(ep, "in_place", in_place, raising=False)
    ep.told = told
    ep.start()
    yield ep
    ep.stop()


def ask(ep: LocalEndpoint, conn: http.client.HTTPConnection, method: str, body: bytes | None = None,
        replica: str = "master-0") -> tuple[int, dict[str, Any], str | None]:
    where = ep.url.split(str(ep.server.port), 1)[1].removesuffix("/status") + "/inplace"
    conn.request(method, where, body, {"Authorization": f"Bearer {ep.token(replica, 0)}",
                                       **({"Content-Type": "application/json"} if body else {})})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"{}"), resp.getheader("Retry-After")


def test_a_body_nested_too_deeply_is_answered_422_and_the_path_goes_on(endpoint: LocalEndpoint) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=10)
    try:
        code, body, _ = ask(endpoint, conn, "POST", DEEP)
        assert (code, body["reason"], body["message"]) == (422, "Invalid", "the body is nested too deeply")
        assert ask(endpoint, conn, "GET")[:2] == (200, {"attempt": 0, "stop": None, "release": False})
    finally:
        conn.close()


def test_a_replica_asking_too_often_is_answered_429_and_another_is_not(endpoint: LocalEndpoint) -> None:
    """A burst of IN_PLACE_BURST, then IN_PLACE_RATE a second (30 asked at once: the last are refused)."""
    assert (server_module.IN_PLACE_BURST, server_module.IN_PLACE_RATE) == (20, 10)
    conn = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=10)
    try:
        answers = [ask(endpoint, conn, "GET") for _ in range(30)]
        code, body, retry = ask(endpoint, conn, "POST", json.dumps({"attempt": 0}).encode())
        assert [a[0] for a in answers[:20]] == [200] * 20 and [a[0] for a in answers].count(429) >= 5
        assert (code, body["reason"], retry) == (429, "TooManyRequests", "1")
        assert len(endpoint.told) == 30 - [a[0] for a in answers].count(429)  # the refused never reach it
        assert ask(endpoint, conn, "GET", replica="worker-0")[0] == 200  # per replica
    finally:
        conn.close()


def test_a_get_asking_to_wait_is_held_by_the_receiver_and_answered_as_the_verdict_is_then(
        endpoint: LocalEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """`?wait=S&seen=A,STOP,RELEASE` (the entry point's long poll): the receiver's wait_in_place is asked to
    hold it (at most LONG_POLL_MAX_S) only while the verdict is the one the entry point holds, and the
    answer is the verdict after the wait; a query it cannot read is answered at once."""
    asked: list[Any] = []
    verdict = {"attempt": 0, "stop": None, "release": False}
    monkeypatch.setattr(endpoint, "in_place", lambda reporter, ended: dict(verdict), raising=False)

    def wait_in_place(reporter: Any, seen: Any, timeout_s: float) -> bool:
        asked.append((seen, timeout_s))
        verdict["stop"] = 0  # the operator asked the attempt to stop meanwhile
        return True

    monkeypatch.setattr(endpoint, "wait_in_place", wait_in_place, raising=False)
    conn = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=10)
    try:
        where = endpoint.url.split(str(endpoint.server.port), 1)[1].removesuffix("/status") + "/inplace"

        def get(query: str) -> Any:
            token = endpoint.token("master-0", 0)
            conn.request("GET", f"{where}?{query}", headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())

        assert get("wait=30&seen=0,,0") == (200, {"attempt": 0, "stop": 0, "release": False})
        assert asked == [((0, None, False), server_module.LONG_POLL_MAX_S)]
        assert get("wait=1&seen=0,,0")[1]["stop"] == 0 and len(asked) == 1  # it differs already: no wait
        verdict["stop"] = None
        for unread in ("wait=1", "wait=x&seen=0,,0", "wait=1&seen=0,0", "wait=nan&seen=0,,0", "wait=-1&seen=0,,0"):
            assert get(unread)[0] == 200 and len(asked) == 1, unread
    finally:
        conn.close()
