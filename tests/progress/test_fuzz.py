"""A fuzz of the progress protocol (issue 19): any body `parse` is given is a report or a BadReport that
names the field, quickly; any request the endpoint is sent (method, path, headers, body; a real token
or not) is answered with a status, never dropped, never a 500. How many inputs: tests/fuzz.py."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import ANSWER_S, examples
from torchjob.local.supervisor.progress import LocalEndpoint
from torchjob.progress.protocol import BadReport, Report, parse

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=80),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                                  max_size=5), max_leaves=30)
NEAR = st.fixed_dictionaries({}, optional={
    "step": JSON, "total": JSON, "metrics": st.one_of(JSON, st.dictionaries(st.text(max_size=70), JSON, max_size=4)),
    "trainerStatus": st.one_of(JSON, st.fixed_dictionaries({}, optional={
        "progressPercentage": JSON, "estimatedRemainingSeconds": JSON, "lastUpdatedTime": JSON,
        "metrics": st.one_of(JSON, st.lists(st.fixed_dictionaries({}, optional={"name": JSON, "value": JSON}),
                                            max_size=4))}))})
BODIES = st.one_of(JSON.map(lambda v: json.dumps(v).encode()), NEAR.map(lambda v: json.dumps(v).encode()),
                   st.binary(max_size=300),
                   st.integers(1, 40_000).map(lambda n: b"[" * n + b"]" * n),
                   st.integers(1, 20_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n))
FIELDS = ("step", "total", "metrics", "trainerStatus", "body", "report")


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES)
def test_any_body_is_a_report_or_a_bad_report_naming_the_field(body: bytes) -> None:
    start = time.monotonic()
    try:
        assert isinstance(parse(body), Report)
    except BadReport as e:
        assert any(f in str(e) for f in FIELDS), str(e)
    assert time.monotonic() - start < ANSWER_S


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    ep = LocalEndpoint("fuzz", lambda *a: None).start()
    ep.reports.limit.rate, ep.reports.limit.burst = 1e6, 1e6  # the job's rate limit is not what is fuzzed
    yield ep
    ep.stop()


OTHER = "/apis/torchjob.dev/v1/namespaces/default/torchjobs/other/status"
PATHS = st.one_of(st.just("{good}"), st.sampled_from(["/", "/apis", OTHER, "{good}?x=1", "{good}/", "//{good}", "*"]),
                  st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40).map(
                      lambda t: "/" + t))
HEADERS = st.dictionaries(st.sampled_from(["Content-Type", "X-Junk", "Transfer-Encoding", "Expect", "Connection",
                                           "Authorization"]),
                          st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
                          max_size=3)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["POST", "POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"]), PATHS, HEADERS,
       st.one_of(BODIES, NEAR.map(lambda v: json.dumps(v).encode())), st.booleans())
def test_any_request_gets_an_answer_never_a_500_or_a_dropped_connection(
        endpoint: LocalEndpoint, method: str, path: str, headers: dict[str, str], body: bytes, token: bool) -> None:
    good = endpoint.url.split(str(endpoint.server.port), 1)[1]
    headers = {k: v for k, v in headers.items() if k not in ("Transfer-Encoding", "Expect")}  # (client-side framing)
    if token:
        headers["Authorization"] = f"Bearer {endpoint.token('master-0', 0)}"
    conn = http.client.HTTPConnection("127.0.0.1", endpoint.server.port, timeout=ANSWER_S)
    start = time.monotonic()
    try:
        conn.request(method, path.replace("{good}", good), body=body[:70_000], headers=headers)
        resp = conn.getresponse()
        data: Any = resp.read()
    finally:
        conn.close()
    assert time.monotonic() - start < ANSWER_S
    assert resp.status != 500 and (200 <= resp.status < 300 or 400 <= resp.status < 600), resp.status
    if resp.status >= 400 and data:
        assert json.loads(data)["kind"] == "Status"
