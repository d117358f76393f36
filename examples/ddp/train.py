"""A small DDP regression, written for torchjob's examples: learn y = 3x - 1 + noise.

Every replica reads its rank from the env torchjob sets (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and joins one gloo process group; DistributedDataParallel averages the gradients,
so every rank ends with the same weights. Runs on the CPU in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def say(line: str) -> None:
    # One write per line: under torchrun several ranks share one stdout, and print() writes the
    # text and its newline apart (PYTHONUNBUFFERED), so their lines would run into each other.
    sys.stdout.write(line + "\n")


def dataset(n: int = 2048) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, generator=g)
    y = 3 * x - 1 + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()

    dist.init_process_group(backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if rank == 0:
        say(f"world size {world}, master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")

    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    loader = DataLoader(data, batch_size=64, sampler=sampler)
    model = DistributedDataParallel(nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item() * len(x), len(x)])
        dist.all_reduce(total)  # the mean loss over every rank's shard
        say(f"rank {rank} epoch {epoch + 1}/{args.epochs} loss {total[0] / total[1]:.4f}")

    w, b = model.module.weight.item(), model.module.bias.item()
    say(f"rank {rank} done: y = {w:.3f}x {b:+.3f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # End the process here, without the interpreter's finalization. gloo's worker threads outlive
    # destroy_process_group (torch 2.15), and one may still hold the last collective's tensor when
    # the interpreter finalizes; letting go of it then takes the GIL, which a finalizing interpreter
    # answers by ending the thread inside a noexcept destructor: "terminate called without an active
    # exception", SIGABRT, exit 134, after the training had finished (docs/explanation/faults.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
