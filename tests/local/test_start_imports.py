"""What a local job's start loads before its first replica starts: the replicas wait on it (bench/launch.py,
issue 46). rich (the live bar, only on a terminal) and pathspec (a shipped script's .gitignore rules, only
with --kube) are loaded where they are used; certifi's bundle is found without importing it, and the
progress endpoint binds without a reverse DNS lookup."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs `torchjob run -q JOB` in this interpreter and writes the modules loaded when the first replica's
# process is made.
PROBE = """
import json, subprocess, sys
out, job = sys.argv[1], sys.argv[2]
first = []
made = subprocess.Popen.__init__
def init(self, *args, **kwargs):
    if not first:
        first.append(sorted(sys.modules))
    made(self, *args, **kwargs)
subprocess.Popen.__init__ = init
from torchjob.cli.main import main
sys.argv = ["torchjob", "run", "-q", job]
try:
    main()
finally:
    json.dump(first[0] if first else None, open(out, "w"))
"""


def test_a_local_job_starts_its_replicas_before_loading_rich_or_pathspec(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    replica = {"replicas": 1, "restartPolicy": "Never",
               "template": {"spec": {"containers": [{"name": "pytorch", "command": [sys.executable, "-c", "pass"]}]}}}
    job.write_text(json.dumps({"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": "imports"},
                               "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}}}))
    out = tmp_path / "modules.json"
    run = subprocess.run([sys.executable, "-c", PROBE, str(out), str(job)], capture_output=True, text=True,
                         timeout=120, cwd=REPO, env={**os.environ, "TORCHJOB_HOME": str(tmp_path / "home")})
    assert run.returncode == 0, run.stderr
    loaded = json.loads(out.read_text())
    assert loaded is not None, "no replica was started"
    assert "torchjob.local.supervisor.supervisor" in loaded  # the probe saw the local runtime's start
    heavy = sorted({m.split(".")[0] for m in loaded} & {"rich", "pathspec", "lightkube", "httpx", "certifi"})
    assert heavy == [], heavy


def test_the_local_progress_endpoint_starts_without_looking_its_host_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """http.server's bind asks for the host's full name (socket.getfqdn: a reverse DNS query, slow where DNS
    is); nothing reads it."""
    from torchjob.local.supervisor.progress import LocalEndpoint, ca_bundle

    def looked_up(*_: object) -> str:
        raise AssertionError("socket.getfqdn called")

    monkeypatch.setattr(socket, "getfqdn", looked_up)
    ep = LocalEndpoint("j", lambda *a: None).start()
    try:
        assert ep.url.startswith("http://127.0.0.1:")
        assert ep.server.server_name == "127.0.0.1" and ep.server.server_port == ep.server.port
    finally:
        ep.stop()
    assert Path(ca_bundle()).is_file()
