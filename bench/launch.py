"""Launch overhead and failure teardown of `torchjob run`, against its peers in the same run.

Launch: the wall time of a 4-rank job whose script joins a gloo group, all-reduces and exits,
  - started by hand (4 processes with the env set: the floor),
  - by `torchjob run` (1 master + 3 workers),
  - by `torchrun --standalone --nproc-per-node 4`,
  - by TorchX's `dist.ddp -j 1x4` on the local_cwd scheduler (when torchx is installed).
The variants run interleaved, `--repeat` times each; medians are compared as ratios, because
this machine is noisy.

Teardown: a 1+3 job where one worker exits 1 while the others wait in init_process_group:
the time from that exit to the last sibling gone, from the supervisor's own records.

Usage: python bench/launch.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"
RANKS = 4


def job_yaml(name: str, args: list[str]) -> str:
    command = json.dumps([sys.executable, str(WORKLOAD), *args])
    replica = f"""
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              command: {command}"""
    return f"""apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: {name}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1{replica}
    Worker:
      replicas: {RANKS - 1}{replica}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def by_hand() -> None:
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKLOAD)],
            env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r),
                 "WORLD_SIZE": str(RANKS), "LOCAL_RANK": "0"},
        )
        for r in range(RANKS)
    ]
    assert all(p.wait() == 0 for p in procs)


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="torchjob-bench-"))
    env = {**os.environ, "TORCHJOB_HOME": str(work / "home")}
    job = work / "job.yaml"
    job.write_text(job_yaml("bench", []))
    torchjob = [sys.executable, "-m", "torchjob", "run", "-q", str(job)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS),
                str(WORKLOAD)]
    variants: dict[str, Callable[[], None]] = {
        "by hand": by_hand,
        "torchjob run": lambda: run(torchjob, env),
        "torchrun": lambda: run(torchrun),
    }
    torchx = shutil.which("torchx", path=str(Path(sys.executable).parent))
    if torchx:
        cmd = [torchx, "run", "--scheduler", "local_cwd", "dist.ddp", "-j", f"1x{RANKS}", "--script", str(WORKLOAD)]
        # TorchX starts `torchrun` from PATH: the one next to this interpreter.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        variants["torchx dist.ddp"] = lambda: run(cmd, {**os.environ, "PATH": path})
    else:
        print("torchx is not installed (pip install torchx): skipping it")

    for fn in variants.values():  # warm the page cache once
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):
        for name, fn in variants.items():
            times[name].append(timed(fn))

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nlaunch overhead: {RANKS} ranks join a gloo group, all-reduce, exit "
          f"(median of {args.repeat}, seconds)")
    print(f"  {'launcher':<18}{'median':>8}{'min':>8}{'max':>8}{'/by hand':>10}{'/torchrun':>11}")
    for k, v in times.items():
        print(f"  {k:<18}{med[k]:>8.2f}{min(v):>8.2f}{max(v):>8.2f}{med[k] / med['by hand']:>10.2f}"
              f"{med[k] / med['torchrun']:>11.2f}")

    # Teardown: worker-2 (rank 3) exits 1 while the others wait in init_process_group.
    fail = work / "fail.yaml"
    fail.write_text(job_yaml("teardown", ["--fail-rank", "3"]))
    latencies = []
    for _ in range(args.repeat):
        subprocess.run([sys.executable, "-m", "torchjob", "run", "-q", str(fail)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run([sys.executable, "-m", "torchjob", "describe", "teardown", "-o", "json"], env=env,
                             capture_output=True, text=True, check=True).stdout
        attempts = json.loads(out)["attempts"]
        failed = next(a for a in attempts if a["replica"] == "worker-2")
        others = [a["ended"] for a in attempts if a["replica"] != "worker-2"]
        latencies.append(max(others) - failed["ended"])
    print("\nfailure teardown: one worker exits 1, the other 3 wait in init_process_group")
    print(f"  exit -> last sibling gone: median {statistics.median(latencies) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000:.0f} ms (target < 200 ms)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
