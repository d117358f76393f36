"""The documentation site builds strictly (a broken link, anchor or API reference fails) and
needs no network to be read: no page loads a script, a stylesheet, a font or an image from
elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs.blocks import REPO

EXTERNAL = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"", re.I)


def test_the_site_builds_strictly_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # as root (CI), in a network namespace of its own: the build cannot reach anything
    offline = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    proc = subprocess.run([*offline, sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(site)],
                          cwd=REPO, text=True, capture_output=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    loads = sorted({m for p in pages for m in EXTERNAL.findall(p.read_text(encoding="utf-8"))})
    assert not loads, f"pages that load from elsewhere: {loads[:5]}"
    css = "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.css"))
    assert "fonts.googleapis" not in css and "@import url(http" not in css
    # the CLI reference is generated from the click app: every command is there
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for command in ("run", "submit", "list", "describe", "logs", "delete", "suspend", "resume", "validate",
                    "render", "convert", "install", "operator"):
        assert f"torchjob {command}" in cli, command
    assert "--progress-write-interval" in cli and "--grace-period" in cli
    # the model's reference is generated from the source
    python = (site / "reference" / "python.html").read_text(encoding="utf-8")
    assert "TorchJobSpec" in python and "pytorchReplicaSpecs" in python
