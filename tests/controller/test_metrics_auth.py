"""`/metrics` for authorized scrapers only (issue 19, finding 4): the token authenticated by a
TokenReview, its user authorized by a SubjectAccessReview for `get /metrics`, as controller-runtime
serves its metrics; `/healthz` and `/readyz` open, on a port of their own. Both listeners behind the
progress endpoint's guard (issue 30, finding 1): per-source caps, a whole-request deadline, a budget of
refused tokens per source; `/metrics` over TLS (finding 2). Against a fake API on an event loop of its
own, in milliseconds; tests/kube/test_operator.py has the same against a real API server."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchjob.cli.main import cli
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.machinery.health import Health, serve_health, serve_metrics
from torchjob.kube.machinery.scrapers import ScraperAuth
from torchjob.kube.progress import tls


class ReviewingApi:
    """Tokens: 'prometheus' (may get /metrics), 'nosy' (authenticated, may not), anything else: unknown."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def review_token(self, token: str, audience: str | None) -> dict[str, Any]:
        self.calls.append(("token", audience))
        if token not in ("prometheus", "nosy"):
            return {"authenticated": False}
        return {"authenticated": True, "user": {"username": f"system:serviceaccount:mon:{token}", "groups": ["g"]}}

    async def review_access(self, user: dict[str, Any], path: str, verb: str) -> bool:
        self.calls.append(("access", (user["username"], path, verb)))
        return user["username"].endswith(":prometheus") and (path, verb) == ("/metrics", "get")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def get(port: int, path: str, token: str | None = None) -> tuple[int, str, dict[str, str]]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def test_metrics_only_for_a_token_allowed_to_get_them_and_health_for_all(loop: asyncio.AbstractEventLoop) -> None:
    api = ReviewingApi()
    health = Health()
    health.synced = True
    server = serve_metrics(0, ScraperAuth(api, loop).check)
    probes = serve_health(0, health)
    port = server.port
    try:
        code, body, headers = get(port, "/metrics")
        assert code == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer") and not api.calls
        assert get(port, "/metrics", "forged")[0] == 401
        code, body, _ = get(port, "/metrics", "nosy")
        assert code == 403 and "torchjob-metrics-reader" in body
        code, body, _ = get(port, "/metrics", "prometheus")
        assert code == 200 and "# HELP" in body
        assert ("access", ("system:serviceaccount:mon:prometheus", "/metrics", "get")) in api.calls
        assert ("token", None) in api.calls  # the API server's own audience, as a ServiceAccount token has
        reviews = len(api.calls)
        assert get(port, "/metrics", "prometheus")[0] == 200 and len(api.calls) == reviews  # cached
        assert get(probes.port, "/healthz")[:2] == (200, "ok") and get(probes.port, "/readyz")[:2] == (200, "ok")
        assert get(port, "/healthz")[0] == 404 and get(probes.port, "/metrics")[0] == 404  # each on its own port
    finally:
        server.stop()
        probes.stop()


def test_the_operator_checks_scrapers_unless_told_not_to() -> None:
    assert OperatorConfig().metrics_auth is True
    from click.testing import CliRunner

    text = CliRunner().invoke(cli, ["operator", "--help"]).output
    assert "--metrics-auth / --no-metrics-auth" in text
    server = serve_metrics(0)  # --no-metrics-auth: open, as before
    try:
        assert get(server.port, "/metrics")[0] == 200
    finally:
        server.stop()


