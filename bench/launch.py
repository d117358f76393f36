"""Launch overhead and failure teardown of `torchjob run`, against its peers in the same run.

Launch: the wall time of a 4-rank job whose script joins a gloo group, all-reduces and exits,
  - started by hand (4 processes with the env set: the floor),
  - by `torchjob run` (1 master + 3 workers),
  - by `torchrun --standalone --nproc-per-node 4`,
  - by TorchX's `dist.ddp -j 1x4` on the local_cwd scheduler (when torchx is installed),
  - by `torchjob run -j 1x4 workload.py` (no document: one replica of 4 processes through torchrun),
  - by `torchjob run job.yaml`, the same job from the document `--dry-run -o yaml` printed,
  - by `torchrun --nproc-per-node 4` (the same shape, without --standalone),
  - by `job.run()` of the Python API (`Job.from_script(..., nproc_per_node=4)`, in a fresh interpreter
    as the CLI is).
And the time of `import torchjob` (the goal: < 150 ms; no Kubernetes client, no job model at import),
against `import torch` in the same run.
The variants run interleaved, `--repeat` times each; medians are compared as ratios, because
this machine is noisy.

Teardown: a 1+3 job where one worker exits 1 while the others wait in init_process_group:
the time from that exit to the last sibling gone, from the supervisor's own records.

Usage: python bench/launch.py [--repeat 5] [--no-teardown]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from torchjob.local.start.ports import free_port

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


def import_time(module: str, repeat: int = 7) -> float:
    """The median seconds of `import MODULE` in a fresh interpreter (its start not counted)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                                  capture_output=True, text=True).stdout) for _ in range(repeat))


def imports() -> None:
    light, api, torch = import_time("torchjob"), import_time("torchjob.sdk"), import_time("torch")
    print("\nimport time (median of 7 fresh interpreters)")
    print(f"  import torchjob       {light * 1000:8.1f} ms   (goal < 150 ms; /import torch {light / torch:.3f})")
    print(f"  import torchjob.sdk   {api * 1000:8.1f} ms   (what the first torchjob.Job loads)")
    print(f"  import torch          {torch * 1000:8.1f} ms")


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-teardown", action="store_true", help="Skip the failure teardown measurement.")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="torchjob-bench-"))
    env = {**os.environ, "TORCHJOB_HOME": str(work / "home")}
    job = work / "job.yaml"
    job.write_text(job_yaml("bench", []))
    torchjob = [sys.executable, "-m", "torchjob", "run", "-q", str(job)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS),
                str(WORKLOAD)]
    quick = [sys.executable, "-m", "torchjob", "run", "-q", "-j", f"1x{RANKS}", str(WORKLOAD)]
    kept = work / "quick.yaml"
    kept.write_text(subprocess.run([*quick, "--name", "quick", "--dry-run", "-o", "yaml"], env=env, check=True,
                                   capture_output=True, text=True).stdout)
    api = ("import sys, torchjob; torchjob.Job.from_script(sys.argv[1], nproc_per_node=int(sys.argv[2]))"
           ".run(quiet=True)")
    variants: dict[str, Callable[[], None]] = {
        "by hand": by_hand,
        "torchjob run": lambda: run(torchjob, env),
        "torchrun": lambda: run(torchrun),
        "torchjob -j 1x4": lambda: run(quick, env),
        "torchjob 1x4.yaml": lambda: run([sys.executable, "-m", "torchjob", "run", "-q", str(kept)], env),
        "torchrun -n 4": lambda: run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
                                      str(WORKLOAD)]),
        "job.run() 1x4": lambda: run([sys.executable, "-c", api, str(WORKLOAD), str(RANKS)], env),
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

    print("\nwithout a document (the same 1x4 job: one replica of 4 processes through torchrun)")
    for label, a, b in (("torchjob run -j 1x4 / torchjob run job.yaml (same job)", "torchjob -j 1x4",
                         "torchjob 1x4.yaml"),
                        ("torchjob run -j 1x4 / torchrun --nproc-per-node 4", "torchjob -j 1x4", "torchrun -n 4"),
                        ("job.run() (Python) / torchjob run -j 1x4 (CLI)", "job.run() 1x4", "torchjob -j 1x4")):
        print(f"  {label:<58}{med[a] / med[b]:>6.2f}  ({med[a]:.2f}s / {med[b]:.2f}s)")
    imports()
    if args.no_teardown:
        shutil.rmtree(work, ignore_errors=True)
        return

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
