"""What watching a local job for a hang without reports costs (issue 42, runPolicy.hangDeadlineSeconds): one
sample of N ranks by the hang watch (local/inspect/hangs.py), in the supervisor's thread, every tenth of the
deadline. A sample reads two /proc counters per rank process (CPU time, the main thread's wake-ups); only where
no rank moved by them does it also take their stacks (a signal and a faulthandler dump each, as torchjob stacks).

The ranks are bench/programs/idle_ranks.py (asleep, without torch), `torchjob submit -j 1xN`: still, so every
sample after the first takes their stacks; the counters alone are what a sample of a training job costs.

Usage: python bench/hang_watch.py [--ranks 8 32] [--rounds 20]

Measured on this project's 2-core machine under load (load average about 20), 20 rounds each:
  8 ranks:  counters alone 0.4 ms median (9.7 ms longest); a sample with stacks 0.083 s wall median
            (0.099 s longest: mostly the 50 ms a dump's file is given to settle), 2.7 ms of CPU
  32 ranks: counters alone 17.5 ms median (37.9 ms longest: each process's open files are read to check it
            is the one that registered); a sample with stacks 0.121 s wall median (0.317 s longest), 7.1 ms CPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIGHT = Path(__file__).resolve().parent / "programs" / "idle_ranks.py"


def attempts(home: Path) -> dict[str, Path]:
    return {p.parent.parent.parent.name: p.parent.parent for p in home.rglob("attempt-0/stacks/*.txt")}


def measure(ranks: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {**os.environ, "TORCHJOB_HOME": tmp}
        name = f"still{ranks}"
        subprocess.run([sys.executable, "-m", "torchjob", "submit", "-j", f"1x{ranks}", "--name", name, str(LIGHT)],
                       check=True, env=env, capture_output=True, timeout=120)
        from torchjob.local.inspect import stacks
        from torchjob.local.inspect.hangs import HangWatch, cpu_seconds, wakes

        try:
            end = time.monotonic() + 300
            while len(stacks.registered(attempts(home))) < ranks:
                if time.monotonic() > end:
                    raise SystemExit("the ranks never all registered")
                time.sleep(0.3)
            folders = attempts(home)
            counters = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                [(cpu_seconds(pid), wakes(pid)) for _, pid in stacks.registered(folders)]
                counters.append(time.perf_counter() - t0)
            watch = HangWatch(lambda: None)
            live = {n: (0, d) for n, d in folders.items()}
            watch._live = dict(live)  # as the supervisor's round tells it
            walls, cpus = [], []
            for _ in range(rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                watch.sample(None, live)
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            taken = watch.last()
            print(f"{ranks} ranks: counters alone {statistics.median(counters) * 1000:.1f} ms median "
                  f"({max(counters) * 1000:.1f} ms longest); a sample with stacks {statistics.median(walls):.3f} s "
                  f"wall median ({max(walls):.3f} s longest), {statistics.median(cpus) * 1000:.1f} ms CPU; "
                  f"{len(taken.processes) if taken else 0} process(es) answered")
        finally:
            subprocess.run([sys.executable, "-m", "torchjob", "delete", name], env=env, capture_output=True,
                           timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    for n in args.ranks:
        measure(n, args.rounds)


if __name__ == "__main__":
    main()
