"""docs/guide/dashboard.md: each block of the page runs here, read out of the page (so the two
cannot drift); the --kube block runs in tests/kube/test_ui_kube.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.ui.conftest import REPO

PAGE = REPO / "docs" / "guide" / "dashboard.md"


def block(test: str) -> str:
    """The fenced block right after `<!-- tested by: ...::TEST -->` in the page."""
    m = re.search(rf"<!-- tested by: [^>]*::{test} -->\n```[a-z]*\n(.*?)```", PAGE.read_text(), re.S)
    assert m, f"no block tested by {test} in {PAGE}"
    return m.group(1)


def torchjob_argv(line: str) -> list[str]:
    argv = shlex.split(line)
    assert argv[0] == "torchjob"
    return [sys.executable, "-m", "torchjob", *argv[1:]]


def test_torchjob_ui_prints_its_url_first_and_opens_the_browser(tmp_path: Path) -> None:
    """`torchjob ui` as the page shows it; $BROWSER (which Python's webbrowser honours) records what
    it is asked to open instead of starting a browser: a 0600 file that sends it on to the URL, never
    the URL (a command line, its token with it, is readable by every local user in /proc)."""
    opened, kept, mode = tmp_path / "opened", tmp_path / "kept.html", tmp_path / "mode"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nf="${{1#file://}}"\nstat -c %a "$f" > {mode}\ncp "$f" {kept}\n'
                       f'echo "$1" > {opened}\n')
    browser.chmod(0o755)
    (line,) = block("test_torchjob_ui_prints_its_url_first_and_opens_the_browser").splitlines()
    proc = subprocess.Popen(torchjob_argv(line), cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TORCHJOB_HOME": str(tmp_path / "home"), "BROWSER": str(browser)})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{48}", url), url
        with urllib.request.urlopen(url, timeout=10) as r:
            assert b"<title>torchjob</title>" in r.read()
        deadline = 50
        while not opened.exists() and deadline:
            import time

            time.sleep(0.1)
            deadline -= 1
        arg = opened.read_text().strip()
        token = url.partition("?token=")[2]
        assert arg.startswith("file:///") and arg.endswith(".html") and token not in arg, arg
        assert mode.read_text().strip() == "600"
        assert f'http-equiv="refresh" content="0;url={url}"' in kept.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    assert not Path(arg.removeprefix("file://")).exists()  # gone with the server


def test_a_host_beyond_loopback_is_served_with_a_warning_and_a_bad_port_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHJOB_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(torchjob_argv("torchjob ui --host 0.0.0.0 --no-browser"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("http://0.0.0.0:")
        assert "warning: --host 0.0.0.0 serves the dashboard beyond this machine" in proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(10)
    bad = subprocess.run(torchjob_argv("torchjob ui --port 70000 --no-browser"), cwd=REPO, text=True,
                         capture_output=True, env=env, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --port 70000 is not a port"), bad.stderr
    assert "Traceback" not in bad.stderr
    local_a = subprocess.run(torchjob_argv("torchjob ui -A --no-browser"), cwd=REPO, text=True,
                             capture_output=True, env=env, timeout=60)
    assert local_a.returncode == 2 and "-A/--all-namespaces needs --kube" in local_a.stderr


@pytest.mark.e2e
def test_the_first_paint_bench_runs_as_the_page_shows() -> None:
    (line,) = block("test_the_first_paint_bench_runs_as_the_page_shows").splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["python", "bench/ui_first_paint.py"]
    out = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, text=True, capture_output=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.returncode == 0, out.stderr
    assert re.search(r"dashboard: rows in view painted\s+\d+ ms", out.stdout), out.stdout
    assert "ratio dashboard rows / list:" in out.stdout
