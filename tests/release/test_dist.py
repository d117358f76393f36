"""The release as users get it: the wheel and the sdist that `scripts/release.sh dist` builds (`python -m
build`, then `twine check --strict`: what the release workflow runs), installed into a fresh virtualenv
outside the repository, with no source tree on its path.

The fresh virtualenv installs the wheel and its declared runtime dependencies with pip, never torch:
torchjob does not import it, and the local job here runs a command that needs none (plain mode, no
torchrun), which also shows that a user without torch can run a job of any command. pip takes the
dependencies (and the build, its backend) from `scripts/release.sh wheelhouse`: the wheels that
constraints/operator.txt pins, downloaded once per machine and cached, so that the test needs no index
(PIP_NO_INDEX) and takes seconds; a dependency declared but not locked there fails the install, as it
would fail the operator image's build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

from torchjob.local.start.ports import free_port
from torchjob.version import __version__

REPO = Path(__file__).resolve().parents[2]

JOB = """\
apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: from-the-wheel
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: main
              command: [python, -c, "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"]
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: main
              command: [python, -c, "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"]
"""


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    out = subprocess.run(["bash", str(REPO / "scripts" / "release.sh"), "wheelhouse"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr[-4000:]
    return Path(out.stdout.strip())


def offline(wheelhouse: Path) -> dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    t0 = time.monotonic()
    built = subprocess.run(["bash", str(REPO / "scripts" / "release.sh"), "dist", str(out)], capture_output=True,
                           text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable, **offline(wheelhouse)})
    print(f"scripts/release.sh dist: {time.monotonic() - t0:.1f} s")
    assert built.returncode == 0, built.stderr[-4000:]
    wheel, sdist = (Path(p) for p in built.stdout.split())
    assert wheel.name == f"torchjob-{__version__}-py3-none-any.whl" and sdist.name == f"torchjob-{__version__}.tar.gz"
    assert "PASSED" in built.stderr  # twine check --strict, of both
    return wheel, sdist


def test_the_wheel_holds_the_package_its_license_and_metadata_and_no_tests(dist: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(dist[0]) as wheel:
        names, metadata = wheel.namelist(), wheel.read(f"torchjob-{__version__}.dist-info/METADATA").decode()
    info = f"torchjob-{__version__}.dist-info/"
    assert all(n.startswith(("torchjob/", info)) for n in names), [n for n in names if not n.startswith("torchjob")]
    # the reference pages and example jobs `torchjob mcp` serves are package data under torchjob/mcp/pages/
    pages = "torchjob/mcp/pages/"
    assert not [n for n in names if re.search(r"(^|/)(tests?|bench|examples)/", n) and not n.startswith(pages)]
    for part in (f"{pages}reference/torchjob.md", f"{pages}reference/cli.md", f"{pages}examples/ddp/job.yaml",
                 "torchjob/py.typed", "torchjob/ui/static/index.html", "torchjob/ui/static/app.js",
                 "torchjob/ui/static/uPlot.LICENSE", f"{info}licenses/LICENSE", f"{info}entry_points.txt"):
        assert part in names, part
    meta = Parser().parsestr(metadata)
    assert meta["Version"] == __version__ and meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls), urls
    requires = meta.get_all("Requires-Dist") or []
    assert not [r for r in requires if r.startswith("torch") and "extra ==" not in r], "torch is no runtime dependency"


def test_the_sdist_builds_the_wheel_and_carries_no_tests(dist: tuple[Path, Path]) -> None:
    top = f"torchjob-{__version__}/"
    with tarfile.open(dist[1]) as tar:
        names = [n.removeprefix(top) for n in tar.getnames()]
    for part in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "src/torchjob/version.py",
                 "charts/torchjob/Chart.yaml", "Dockerfile", "constraints/operator.txt", "PKG-INFO"):
        assert part in names, part
    assert not [n for n in names if n.startswith(("tests/", "bench/", "hack/", ".github/"))]


@pytest.fixture(scope="module")
def venv(dist: tuple[Path, Path], wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv outside the repository, the wheel installed into it by pip."""
    root = tmp_path_factory.mktemp("fresh")
    assert REPO not in root.parents
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    t0 = time.monotonic()
    pip = subprocess.run([str(root / "venv/bin/python"), "-m", "pip", "install", "-q", str(dist[0])],
                         capture_output=True, text=True, timeout=600, cwd=root,
                         env={**os.environ, **offline(wheelhouse)})
    assert pip.returncode == 0, pip.stderr[-4000:]
    print(f"fresh venv: the wheel and its dependencies installed in {time.monotonic() - t0:.1f} s")
    yield root


def in_venv(root: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{root / 'venv/bin'}:/usr/bin:/bin", TORCHJOB_HOME=str(root / "home"))
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=root, env=env)


def test_the_installed_package_imports_from_the_venv_alone(venv: Path) -> None:
    out = in_venv(venv, "python", "-c", "import sys, torchjob, importlib.util; print(torchjob.__file__); "
                  "print(torchjob.__version__); print(importlib.util.find_spec('torch') is None); print(sys.path)")
    assert out.returncode == 0, out.stderr
    where, version, no_torch, path = out.stdout.splitlines()
    assert Path(where).is_relative_to(venv / "venv") and version == __version__
    assert no_torch == "True", "the fresh virtualenv has no torch: torchjob runs without it"
    assert str(REPO) not in path
    said = in_venv(venv, "torchjob", "version")
    assert said.stdout == f"client: {__version__}\n", said.stderr


def test_the_installed_command_runs_a_local_job(venv: Path) -> None:
    (venv / "job.yaml").write_text(JOB)
    out = in_venv(venv, "torchjob", "run", "job.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[master-0] rank 0 of 2" in out.stdout and "[worker-0] rank 1 of 2" in out.stdout, out.stdout
    assert "job from-the-wheel succeeded" in out.stderr
    listed = in_venv(venv, "torchjob", "list")
    assert "from-the-wheel" in listed.stdout and "Succeeded" in listed.stdout, listed.stdout


def test_the_installed_dashboard_serves_its_files(venv: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'venv/bin'}:/usr/bin:/bin", TORCHJOB_HOME=str(venv / "home"))
    ui = subprocess.Popen(["torchjob", "ui", "--port", str(port), "--no-browser"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=venv, env=env)
    try:
        assert ui.stdout is not None
        url = ui.stdout.readline().strip()
        assert url.startswith(f"http://127.0.0.1:{port}/") and "token=" in url, url
        token = url.split("token=", 1)[1]
        page = ""
        for _ in range(100):
            try:
                page = urllib.request.urlopen(url, timeout=5).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert "<html" in page.lower() and "app.js" in page
        installed = venv / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
            "site-packages" / "torchjob" / "ui" / "static"
        for name in ("app.js", "app.css"):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/static/{name}", headers={"X-Torchjob-Token": token})
            assert urllib.request.urlopen(req, timeout=5).read() == (installed / name).read_bytes()
    finally:
        ui.terminate()
        ui.wait(timeout=30)
