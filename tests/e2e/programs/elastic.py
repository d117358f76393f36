"""An elastic trainer under torchrun: STEPS all-reduce steps over gloo, STEP_S seconds each
(AFTER_STEPS instead in a round with a node made again, when given: a test that kills a node mid-round
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
    # A round with a node made again after a loss (its pod's attempt, POD_ATTEMPT from the downward
    # API) is short; not one where an agent merely restarted its workers (a slow first rendezvous on a
    # busy node can), which would make round 0 short before any loss. The shortest wanted wins.
    want = torch.tensor([steps if os.environ.get("POD_ATTEMPT", "0") == "0" else int(sys.argv[3])])
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
