"""Stands in for T9k's torch_mnist_trainingjob.py (its user manual's parallel-training tutorial),
with the same arguments: --backend, --log_dir, --save_path, --no_cuda. T9k's script downloads
MNIST; this one trains the same kind of loop (DDP, Adam, StepLR) on a small made-up data set, so
it runs anywhere without a download. Started by torchrun, as T9k's torchrunConfig starts it."""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def say(line: str) -> None:
    # One write per line: the ranks torchrun starts in one replica share its stdout, and print()
    # writes the text and its newline apart (PYTHONUNBUFFERED), so their lines would run together.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


parser = argparse.ArgumentParser(description="DDP training of a PyTorch model (a stand-in for MNIST).")
parser.add_argument("--backend", type=str, default="gloo", choices=["gloo", "nccl", "mpi"])
parser.add_argument("--log_dir", type=str, help="Path of the log directory.")
parser.add_argument("--save_path", type=str, help="Path of the saved model.")
parser.add_argument("--no_cuda", action="store_true", default=False)
args = parser.parse_args()

dist.init_process_group(backend=args.backend)
rank, world_size = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
use_cuda = not args.no_cuda and torch.cuda.is_available()
device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
say(f"rank {rank}/{world_size} (local rank {local_rank}) on {device}, backend {args.backend}")

g = torch.Generator().manual_seed(1)
x = torch.randn(1024, 1, 8, 8, generator=g)
y = (x.mean(dim=(1, 2, 3)) > 0).long()  # ten classes in MNIST; two here
data = TensorDataset(x, y)
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, world_size, rank, seed=1))
torch.manual_seed(1)
model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2)).to(device))
optimizer = optim.Adam(model.parameters(), lr=0.001 * world_size)
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
epochs = 3
for epoch in range(1, epochs + 1):
    loader.sampler.set_epoch(epoch)
    for data_, target in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data_.to(device)), target.to(device))
        loss.backward()
        optimizer.step()
    scheduler.step()
    if rank == 0:
        say(f"epoch {epoch}/{epochs} loss: {loss.item():.4f}")
        if args.log_dir:
            os.makedirs(args.log_dir, exist_ok=True)
            with open(os.path.join(args.log_dir, "loss.txt"), "a") as f:
                f.write(f"{epoch} {loss.item():.4f}\n")
if rank == 0 and args.save_path:
    torch.save(model.module.state_dict(), args.save_path)
    say(f"saved {args.save_path}")
dist.destroy_process_group()
