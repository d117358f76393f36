"""The progress endpoint against bad clients (issue 19, findings 1 and 2): nesting that would blow
the JSON decoder's stack, slow and idle connections, bodies held back, tokens at a high rate. Each
case on a real endpoint in this process (the local one: the same server the operator runs)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from torchjob.local.progress import LocalEndpoint
from torchjob.progress.protocol import BadReport, parse


@pytest.fixture
def endpoint() -> Any:
    ep = LocalEndpoint("j", lambda *a: None).start()
    yield ep
    ep.stop()


def post(ep: LocalEndpoint, body: bytes, token: str | None, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", ep.server.port, timeout=timeout)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        conn.request("POST", ep.url.split(str(ep.server.port), 1)[1], body, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


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
