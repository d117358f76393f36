"""Build container images without a Docker engine, for the dev cluster's real node.

Nothing can be pulled here, so images are made locally: an optional base layer (the Debian
root file system `debootstrap` made) and one layer of files, written as a docker-archive tar
(what `docker save` writes: manifest.json, an image config, layer tars) that
`ctr -n k8s.io images import` loads into containerd. Images that share the base layer share its
blob, so one archive holds them all.

    python3 images.py --rootfs BASE.tar --out ARCHIVE.tar [--venv /opt/torchjob/venv] [--python-home DIR] SPEC.json

SPEC.json is a list of images:

    [{"name": "localhost/torchjob-e2e:dev",     # fully qualified, as containerd names it
      "rootfs": true,                           # the base layer first (default false)
      "python": true,                           # `python`, `python3` and `torchrun` in
                                                # /usr/local/bin run the virtualenv that the
                                                # node mounts at --venv (default false), and
                                                # the directories down to --python-home (where
                                                # the node mounts the interpreter) open to all
      "files": [{"path": "/usr/local/bin/python", "text": "#!/bin/sh\\n...", "mode": 493},
                {"path": "/opt/train.py", "source": "/host/path/train.py"}],
      "links": [{"path": "/bin/sh", "target": "busybox"}],
      "dirs": ["/opt/data"],                    # made 0755 with every parent (an image's mode
                                                # of a base directory, e.g. /root's 0700, too)
      "layers": ["/host/path/layer.tar"],       # prebuilt layers, after the base one
      "config": {"Entrypoint": ["python"], "Cmd": [], "Env": ["A=b"], "WorkingDir": "/home"}}]

Standard library only: it runs before the project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONUNBUFFERED=1"]


def python_files(venv: str) -> list[dict[str, Any]]:
    """Commands that run the mounted virtualenv. Wrappers, not symlinks: the interpreter finds
    the virtualenv's pyvenv.cfg next to the path it was started by."""
    python = f'#!/bin/sh\nexec {venv}/bin/python "$@"\n'
    torchrun = f'#!/bin/sh\nexec {venv}/bin/python -m torch.distributed.run "$@"\n'
    return [{"path": "/usr/local/bin/python", "text": python, "mode": 0o755},
            {"path": "/usr/local/bin/python3", "text": python, "mode": 0o755},
            {"path": "/usr/local/bin/torchrun", "text": torchrun, "mode": 0o755}]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def file_layer(image: dict[str, Any], out: Path) -> None:
    """One layer with the image's files and links (and their parent directories)."""
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    dirs: set[str] = set()

    def add_dirs(path: str) -> None:
        for d in _parents(path):
            if d not in dirs:
                dirs.add(d)
                info = tarfile.TarInfo(d)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                entries.append((info, None))

    for d in image.get("dirs", []):
        # The directory and every parent, 0755: the node mounts the interpreter at its own path
        # (the virtualenv's links name it), and a path under Debian's /root (0700: a pyenv's)
        # cannot be entered by a non-root user (uid 1000, 65532). This layer's mode wins.
        add_dirs(d.rstrip("/") + "/.")
    for f in image.get("files", []):
        data = Path(f["source"]).read_bytes() if "source" in f else f["text"].encode()
        mode = f.get("mode", 0o755 if "source" in f and Path(f["source"]).stat().st_mode & 0o111 else 0o644)
        add_dirs(f["path"])
        info = tarfile.TarInfo(f["path"].strip("/"))
        info.size, info.mode = len(data), mode
        entries.append((info, data))
    for link in image.get("links", []):
        add_dirs(link["path"])
        info = tarfile.TarInfo(link["path"].strip("/"))
        info.type, info.linkname = tarfile.SYMTYPE, link["target"]
        entries.append((info, None))
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def build(spec: list[dict[str, Any]], rootfs: Path | None, out: Path, venv: str, python_home: str | None = None) -> None:
    with tempfile.TemporaryDirectory(dir=out.parent) as tmpdir:
        tmp = Path(tmpdir)
        base_digest = ""
        manifest: list[dict[str, Any]] = []
        blobs: dict[str, Path] = {}
        for image in spec:
            layers: list[str] = []
            if image.get("rootfs"):
                if rootfs is None:
                    raise SystemExit(f"{image['name']} asks for the base layer: pass --rootfs")
                if not base_digest:
                    base_digest = sha256_file(rootfs)
                    blobs[base_digest] = rootfs
                layers.append(base_digest)
            for prebuilt in image.get("layers", []):
                digest = sha256_file(Path(prebuilt))
                blobs.setdefault(digest, Path(prebuilt))
                layers.append(digest)
            if image.get("python"):
                image = {**image, "files": [*python_files(venv), *image.get("files", [])],
                         "dirs": [*([python_home] if python_home else []), *image.get("dirs", [])]}
            if image.get("files") or image.get("links"):
                layer = tmp / "layer.tar"
                file_layer(image, layer)
                digest = sha256_file(layer)
                if digest not in blobs:
                    blobs[digest] = layer.rename(tmp / f"{digest}.tar")
                layers.append(digest)
            cfg = {"Env": DEFAULT_ENV, **image.get("config", {})}
            config = {
                "architecture": "amd64", "os": "linux", "config": cfg,
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in layers]},
                "history": [{"created_by": "torchjob hack/realnode/images.py"} for _ in layers],
            }
            raw = json.dumps(config, sort_keys=True).encode()
            config_name = f"{hashlib.sha256(raw).hexdigest()}.json"
            (tmp / config_name).write_bytes(raw)
            manifest.append({"Config": config_name, "RepoTags": [image["name"]],
                             "Layers": [f"{d}/layer.tar" for d in layers]})
        # Written under a name of this process's own, then renamed: two builds of the same images at
        # once (two checkouts share the cache) each finish, and the rename is atomic.
        partial = out.with_name(f"{out.name}.{os.getpid()}.partial")
        with tarfile.open(partial, "w") as tar:
            for digest, path in blobs.items():
                tar.add(path, arcname=f"{digest}/layer.tar")
            for m in manifest:
                tar.add(tmp / m["Config"], arcname=m["Config"])
            data = json.dumps(manifest).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        os.replace(partial, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rootfs", type=Path, help="the base layer: a tar of a root file system")
    ap.add_argument("--out", type=Path, required=True, help="the docker-archive tar to write")
    ap.add_argument("--venv", default="/opt/torchjob/venv", help="where the node mounts the virtualenv")
    ap.add_argument("--python-home", help="where the node mounts the virtualenv's interpreter (its own path): "
                    "python images get the directories down to it open to every user")
    ap.add_argument("spec", type=Path, help="JSON list of images (see the module's docstring)")
    args = ap.parse_args()
    try:
        build(json.loads(args.spec.read_text()), args.rootfs, args.out.resolve(), args.venv, args.python_home)
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"images.py: {e}")


if __name__ == "__main__":
    main()
