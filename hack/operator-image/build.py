"""Build the operator image, localhost/torchjob-operator:dev, without a Docker engine: what the
repository's Dockerfile describes (Python, torchjob and its runtime dependencies only, pinned by the
constraints file it names; its USER, ENV, ENTRYPOINT and CMD, read from it), on the dev node's Debian
root file system (the base layer of hack/realnode/images.py) instead of python:3.11-slim.

    python3 build.py --rootfs BASE.tar --python PREFIX --out ARCHIVE.tar [--name NAME]

PREFIX is a CPython install (pyenv's, uv's, an /opt prefix) of the version the constraints were locked
with; it is copied to /usr/local without its tests, IDLE, tkinter and site-packages. torchjob and its
dependencies are installed by that interpreter's pip into /usr/local/lib/pythonX.Y/site-packages,
byte-compiled there (the root file system may be read-only). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack" / "realnode"))
import images  # noqa: E402

NAME = "localhost/torchjob-operator:dev"
SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages", "__pycache__"}


def dockerfile(path: Path = REPO / "Dockerfile") -> dict[str, Any]:
    """What the image must match: USER, ENV, ENTRYPOINT, CMD and the constraints file (PIP_CONSTRAINT)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out: dict[str, Any] = {"env": {}}
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "USER":
            out["user"] = rest.strip()
        elif word == "ENV":
            out["env"].update(dict(kv.split("=", 1) for kv in shlex.split(rest)))
        elif word in ("ENTRYPOINT", "CMD"):
            out[word.lower()] = json.loads(rest)
        elif word == "RUN" and "PIP_CONSTRAINT=" in rest:
            out["constraints"] = re.search(r"PIP_CONSTRAINT=/src/(\S+)", rest).group(1)  # type: ignore[union-attr]
        elif word == "FROM":
            out["python"] = re.search(r"python:(\d+\.\d+)", rest).group(1)  # type: ignore[union-attr]
    return out


def runtime_requirements(constraints: Path) -> dict[str, str]:
    """The constraints file's pins before its build-backend section: the image's packages."""
    pins: dict[str, str] = {}
    for line in constraints.read_text().splitlines():
        if line.startswith("# what builds"):
            break
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def stage(prefix: Path, root: Path, spec: dict[str, Any]) -> None:
    version = spec["python"]
    lib = f"python{version}"
    dest = root / "usr" / "local"
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(prefix / "bin" / lib, dest / "bin" / lib)
    os.symlink(lib, dest / "bin" / "python3")
    # The interpreter links libpython: in /usr/lib, where the loader looks without ld.so.cache
    # (the base layer's cache does not list /usr/local/lib).
    (root / "usr" / "lib").mkdir(parents=True)
    for so in (prefix / "lib").glob(f"libpython{version}*.so*"):
        shutil.copy2(so, root / "usr" / "lib" / so.name, follow_symlinks=False)
    shutil.copytree(prefix / "lib" / lib, dest / "lib" / lib, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in SKIP or n.startswith("config-")])
    site = dest / "lib" / lib / "site-packages"
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO / spec["constraints"])}  # pip's build environment too
    subprocess.run([str(prefix / "bin" / lib), "-m", "pip", "install", "--quiet", "--no-compile",
                    "--no-warn-script-location", "--target", str(site), "-c", str(REPO / spec["constraints"]),
                    str(REPO)],
                   check=True, env=env)
    shutil.rmtree(site / "bin", ignore_errors=True)  # scripts whose first line names this machine's interpreter
    entry = dest / "bin" / spec["entrypoint"][0]
    entry.write_text(f"#!/usr/local/bin/{lib}\nimport sys\nfrom torchjob.cli.main import main\nsys.exit(main())\n")
    entry.chmod(0o755)
    subprocess.run([str(prefix / "bin" / lib), "-m", "compileall", "-q", "-j", "0", "-d",
                    f"/usr/local/lib/{lib}/site-packages", str(site)], check=True)


def layer(root: Path, out: Path) -> None:
    """Root-owned, readable by all (the image's user is not root)."""
    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode |= 0o444 | (0o111 if info.isdir() or info.mode & 0o100 else 0)
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=owned)


def build(rootfs: Path, prefix: Path, out: Path, name: str) -> None:
    spec = dockerfile()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        root = Path(tmp) / "root"
        stage(prefix, root, spec)
        layer(root, Path(tmp) / "layer.tar")
        env = [f"{k}={v}" for k, v in spec["env"].items()]
        images.build([{"name": name, "rootfs": True, "layers": [str(Path(tmp) / "layer.tar")],
                       "config": {"User": spec["user"], "Entrypoint": spec["entrypoint"], "Cmd": spec["cmd"],
                                  "Env": [*images.DEFAULT_ENV[:1], *env], "WorkingDir": "/"}}],
                     rootfs, out, "/opt/torchjob/venv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rootfs", type=Path, required=True)
    ap.add_argument("--python", type=Path, required=True, help="a CPython install prefix")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default=NAME)
    args = ap.parse_args()
    version = dockerfile()["python"]
    if not (args.python / "bin" / f"python{version}").exists():
        sys.exit(f"build.py: --python {args.python} has no bin/python{version} (the Dockerfile's Python)")
    try:
        build(args.rootfs, args.python, args.out.resolve(), args.name)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"build.py: {e}")


if __name__ == "__main__":
    main()
