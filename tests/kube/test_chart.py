"""The Helm chart holds the same objects as `torchjob install` (regenerate: scripts/gen-chart.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_chart_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_chart", REPO / "scripts" / "gen-chart.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for rel, content in gen.render().items():
        assert (REPO / "charts" / "torchjob" / rel).read_text() == content, f"{rel} is stale: run scripts/gen-chart.py"


def test_more_operator_flags_reach_the_deployment() -> None:
    import subprocess
    import sys

    import yaml

    out = subprocess.run([sys.executable, "-m", "torchjob", "install", "--dry-run",
                          "--operator-arg=--gang-scheduler-name=volcano", "--operator-arg=--workers=8"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    deployment = next(o for o in yaml.safe_load_all(out.stdout) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["torchjob", "operator"]
    assert container["args"] == ["--gang-scheduler-name=volcano", "--workers=8"]
    chart = (REPO / "charts" / "torchjob" / "templates" / "operator.yaml").read_text()
    assert "args: {{ toJson .Values.extraArgs }}" in chart  # the chart's values.yaml: extraArgs
