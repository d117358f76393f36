"""Train for a number of steps (an all-reduce of a gradient per step, gloo) and report progress.

--steps N --step-time S   N steps of about S seconds
--kubeflow                report with the Kubeflow SDK's update_trainjob_status (rank 0, as Trainer's
                          docs show) instead of torchjob.report (every rank)
--hang-replica NAME       that replica deadlocks in an all-reduce at --hang-at (on a side group the
--hang-at K               others never enter, while they wait in the step's all-reduce): every rank
--once-dir DIR            then hangs in all_reduce. With --once-dir only the first attempt hangs.
--slow-replica NAME       that replica's (rank-N: global rank N's) own work takes twice --step-time (a straggler:
                          the others wait for it in the all-reduce); every rank then reports it as step_time
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--step-time", type=float, default=0.05)
parser.add_argument("--kubeflow", action="store_true")
parser.add_argument("--hang-replica")
parser.add_argument("--hang-at", type=int, default=5)
parser.add_argument("--once-dir")
parser.add_argument("--slow-replica")
args = parser.parse_args()

name = f"{os.environ['TORCHJOB_REPLICA_TYPE']}-{os.environ['TORCHJOB_REPLICA_INDEX']}"
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
side = dist.new_group([0, 1]) if world > 1 else None  # every rank creates it; only the hang uses it
hang = args.hang_replica == name
if hang and args.once_dir:
    marker = os.path.join(args.once_dir, name)
    hang = not os.path.exists(marker)
    open(marker, "w").close()

if args.kubeflow:
    from kubeflow.trainer import update_trainjob_status
else:
    from torchjob.report import report

weight = torch.zeros(8)
for step in range(1, args.steps + 1):
    grad = torch.ones(8) * (rank + 1)
    if hang and step == args.hang_at:
        print(f"{name} hangs in all_reduce at step {step}", flush=True)
        dist.all_reduce(grad, group=side)  # rank 0 never joins: a deadlock, as a mismatched collective is
    dist.all_reduce(grad)
    weight -= 0.01 * grad / world
    loss = float(weight.abs().sum())
    started = time.perf_counter()
    slow = args.slow_replica in (name, f"rank-{rank}")
    time.sleep(args.step_time * (2 if slow else 1))
    own = {"step_time": time.perf_counter() - started} if args.slow_replica else {}
    if args.kubeflow:
        if rank == 0:
            sent = update_trainjob_status(progress_percent=int(100 * step / args.steps),
                                          estimated_remaining_seconds=int((args.steps - step) * args.step_time),
                                          metrics={"loss": loss, "accuracy": 0.5 + step / (2 * args.steps)})
            if sent:
                print(f"kubeflow update_trainjob_status sent at step {step}", flush=True)
    else:
        report(step=step, total=args.steps, loss=loss, **own)
print(f"rank {rank} done after {args.steps} steps, loss {loss:.4f}", flush=True)
dist.destroy_process_group()
