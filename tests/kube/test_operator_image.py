"""The operator image built without Docker (`scripts/dev-cluster.sh operator-image`,
hack/operator-image/build.py) is what the Dockerfile describes: the same user, entrypoint, command
and environment, and exactly the runtime packages pinned by the constraints file the Dockerfile
installs with (and torchjob). tests/incluster runs it, as user 65532 with a read-only root."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.kube.conftest import ENABLED

REPO = Path(__file__).resolve().parents[2]


def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("operator_image", REPO / "hack" / "operator-image" / "build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_dockerfile_says_what_the_build_reads() -> None:
    d = build_module().dockerfile()
    assert d["user"] == "65532:65532" and d["entrypoint"] == ["torchjob"]
    assert d["cmd"] == ["operator", "--leader-elect"] and d["constraints"] == "constraints/operator.txt"
    assert d["python"] == "3.11" and d["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    # every runtime dependency of torchjob is pinned there
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = build_module().runtime_requirements(REPO / d["constraints"])
    for dep in deps:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", dep).group(0)).lower()  # type: ignore[union-attr]
        assert name in pins, f"{dep} is not pinned in {d['constraints']}"


def test_the_built_image_is_the_dockerfiles() -> None:
    if not ENABLED or os.geteuid() != 0:
        pytest.skip("building the image takes the dev node's root file system (debootstrap, root): "
                    "TORCHJOB_KUBE_TESTS=1 as root")
    out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "operator-image"], capture_output=True,
                         text=True, timeout=1800, env={**os.environ, "TORCHJOB_DEVCLUSTER_DIR": "/nonexistent"})
    assert out.returncode == 0, out.stderr[-3000:]
    archive = Path(out.stdout.strip().splitlines()[-1])
    mod = build_module()
    d = mod.dockerfile()
    with tarfile.open(archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))["config"]  # type: ignore[arg-type]
        assert manifest["RepoTags"] == ["localhost/torchjob-operator:dev"]
        assert (config["User"], config["Entrypoint"], config["Cmd"]) == (d["user"], d["entrypoint"], d["cmd"])
        assert {f"{k}={v}" for k, v in d["env"].items()} <= set(config["Env"])
        top = tar.extractfile(manifest["Layers"][-1])
        assert top is not None
        with tarfile.open(fileobj=top) as layer:
            names = layer.getnames()
    site = f"usr/local/lib/python{d['python']}/site-packages/"
    dists = {}
    for n in names:
        m = re.fullmatch(re.escape(site) + r"([^/]+)-([^-/]+)\.dist-info", n)
        if m:
            dists[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    pins = mod.runtime_requirements(REPO / d["constraints"])
    assert dists.pop("torchjob") and dists == pins  # nothing more (no pip, no setuptools), nothing less
    assert "usr/local/bin/torchjob" in names and f"usr/local/bin/python{d['python']}" in names
    assert not any(f"/{skip}/" in n for n in names for skip in ("test", "idlelib", "ensurepip"))
    assert any(n.endswith(".pyc") for n in names if n.startswith(site + "torchjob/"))  # a read-only root: compiled
