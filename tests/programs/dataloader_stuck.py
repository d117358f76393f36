"""A job whose last rank's DataLoader worker blocks for good while it loads a batch (a stuck read, a lock taken
in a forked worker): that rank waits for the batch, the others for it in the step's all_reduce
(tests/local/test_stacks_local.py). Rank 0 reports each step; then nothing moves."""

import os
import threading

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from torchjob.report import report

STUCK_AT = 3


class Samples(Dataset):  # type: ignore[type-arg]
    def __init__(self, stuck: bool) -> None:
        self.stuck = stuck

    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.stuck and i == STUCK_AT:
            threading.Event().wait()  # STUCK-IN-WORKER: the worker's read never returns
        return torch.ones(1) * i


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = DataLoader(Samples(rank == world - 1), batch_size=1, num_workers=1)
    for step, batch in enumerate(loader, 1):  # WAITS-FOR-BATCH
        dist.all_reduce(batch)  # WAITS-IN-ALL-REDUCE
        if rank == 0:
            report(step=step, total=len(loader))
    print("done", os.getpid(), flush=True)


if __name__ == "__main__":
    main()
