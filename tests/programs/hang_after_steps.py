"""A job that trains for a while without ever calling `torchjob.report` (each step an all-reduce, then
a sleep at one line), then hangs: its last rank blocks in a `recv` nobody answers while the others wait
for it in `all_reduce` (tests/local/test_hangs_local.py: runPolicy.hangDeadlineSeconds)."""

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
    train(t, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print("hanging", dist.get_rank(), flush=True)
    if dist.get_rank() == dist.get_world_size() - 1:
        wait_for_peer(t)
    else:
        step(t)


if __name__ == "__main__":
    main()
