"""Stands in for the code of gcr.io/kubeflow-ci/pytorch-dist-sendrecv-test:1.0 (seed 000, whose
container has no command: the image's entrypoint runs it). Rank 0 sends each other rank a tensor
with point-to-point send/recv over gloo, the way that test image does, and every rank checks it."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.zeros(1)
if rank == 0:
    for peer in range(1, world):
        dist.send(torch.tensor([float(peer * 10)]), dst=peer)
else:
    dist.recv(t, src=0)
    assert t.item() == rank * 10, t
print(f"rank {rank}/{world} send/recv ok via {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
dist.barrier()
dist.destroy_process_group()
