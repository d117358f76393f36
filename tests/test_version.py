"""One version, said in three places that cannot import each other: the package (torchjob/version.py),
its metadata (pyproject.toml) and the chart's appVersion (the operator image tag the chart defaults to)."""

from __future__ import annotations

from pathlib import Path

import tomllib
import yaml

import torchjob
from torchjob.version import __version__

REPO = Path(__file__).resolve().parents[1]


def test_the_package_face_says_the_version_module_s_version() -> None:
    assert torchjob.__version__ == __version__


def test_pyproject_and_the_chart_say_the_same_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((REPO / "charts" / "torchjob" / "Chart.yaml").read_text())
    assert (project["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_install_manifests_default_to_this_version_s_image() -> None:
    from torchjob.kube.objects.install import DEFAULT_IMAGE

    assert f"torchjob/operator:{__version__}" == DEFAULT_IMAGE
