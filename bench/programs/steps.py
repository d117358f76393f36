"""Train in numbered steps (a gloo all-reduce each), resuming from a checkpoint, and log when.

    python steps.py --steps N --step-time S --dir DIR [--stop-file FILE]

Every rank appends timestamped lines to DIR/rank-<RANK>.log (and prints them):
    @<unix time> rank R start pid P pgid G replica NAME   started (before torch is imported)
    @<unix time> rank R imported           torch imported
    @<unix time> rank R joined W           init_process_group returned (rendezvous done)
    @<unix time> rank R step S             step S done
Rank 0 writes the last step done to DIR/step after each step and tells the others where to begin,
so a restarted job resumes where it stopped, as a training script with checkpoints does; with
--ckpt-every K only after every K-th step (what a job that saves periodically loses at a fault).
With --save-on-notice every rank reads torchjob.report.stopping() each step (told to all in that
step's all-reduce): once any rank got the notice, rank 0 saves the step, each logs "saved S" and
exits 143. With --stop-file, every rank ends after the step in which rank 0 saw FILE.
bench/recovery.py reads these lines to time a recovery on any runtime (same clock: one machine).
"""

import os
import sys
import time

STARTED = time.time()
RANK = int(os.environ.get("RANK", "0"))


def main() -> int | None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-time", type=float, default=0.2)
    parser.add_argument("--dir", required=True)
    # torch's default (30 min for gloo) would leave a peer of a killed rank hanging that long in its
    # collective where no runtime stops it; a short one lets every runtime's restart be timed
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--stop-file", default=None)
    parser.add_argument("--ckpt-every", type=int, default=1)
    parser.add_argument("--save-on-notice", action="store_true")
    args = parser.parse_args()
    stopping = None
    if args.save_on_notice:  # from here on SIGTERM is a notice (the image's copy of torchjob/report.py)
        from torchjob.report import stopping

        stopping()
    os.makedirs(args.dir, exist_ok=True)
    out = open(os.path.join(args.dir, f"rank-{RANK}.log"), "a", buffering=1)  # noqa: SIM115 - for the run

    def say(what: str, when: float | None = None) -> None:
        line = f"@{time.time() if when is None else when:.3f} rank {RANK} {what}"
        out.write(line + "\n")
        print(line, flush=True)

    replica = f"{os.environ.get('TORCHJOB_REPLICA_TYPE', 'proc')}-{os.environ.get('TORCHJOB_REPLICA_INDEX', RANK)}"
    say(f"start pid {os.getpid()} pgid {os.getpgid(0)} replica {replica.lower()}", STARTED)
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    say("imported")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    world = dist.get_world_size()
    say(f"joined {world}")
    ckpt = os.path.join(args.dir, "step")
    begin = torch.zeros(1, dtype=torch.int64)
    if RANK == 0 and os.path.exists(ckpt):
        with open(ckpt) as f:
            begin[0] = int(f.read().strip() or 0)
    dist.broadcast(begin, 0)
    weight = torch.zeros(1024)
    for step in range(int(begin[0]) + 1, args.steps + 1):
        grad = torch.ones(1026) * (RANK + 1)
        grad[1024] = float(RANK == 0 and args.stop_file is not None and os.path.exists(args.stop_file))
        grad[1025] = float(stopping is not None and stopping())
        dist.all_reduce(grad)
        weight -= 0.01 * grad[:1024] / world
        time.sleep(args.step_time)
        if RANK == 0 and (step % args.ckpt_every == 0 or grad[1025] > 0):
            with open(ckpt + ".tmp", "w") as f:
                f.write(str(step))
            os.replace(ckpt + ".tmp", ckpt)
        say(f"step {step}")
        if grad[1025] > 0:
            dist.barrier()  # every rank exits once rank 0 saved
            dist.destroy_process_group()
            say(f"saved {step}")
            return 143
        if grad[1024] > 0:
            break
    dist.destroy_process_group()
    say("done")


if __name__ == "__main__":
    sys.exit(main())
