"""The dashboard's token kept to its user (issue 30, items 4 and 8), over `torchjob ui` run as a user
runs it: the cookie is a read-only key of its own (never the token), actions need the token in the
header, a foreign Host is refused, no Referer leaves a page, a token of any characters is a 403 (not
a 500 with a traceback), and `--kube -n NS` acts in NS only (a kubeconfig whose server is not there:
the scope is decided before any call to a cluster). The browser is opened on a 0600 file, not the URL:
tests/ui/test_docs_dashboard.py."""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ui.conftest import Dashboard, Page

Call = tuple[int, dict[str, str], bytes]


def call(d: Dashboard, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Call:
    """One request as a client sends it, headers as given (http.client: the Host and the bytes we say)."""
    u = urllib.parse.urlsplit(d.base)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host="Host" in (headers or {}))
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def cookie_of(headers: dict[str, str]) -> tuple[str, str]:
    name, _, rest = headers["set-cookie"].partition("=")
    return name, rest.split(";")[0]


def test_the_cookie_is_a_read_key_of_its_own_and_actions_need_the_header(
        tmp_path: Path, dashboard: Callable[..., Dashboard]) -> None:
    d = dashboard(tmp_path)
    code, headers, _ = call(d, f"/?token={d.token}")
    assert code == 200
    name, value = cookie_of(headers)
    assert value and value != d.token and d.token not in headers["set-cookie"]
    assert "httponly" in headers["set-cookie"].lower() and "samesite=strict" in headers["set-cookie"].lower()
    # the cookie reads
    code, _, body = call(d, "/api/jobs", headers={"Cookie": f"{name}={value}"})
    assert code == 200 and json.loads(body)["jobs"] == []
    # the token as a cookie (what another service on 127.0.0.1 would have received before) does not
    code, _, _ = call(d, "/api/jobs", headers={"Cookie": f"{name}={d.token}"})
    assert code == 403
    # an action: neither the cookie nor the query is enough; the header is
    for how in ({"Cookie": f"{name}={value}"}, {}):
        code, _, body = call(d, f"/api/jobs/-/x/suspend?token={d.token}", "POST", how)
        assert code == 403 and b"X-Torchjob-Token header" in body
    code, _, body = call(d, "/api/jobs/-/x/suspend", "POST", {"X-Torchjob-Token": d.token})
    assert code == 404 and json.loads(body)["error"].startswith("no job named 'x'")


def test_no_referrer_and_a_foreign_host_is_refused(tmp_path: Path, dashboard: Callable[..., Dashboard]) -> None:
    d = dashboard(tmp_path)
    port = urllib.parse.urlsplit(d.base).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        code, headers, _ = call(d, f"/?token={d.token}", headers={"Host": host})
        assert code == 200 and headers["referrer-policy"] == "no-referrer", host
    code, headers, _ = call(d, "/api/jobs")  # a refusal carries it too
    assert code == 403 and headers["referrer-policy"] == "no-referrer"
    # a name of another site that resolves to 127.0.0.1 (DNS rebinding): refused, token or not
    for host in (f"evil.example:{port}", "evil.example"):
        code, _, body = call(d, f"/api/jobs?token={d.token}", headers={"Host": host})
        assert code == 400 and b"jobs" not in body, host


def test_a_token_of_any_characters_is_refused_without_a_traceback(
        tmp_path: Path, dashboard: Callable[..., Dashboard]) -> None:
    d = dashboard(tmp_path)
    for path, headers in ((f"/api/jobs?token={urllib.parse.quote('é' * 48)}", {}),
                          ("/api/jobs", {"X-Torchjob-Token": "\u00e9" * 48}),
                          ("/api/jobs/-/x/delete", {"X-Torchjob-Token": "\u00ff"})):
        code, _, body = call(d, path, "POST" if path.endswith("delete") else "GET", headers)
        assert code == 403, (path, code, body)
    d.stop()
    assert d.proc.stderr is not None
    err = d.proc.stderr.read()
    assert "Traceback" not in err, err


@pytest.fixture
def absent_cluster(tmp_path: Path) -> str:
    """A kubeconfig whose server does not listen: what the dashboard decides without a cluster."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "absent",
        "clusters": [{"name": "absent", "cluster": {"server": "https://127.0.0.1:9",
                                                    "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "absent", "context": {"cluster": "absent", "user": "u", "namespace": "team-a"}}]}))
    return str(path)


def test_kube_n_acts_in_its_namespace_only(tmp_path: Path, absent_cluster: str,
                                           dashboard: Callable[..., Dashboard]) -> None:
    d = dashboard(tmp_path, "--kube", "-n", "team-a", env={"KUBECONFIG": absent_cluster})
    auth = {"X-Torchjob-Token": d.token}
    for method, path in (("GET", "/api/jobs/team-b/x"), ("GET", "/api/jobs/team-b/x/log?replica=master-0"),
                         ("POST", "/api/jobs/team-b/x/suspend"), ("POST", "/api/jobs/team-b/x/delete")):
        code, _, body = call(d, path, method, auth)
        err = json.loads(body)["error"]
        assert code == 403, (path, code, err)
        assert "namespace 'team-b' is not served here" in err and "torchjob ui --kube -n team-b" in err, err
    # its own namespace goes to the cluster (absent here: the page says so)
    code, _, body = call(d, "/api/jobs/team-a/x", headers=auth)
    assert code == 502, body


def test_every_namespace_keeps_a_bounded_number_of_runtimes(absent_cluster: str) -> None:
    from torchjob.connect import ALL_NAMESPACES, Target
    from torchjob.ui.source import RUNTIMES, OutOfScope, Source

    source = Source(Target(kube=True, kubeconfig=absent_cluster, namespace=ALL_NAMESPACES))
    for i in range(RUNTIMES * 3):
        with pytest.raises(Exception) as e:  # the absent cluster's refusal, whichever kind
            source.job(f"ns-{i}", "x")
        assert not isinstance(e.value, OutOfScope)
    assert len(source._runtimes) == RUNTIMES
    with pytest.raises(OutOfScope, match="needs the job's namespace"):
        source.job("", "x")
    scoped: Any = Source(Target(kube=True, kubeconfig=absent_cluster, namespace="team-a"))
    with pytest.raises(OutOfScope):
        scoped.job("team-b", "x")
    assert scoped._runtimes == {}  # refused before any runtime was made


def test_the_browser_opened_on_the_redirect_file_lands_on_the_dashboard(tmp_path: Path, page: Page) -> None:
    """What `torchjob ui` hands the browser (a file:// URL of the 0600 file, $BROWSER recording it),
    opened in chromium: it goes on to the printed URL, and the jobs page works there."""
    import os
    import subprocess
    import sys

    from tests.ui.conftest import REPO, wait

    opened, browser = tmp_path / "opened", tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "torchjob", "ui"], cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TORCHJOB_HOME": str(tmp_path / "home"), "BROWSER": str(browser)})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        arg = wait(lambda: opened.exists() and opened.read_text().strip(), what="the browser asked to open a file")
        assert arg.startswith("file://") and url.partition("?token=")[2] not in arg
        p = page.page
        p.goto(arg)
        p.wait_for_url(re.compile(re.escape(url)), timeout=60_000)
        p.locator("#count", has_text="0 of 0 jobs").wait_for()
        # the event stream opens on its own, after the list's fetch or before it (a landing run read
        # "connecting" once): waited for, bounded, never read once
        p.locator("#live", has_text=re.compile(r"^live$")).wait_for(timeout=60_000)
    finally:
        proc.terminate()
        proc.wait(10)
    assert page.errors == []
