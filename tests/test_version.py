"""One version, written in one place (src/torchjob/version.py) and said everywhere a user meets it: the
package's metadata (pyproject reads it from there), `torchjob version`, the chart's version and appVersion,
the image tag the chart and `torchjob install` default to, and the changelog's section.
`scripts/release.sh set-version V` changes it: it writes version.py and the chart, and nothing else must."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

import torchjob
from torchjob.version import __version__

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "torchjob"


def test_the_package_face_says_the_version_module_s_version() -> None:
    assert torchjob.__version__ == __version__


def test_the_package_metadata_reads_the_version_module() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"], "the version is written in src/torchjob/version.py only"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "src/torchjob/version.py"


def test_the_chart_says_the_same_version_and_its_image_tag_defaults_to_it() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] in ("", __version__), "image.tag: empty (the chart's appVersion) or the version"
    assert '{{ default .Chart.AppVersion .Values.image.tag }}' in (CHART / "templates" / "_helpers.tpl").read_text()


def test_the_install_manifests_default_to_this_version_s_image() -> None:
    from torchjob.kube.objects.install import DEFAULT_IMAGE

    assert f"torchjob/operator:{__version__}" == DEFAULT_IMAGE


def test_torchjob_version_prints_it() -> None:
    out = subprocess.run([str(Path(sys.executable).parent / "torchjob"), "version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == f"client: {__version__}\n"


def test_the_changelog_has_this_version_s_section() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert f"\n## [{__version__}] - " in text
    assert f"\n[{__version__}]: " in text, "each version heading is a link (Keep a Changelog)"


def test_set_version_writes_every_place_that_says_it(tmp_path: Path) -> None:
    for rel in ("scripts/release.sh", "src/torchjob/version.py", "charts/torchjob/Chart.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    subprocess.run(["bash", str(tmp_path / "scripts/release.sh"), "set-version", "9.8.7"], check=True,
                   capture_output=True)
    assert '__version__ = "9.8.7"\n' in (tmp_path / "src/torchjob/version.py").read_text()
    chart = yaml.safe_load((tmp_path / "charts/torchjob/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("9.8.7", "9.8.7")
    out = subprocess.run(["bash", str(tmp_path / "scripts/release.sh"), "version"], capture_output=True, text=True)
    assert out.stdout.strip() == "9.8.7"
    bad = subprocess.run(["bash", str(tmp_path / "scripts/release.sh"), "set-version", "nine"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "set-version X.Y.Z" in bad.stderr
