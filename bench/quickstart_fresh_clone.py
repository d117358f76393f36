"""The README's first command, whole, as a newcomer meets it: a fresh `git clone` of this repository,
then `bash scripts/quickstart.sh` in a terminal (a pty), no standard input, no virtual environment
active, pip going to its index for everything, torch included, with no cache (a first install). It
prints when each of the quickstart's three steps began, what pip downloaded, the size of the .venv
it made, how long the example took, and the machine's load average before and after (the times
scale with it). The suite's test (tests/docs/test_quickstart.py) runs the same clone and the same
quickstart in under two minutes by leaving torch's download and unpacking out.

Usage: python bench/quickstart_fresh_clone.py [--keep DIR]
(--keep: clone into DIR and leave it there; by default a temporary directory, removed after.)
Needs the network to reach the package index, about 3 GB of download and 6 GB of disk.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, help="clone into this directory and leave it there")
    args = ap.parse_args()
    from tests.docs.fresh_clone import clone, run_in_pty, user_env

    top = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="tj-quickstart-"))
    if args.keep and args.keep.exists() and any(args.keep.iterdir()):
        raise SystemExit(f"--keep {args.keep}: not empty (give a new directory)")
    try:
        load0 = os.getloadavg()
        repo = clone(top / "torchjob")
        env = user_env(top / "home", PIP_NO_CACHE_DIR="1")
        env.pop("PIP_FIND_LINKS", None)
        env.pop("PIP_NO_INDEX", None)
        ran = run_in_pty(["bash", "scripts/quickstart.sh"], repo, env, timeout=3 * 3600)
        load1 = os.getloadavg()
        out = ran.output
        if ran.code != 0:
            print(out[-6000:])
            raise SystemExit(f"the quickstart failed (exit {ran.code})")
        mb = 0.0
        for size, unit in re.findall(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)", out):
            mb += float(size) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[unit]
        du = subprocess.run(["du", "-sm", str(repo / ".venv")], capture_output=True, text=True).stdout.split()[0]
        job = re.search(r"torchjob: job ddp-example succeeded in ([\d.]+)s", out)
        s = ran.steps
        print(f"fresh clone + bash scripts/quickstart.sh (pty, no stdin, pip's index, no cache): {ran.seconds:.0f} s")
        print(f"  step 1, the virtual environment: {s[2] - s[1]:.0f} s")
        print(f"  step 2, pip install -e '.[examples]': {s[3] - s[2]:.0f} s ({mb / 1000:.2f} GB downloaded)")
        print(f"  step 3, the example: {ran.seconds - s[3]:.0f} s (the job itself: {job[1] if job else '?'} s)")
        print(f"  .venv: {int(du) / 1024:.1f} GB")
        print(f"  load average before {load0[0]:.1f}, after {load1[0]:.1f} (1 min), {load1[2]:.1f} (15 min)")
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
