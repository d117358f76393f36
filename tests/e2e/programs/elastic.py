"""An elastic trainer under torchrun: STEPS all-reduce steps over gloo, STEP_S seconds each
(AFTER_STEPS instead in a round after a restart, when given: a test that kills a node mid-round
gives round 0 a long time and the round after it a short one).
Prints `round R world W step S` (R: torchrun's restart count) so that a test can see the job go
on training, in a new round and maybe another world size, after a node is lost."""

import os
import sys
import time

import torch
import torch.distributed as dist

steps, step_s = int(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
if len(sys.argv) > 3:
    # A node made again after a loss starts its own agent (restart count 0) in the survivors' round
    # (theirs 1 or more): the round trains as long as the shortest wants.
    want = torch.tensor([steps if restart == "0" else int(sys.argv[3])])
    dist.all_reduce(want, op=dist.ReduceOp.MIN)
    steps = int(want.item())
node = os.environ.get("TORCHJOB_REPLICA_INDEX", "?")
for step in range(steps):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == world, (t, world)
    if rank == 0 or step == 0:
        print(f"node {node} rank {rank} round {restart} world {world} step {step}", flush=True)
    time.sleep(step_s)
print(f"node {node} rank {rank} round {restart} world {world} done", flush=True)
dist.destroy_process_group()
