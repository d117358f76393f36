"""The dashboard's first paint with many jobs, measured in a real browser (Debian's chromium,
through Playwright), against the command line's listing of the same store measured in the same run.

N finished jobs (each with progress and a loss history, written through the store and the progress
book as the runtime writes them) go into a throwaway TORCHJOB_HOME; `torchjob ui --no-browser` serves
it. For each round a fresh browser page opens the URL, and the page's own clock says when the jobs
table was painted with the rows in view (the frame after they went in: `tj.firstPaint`, from
navigation start; the page draws no others) and when the first contentful paint was. The peer:
`torchjob list -o json` on the same store, the same jobs, wall time of the process (what a user
waits for the same facts). The baseline: the same dashboard over ten jobs, its rounds interleaved
with the N jobs' (what the browser test bounds the N jobs' page by:
tests/ui/test_dashboard.py::test_a_thousand_jobs_first_paint); and for each, the CPU time the
renderer's main thread spent until the rows were painted (thread time).

With `--against SRC` (the `src` directory of another checkout, e.g. `git archive COMMIT src | tar -x -C DIR`)
the same store is also served by that torchjob, its rounds interleaved with this one's: the page before
a change and after it, measured under the same load.

Usage: python bench/ui_first_paint.py [--jobs 1000] [--rounds 5] [--against SRC]
Target: every round's first screen of rows painted in under 1 s at 1,000 jobs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", type=Path, help="another checkout's src directory, served beside this one")
    args = ap.parse_args()
    if args.against is not None and not (args.against / "torchjob" / "ui").is_dir():
        raise SystemExit(f"--against {args.against}: no torchjob/ui under it (give a checkout's src directory)")
    from playwright.sync_api import sync_playwright
    from tests.ui.conftest import CHROMIUM, Dashboard, first_paint, seed_jobs

    if CHROMIUM is None:
        raise SystemExit("no chromium: run scripts/setup.sh (Debian's chromium) or set TORCHJOB_CHROMIUM")
    home = Path(tempfile.mkdtemp(prefix="tj-ui-bench-"))
    small = Path(tempfile.mkdtemp(prefix="tj-ui-bench-small-"))
    try:
        t = time.perf_counter()
        seed_jobs(small, 10)
        seed_jobs(home, args.jobs)
        print(f"seeded {args.jobs} jobs in {time.perf_counter() - t:.1f}s", flush=True)
        env = {**os.environ, "TORCHJOB_HOME": str(home)}
        lists = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "torchjob", "list", "-o", "json"], env=env, check=True,
                           capture_output=True)
            lists.append((time.perf_counter() - t) * 1000)
        d, base = Dashboard(home), Dashboard(small)
        other = Dashboard(home, env={"PYTHONPATH": str(args.against.resolve())}) if args.against else None
        paints, fcps, bases, cpus, base_cpus = [], [], [], [], []
        others: list[tuple[float, float, float]] = []
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                for _ in range(args.rounds):
                    paint, _, cpu = first_paint(browser, base.url, 10)
                    bases.append(paint)
                    base_cpus.append(cpu)
                    paint, fcp, cpu = first_paint(browser, d.url, args.jobs)
                    paints.append(paint)
                    fcps.append(fcp)
                    cpus.append(cpu)
                    if other is not None:
                        others.append(first_paint(browser, other.url, args.jobs))
                browser.close()
        finally:
            d.stop()
            base.stop()
            if other is not None:
                other.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(small, ignore_errors=True)
    paint, fcp, peer, baseline, cpu, base_cpu = (statistics.median(x) for x in (paints, fcps, lists, bases, cpus,
                                                                                  base_cpus))
    print(f"{args.jobs} jobs, median of {args.rounds} (chromium {CHROMIUM}):")
    print(f"  dashboard: rows in view painted   {paint:7.0f} ms  (rounds: {', '.join(f'{x:.0f}' for x in paints)})")
    print(f"  dashboard: first contentful paint {fcp:7.0f} ms")
    print(f"  dashboard: main thread CPU        {cpu:7.0f} ms  (rounds: {', '.join(f'{x:.0f}' for x in cpus)})")
    print(f"  baseline: the same page, 10 jobs  {baseline:7.0f} ms  (rounds: {', '.join(f'{x:.0f}' for x in bases)}; "
          f"main thread {base_cpu:.0f} ms)")
    print(f"  peer: torchjob list -o json       {peer:7.0f} ms  (rounds: {', '.join(f'{x:.0f}' for x in lists)})")
    print(f"  rounds of {args.jobs} jobs over 1 s: {sum(x >= 1000 for x in paints)} of {args.rounds}")
    print(f"  ratio dashboard rows / list: {paint / peer:.2f}")
    if others:
        o_paint, o_fcp, o_cpu = (statistics.median(r[i] for r in others) for i in range(3))
        print(f"--against {args.against} (the same store, rounds interleaved with the above):")
        print(f"  dashboard: rows in view painted   {o_paint:7.0f} ms  (rounds: "
              f"{', '.join(f'{r[0]:.0f}' for r in others)})")
        print(f"  dashboard: first contentful paint {o_fcp:7.0f} ms")
        print(f"  dashboard: main thread CPU        {o_cpu:7.0f} ms  (rounds: "
              f"{', '.join(f'{r[2]:.0f}' for r in others)})")
        print(f"  rounds of {args.jobs} jobs over 1 s: {sum(r[0] >= 1000 for r in others)} of {args.rounds}")
        print(f"  ratio this / against: rows painted {paint / o_paint:.2f}, main thread {cpu / o_cpu:.2f}")


if __name__ == "__main__":
    main()
