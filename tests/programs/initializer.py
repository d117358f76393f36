"""A stand-in for Kubeflow Trainer's dataset and model initializers (images
ghcr.io/kubeflow/trainer/dataset-initializer and .../model-initializer, `python -m
pkg.initializers.dataset|model`), for tests: no model hub can be reached here. It reads the same
env contract (STORAGE_URI, `hf://ORG/NAME`; IGNORE_PATTERNS, ACCESS_TOKEN as the Kubeflow SDK writes
them) and writes where they write (/workspace/dataset, /workspace/model), but copies from a local
directory standing in for the hub (HUB_DIR, default /opt/hub: HUB_DIR/ORG/NAME/...) instead of
downloading. A name the hub lacks fails as a download of it would: an error line, exit 1.

Usage: python initializer.py dataset|model"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import urlparse

WORKSPACE = Path(os.environ.get("WORKSPACE_PATH", "/workspace"))  # Trainer's is fixed: /workspace


def main(kind: str) -> int:
    print(f"Starting {kind} initialization", flush=True)
    uri = os.environ.get("STORAGE_URI")
    if not uri:
        print("ValueError: STORAGE_URI environment variable must be set", flush=True)
        return 1
    parsed = urlparse(uri)
    if parsed.scheme != "hf":
        print(f"ValueError: unsupported storage URI scheme {parsed.scheme!r} (this stand-in serves hf://)", flush=True)
        return 1
    repo = parsed.netloc + parsed.path
    source = Path(os.environ.get("HUB_DIR", "/opt/hub")) / repo
    print(f"Downloading {kind}: {repo}", flush=True)
    if not source.is_dir():
        print(f"RepositoryNotFoundError: {kind} {repo} is not on the hub", flush=True)
        return 1
    ignore = [p for p in os.environ.get("IGNORE_PATTERNS", "").split(",") if p]
    dest = WORKSPACE / kind
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(source.rglob("*")):
        rel = f.relative_to(source)
        if f.is_file() and not any(fnmatch.fnmatch(rel.name, p) for p in ignore):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest / rel)
            print(f"  {rel}", flush=True)
    print(f"{kind.capitalize()} has been downloaded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "dataset"))
