"""A gloo DDP-style loop that saves a checkpoint on notice (torchjob.report.stopping) and resumes from
it: every step one all_reduce of a gradient-like tensor and one of the notice (MAX), so that every
rank stops at the same step; rank 0 writes CKPT (atomically) with the step it finished and the
running sum, and each rank then (after a barrier, the process group destroyed) exits 143. Each rank
appends what it did to TRACE-<rank>: "start S", "step K" for every finished step, "saved K"; at the
end "done K SUM".

    python save_on_notice.py CKPT TRACE_PREFIX STEPS STEP_SECONDS|PACE_FILE

STEP_SECONDS is each step's sleep; PACE_FILE, a file holding it, read again every step: a test slows
the steps while its notice is on its way (so that training cannot end before it lands, however long
the machine makes it take) and speeds the steps left once the job resumes.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from torchjob.report import stopping


def pace(arg: str) -> float:
    try:
        return float(arg)
    except ValueError:  # a file's name
        with open(arg) as f:
            return float(f.read())


def main() -> None:
    ckpt, trace, steps, step_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    stopping()  # from here on, SIGTERM is a notice, not the end
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start, total = 0, 0.0
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            saved = json.load(f)
        start, total = saved["step"], saved["total"]
    out = open(f"{trace}-{rank}", "a", buffering=1)  # noqa: SIM115 (open until the process ends)
    out.write(f"start {start}\n")
    for step in range(start, steps):
        grad = torch.tensor([float(step + 1)])
        dist.all_reduce(grad)
        total += grad.item()
        time.sleep(pace(step_s))
        out.write(f"step {step + 1}\n")
        notice = torch.tensor([1.0 if stopping() else 0.0])
        dist.all_reduce(notice, op=dist.ReduceOp.MAX)
        if notice.item():
            if rank == 0:
                with open(ckpt + ".tmp", "w") as f:
                    json.dump({"step": step + 1, "total": total}, f)
                os.replace(ckpt + ".tmp", ckpt)
            dist.barrier()  # every rank exits once the checkpoint is written
            dist.destroy_process_group()  # not left to exit: gloo's teardown may abort (134) there
            out.write(f"saved {step + 1}\n")
            print(f"rank {rank}: saved at step {step + 1}", flush=True)
            sys.exit(143)
    out.write(f"done {steps} {total}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
