"""A job whose last rank blocks in a `recv` nobody answers while the others wait for it in `all_reduce`
(tests/local/test_stacks_local.py, tests/e2e/test_stacks_real.py). With --report, rank 0 reports one step
first (then the job is judged by runPolicy.progressDeadlineSeconds). With --steps N it first trains for N
steps without ever calling `torchjob.report` (each step an all-reduce, then a sleep at one line), so that its
ranks move before they hang (tests/local/test_hangs_local.py: runPolicy.hangDeadlineSeconds)."""

import sys
import time

import torch
import torch.distributed as dist


def train(t: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        dist.all_reduce(t)
        time.sleep(0.1)  # the same line at every sample: the ranks still move (they sleep and wake)


def wait_for_peer(t: torch.Tensor) -> None:
    dist.recv(t, src=0)  # HANG-RECV: rank 0 never sends


def step(t: torch.Tensor) -> None:
    dist.all_reduce(t)  # HANG-ALL-REDUCE: waits for the rank stuck in recv


def main() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(1)
    if "--report" in sys.argv and dist.get_rank() == 0:
        from torchjob.report import report

        report(step=1, total=10)
    if "--steps" in sys.argv:
        train(t, int(sys.argv[sys.argv.index("--steps") + 1]))
    print("ready", dist.get_rank(), flush=True)
    if dist.get_rank() == dist.get_world_size() - 1:
        wait_for_peer(t)
    else:
        step(t)


if __name__ == "__main__":
    main()