def test_the_install_manifests_let_the_operator_review_scrapers_and_make_a_role_to_bind_them_to() -> None:
    from torchjob.kube.objects.install import METRICS_READER, RULES, manifests

    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]} in RULES
    assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in RULES
    reader = next(o for o in manifests() if o["kind"] == "ClusterRole" and o["metadata"]["name"] == METRICS_READER)
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def trickle(source: str, port: int) -> socket.socket:
    """A connection from `source` (an address of 127/8) that sends one byte of a request and no more."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"G")
    return s


def test_a_trickle_of_connections_from_several_sources_does_not_fail_the_probes() -> None:
    """Issue 30, finding 1: 32 connections sending a header byte now and then made /healthz fail (and
    the kubelet restart the operator). Five sources holding forty such connections: the kubelet's
    probe, from an address of its own, is answered at once; the trickles are cut at the deadline."""
    health = Health()
    health.synced = True
    probes = serve_health(0, health)
    held = []
    try:
        for n in range(40):
            held.append(trickle(f"127.0.0.{2 + n % 5}", probes.port))
        time.sleep(1.2)  # past the guard's grace for a connection that has sent no request
        start = time.monotonic()
        for _ in range(5):
            assert get(probes.port, "/healthz")[:2] == (200, "ok")
            assert get(probes.port, "/readyz")[:2] == (200, "ok")
        assert time.monotonic() - start < 2.0
        assert probes.connections() <= probes.max_connections
        end = time.monotonic() + probes.request_deadline_s + 2
        for s in held:  # every trickle is cut by its whole-request deadline (or was never taken)
            s.settimeout(max(0.1, end - time.monotonic()))
            try:
                assert s.recv(1024) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in held:
            s.close()
        probes.stop()


def test_sources_that_reopen_connections_as_fast_as_they_are_cut_do_not_fail_the_probes() -> None:
    """The flood of bench/progress_flood.py: eight sources, each holding silent connections and opening
    a new one as soon as one is cut, far past the caps. The probe (one connection now and then, from an
    address of its own) is answered every time: at a cap the connection let go is one of the source
    that holds the most, never the newcomer's."""
    health = Health()
    health.synced = True
    probes = serve_health(0, health)
    stop = time.monotonic() + 4.0

    def churn(source: str) -> None:
        held: list[socket.socket] = []
        while time.monotonic() < stop:
            for s in list(held):
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                s.close()
                held.remove(s)
            while len(held) < 12:
                try:
                    held.append(trickle(source, probes.port))
                except OSError:
                    break
            time.sleep(0.01)
        for s in held:
            s.close()

    threads = [threading.Thread(target=churn, args=(f"127.0.0.{2 + n}",)) for n in range(8)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        answers = []
        while time.monotonic() < stop - 0.5:
            try:
                answers.append(get(probes.port, "/healthz")[0])
            except OSError as e:
                answers.append(type(e).__name__)
            time.sleep(0.1)
        assert answers and set(answers) == {200}, answers
    finally:
        for t in threads:
            t.join()
        probes.stop()


def test_a_source_of_made_up_tokens_spends_a_bounded_number_of_reviews(loop: asyncio.AbstractEventLoop) -> None:
    """A flood of made-up tokens from one address: TokenReviews stop at the source's budget of refused
    tokens (429 after it, with Retry-After), while a scraper from another address still gets in."""
    api = ReviewingApi()
    server = serve_metrics(0, ScraperAuth(api, loop).check)
    try:
        codes = [get(server.port, "/metrics", f"made-up-{n}") for n in range(60)]
        assert {c for c, _, _ in codes[:20]} == {401}
        assert codes[-1][0] == 429 and int(codes[-1][2]["Retry-After"]) >= 1
        assert len(api.calls) <= 25, len(api.calls)  # the burst, and what the budget refilled meanwhile
        other = socket.socket()  # the real scraper, from its own address
        other.bind(("127.0.0.9", 0))
        other.connect(("127.0.0.1", server.port))
        other.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Bearer prometheus\r\n\r\n")
        answer = b""
        while chunk := other.recv(65536):
            answer += chunk
        other.close()
        assert answer.startswith(b"HTTP/1.0 200")
    finally:
        server.stop()


def test_metrics_over_tls_with_the_operator_s_ca(tmp_path: Path) -> None:
    """Issue 30, finding 2: a scraper's token crosses the pod network encrypted. The certificate names
    the metrics Service; a client that trusts the operator's CA (ca.crt of its Secret) gets /metrics; a
    plain HTTP request gets no answer."""
    pair = tls.generate(tls.hosts_for("torchjob-operator-metrics", "torchjob-system"))
    server = serve_metrics(0, tls=pair.context())
    try:
        ca = tmp_path / "ca.crt"
        ca.write_text(pair.ca_pem)
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(f"https://localhost:{server.port}/metrics", timeout=5, context=context) as resp:
            assert resp.status == 200 and b"# HELP" in resp.read()
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    finally:
        server.stop()


def test_ready_answers_for_the_process_not_for_leading() -> None:
    """Issue 34: a candidate waiting for the Lease is ready once the API server answers; a leader once
    its caches are synced; none that stops, or that has not heard from the API server for the window."""
    health = Health(contact_window_s=0.3)
    health.waiting = True
    assert health.check() == "the API server has not answered yet"
    health.contact()
    assert health.ready
    time.sleep(0.4)
    assert not health.ready and "has not answered for more than" in (health.check() or "")
    health.contact()
    health.waiting = False  # it leads now: not ready until its caches are synced
    assert health.check() == "caches not synced yet"
    health.synced = True
    assert health.ready
    health.stopping = True
    assert health.check() == "stopping"
