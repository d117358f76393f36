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
