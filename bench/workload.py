"""The benchmark's work: join the gloo group, all-reduce once, exit.

`--fail-rank R` makes rank R exit 1 before joining, so the others wait in init_process_group
(the teardown benchmark). Ranks come from the env torchjob, torchrun or the by-hand launcher set.
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()
if int(os.environ.get("RANK", "0")) == args.fail_rank:
    sys.exit(1)

import torch  # noqa: E402  (after the early exit: a failing rank need not import torch)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
