"""What a local job's start loads before its first replica starts: the replicas wait on it (bench/launch.py,
issue 46). rich (the live bar, only on a terminal) and pathspec (a shipped script's .gitignore rules, only
with --kube) are loaded where they are used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    heavy = sorted({m.split(".")[0] for m in loaded} & {"rich", "pathspec", "lightkube", "httpx"})
    assert heavy == [], heavy
