"""A job whose last rank blocks in a `recv` nobody answers while the others wait for it in `all_reduce`
(tests/local/test_stacks_local.py). With --report, rank 0 reports one step first (then the job is
judged by runPolicy.progressDeadlineSeconds)."""

import sys

import torch
import torch.distributed as dist


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
    print("ready", dist.get_rank(), flush=True)
    if dist.get_rank() == dist.get_world_size() - 1:
        wait_for_peer(t)
    else:
        step(t)


if __name__ == "__main__":
    main()
