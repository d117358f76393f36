"""Join the process group, all-reduce once, exit. Options make a replica misbehave:

--fail-replica NAME --fail-code N   that replica exits N before joining (the others then wait in
                                    init_process_group, which is what must not be left hanging)
--fail-once-dir DIR                 with the above: fail only on the first attempt (a marker
                                    file in DIR remembers), then join normally
--raise                             the failing replica raises under torch's @record instead
--sleep S                           sleep S seconds after the all-reduce (for stop tests)
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--fail-replica")
parser.add_argument("--fail-code", type=int, default=1)
parser.add_argument("--fail-once-dir")
parser.add_argument("--raise", dest="raise_", action="store_true")
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

rtype = os.environ.get("TORCHJOB_REPLICA_TYPE", "proc")
name = f"{rtype}-{os.environ.get('TORCHJOB_REPLICA_INDEX', os.environ.get('LOCAL_RANK', '0'))}"
if args.fail_replica == name:
    marker = os.path.join(args.fail_once_dir, name) if args.fail_once_dir else None
    if marker is None or not os.path.exists(marker):
        if marker:
            open(marker, "w").close()
        if args.raise_:
            from torch.distributed.elastic.multiprocessing.errors import record

            @record
            def broken() -> None:
                raise RuntimeError(f"{name} could not load its shard")

            broken()
        print(f"{name} failing with {args.fail_code}", flush=True)
        sys.exit(args.fail_code)

import torch  # noqa: E402  (after the early exit: failing replicas need not import torch)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t
print(f"rank {dist.get_rank()}/{n} all-reduce ok: {t.item():g}", flush=True)
if args.sleep:
    time.sleep(args.sleep)
dist.destroy_process_group()
