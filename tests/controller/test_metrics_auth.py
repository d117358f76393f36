"""`/metrics` for authorized scrapers only (issue 19, finding 4): the token authenticated by a
TokenReview, its user authorized by a SubjectAccessReview for `get /metrics`, as controller-runtime
serves its metrics; `/healthz` and `/readyz` open. Against a fake API on an event loop of its own, in
milliseconds; tests/kube/test_operator.py has the same against a real API server."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from torchjob.cli.main import cli
from torchjob.kube.controller.config import OperatorConfig
from torchjob.kube.machinery.health import Health, serve_http
from torchjob.kube.machinery.scrapers import ScraperAuth


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
    health.ready = True
    server = serve_http(0, health, ScraperAuth(api, loop).check)
    port = server.server_address[1]
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
        assert get(port, "/healthz")[:2] == (200, "ok") and get(port, "/readyz")[:2] == (200, "ok")
    finally:
        server.shutdown()
        server.server_close()


def test_the_operator_checks_scrapers_unless_told_not_to() -> None:
    assert OperatorConfig().metrics_auth is True
    from click.testing import CliRunner

    text = CliRunner().invoke(cli, ["operator", "--help"]).output
    assert "--metrics-auth / --no-metrics-auth" in text
    server = serve_http(0, Health())  # --no-metrics-auth: open, as before
    try:
        assert get(server.server_address[1], "/metrics")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_the_install_manifests_let_the_operator_review_scrapers_and_make_a_role_to_bind_them_to() -> None:
    from torchjob.kube.objects.install import METRICS_READER, RULES, manifests

    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]} in RULES
    assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in RULES
    reader = next(o for o in manifests() if o["kind"] == "ClusterRole" and o["metadata"]["name"] == METRICS_READER)
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
