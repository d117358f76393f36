"""What taking a stuck job's stacks costs (issue 42): the time to collect every rank's stacks, and the collector's
CPU time, for N ranks of a local job (`torchjob submit -j 1xN`, the ranks hung as in tests/programs/
hang_collective.py: all but the last in all_reduce, the last in recv) and, given a cluster, from the pods of a
running job's pods (made with the stacks front by default).

Locally each round is LocalRuntime.stacks (what `torchjob stacks` does, without the command's start-up); on a
cluster, KubeRuntime.stacks (a patch per pod, then its log read until it answered). Rounds are timed one after
the other once every rank is in its collective; the median and the longest are printed.

Usage: python bench/stacks.py [--ranks 8 32] [--rounds 10] [--light]
       python bench/stacks.py --kube-job NAME [-n NAMESPACE] [--kubeconfig PATH] [--rounds 5]
`--light`: ranks that wait without torch (bench/programs/idle_ranks.py): many ranks at a fraction of torch's
memory (a torch rank peaked at 531 MB here: `import torch` and a gloo group of one); what a dump costs is per
Python frame, not per megabyte.

Measured on this project's 2-core machine under load (load average 20 to 27), 10 rounds each:
  local, 8 ranks (torch, gloo): 0.075 s median, 0.088 s longest; collector CPU 3 ms a round
  local, 8 ranks (light):       0.074 s median, 0.080 s longest; collector CPU 2 ms a round
  local, 32 ranks (light):      0.076 s median, 0.078 s longest; collector CPU 5 ms a round
  pods, 8 (1 master + 7 workers on the dev cluster's real node, torch, gloo), 5 rounds: 1.41 s median,
  1.49 s longest; collector CPU 83 ms a round (mostly the API calls: a patch and a log read per pod)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HANG = REPO / "tests" / "programs" / "hang_collective.py"
LIGHT = REPO / "bench" / "programs" / "idle_ranks.py"


def timed(take: Callable[[], Any], rounds: int) -> tuple[list[float], list[float], float, Any]:
    walls, collected = [], []
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    last = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        last = take()
        walls.append(time.perf_counter() - t0)
        collected.append(last.seconds)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime) / rounds
    return walls, collected, cpu, last


def show(what: str, walls: list[float], cpu: float, last: Any) -> None:
    from torchjob.core.diagnosis.stacks import short

    print(f"{what}: {statistics.median(walls):.3f} s median, {max(walls):.3f} s longest over {len(walls)} rounds; "
          f"collector CPU {cpu * 1000:.0f} ms per round; {len(last.processes)} process(es) answered, "
          f"{len(last.missing)} did not")
    print(f"  {short(last)}")


def local(ranks: int, rounds: int, light: bool) -> None:
    from torchjob.local.local_runtime import LocalRuntime

    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TORCHJOB_HOME": home}
        name = f"stuck{ranks}"
        program = LIGHT if light else HANG
        subprocess.run([sys.executable, "-m", "torchjob", "submit", "-j", f"1x{ranks}", "--name", name, str(program)],
                       check=True, env=env, capture_output=True, timeout=120)
        os.environ["TORCHJOB_HOME"] = home
        rt = LocalRuntime()
        try:
            end = time.monotonic() + 600
            want = ("collective (" if light else "step (", "receive (" if light else "wait_for_peer (")
            while True:  # every rank in its collective (they start at their own pace)
                taken = rt.stacks(name)
                from torchjob.core.diagnosis.stacks import short

                if len(taken.processes) == ranks and all(w in short(taken) for w in want):
                    break
                if time.monotonic() > end:
                    raise SystemExit(f"the ranks never all reached their collective: {short(taken)}")
                time.sleep(1)
            walls, _, cpu, last = timed(lambda: rt.stacks(name), rounds)
            show(f"local, {ranks} ranks{' (light)' if light else ' (torch, gloo)'}", walls, cpu, last)
        finally:
            subprocess.run([sys.executable, "-m", "torchjob", "delete", name], env=env, capture_output=True,
                           timeout=120)


def kube(job: str, namespace: str | None, kubeconfig: str | None, rounds: int) -> None:
    from torchjob.kube.clientside.kube_runtime import KubeRuntime

    rt = KubeRuntime(kubeconfig, None, namespace)
    walls, _, cpu, last = timed(lambda: rt.stacks(job), rounds)
    show(f"pods of {job}", walls, cpu, last)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--light", action="store_true", help="ranks without torch (bench/programs/idle_ranks.py)")
    ap.add_argument("--kube-job", help="a running job on a cluster (not annotated torchjob.dev/stacks: \"false\")")
    ap.add_argument("-n", "--namespace")
    ap.add_argument("--kubeconfig")
    args = ap.parse_args()
    if args.kube_job:
        kube(args.kube_job, args.namespace, args.kubeconfig, args.rounds)
        return
    for n in args.ranks:
        local(n, args.rounds, args.light)


if __name__ == "__main__":
    main()
