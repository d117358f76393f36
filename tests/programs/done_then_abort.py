"""A replica that reports its work complete (step N of N, synchronously: the report has landed) and
then, on the replica named by --abort, dies as torch's gloo teardown kills a process (SIGABRT, exit
134), while the others exit 0 after --linger seconds (the master tearing down more slowly). With --sync-dir
DIR --replicas N, the one that aborts waits (60 s at most) until every replica's report has landed: on a
loaded machine the master may start seconds after the worker, and then not every rank had reported."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--abort", default="worker-0")
    ap.add_argument("--linger", type=float, default=1.0)
    ap.add_argument("--sync-dir")
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as f:
        token = f.read().strip()
    replica = token.split(".")[1]  # a local token: tj1.<replica>.<attempt>.<signature>
    req = urllib.request.Request(os.environ["KUBEFLOW_TRAINER_SERVER_URL"], method="POST",
                                 data=json.dumps({"step": 10, "total": 10}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    urllib.request.urlopen(req, timeout=10).close()
    print(f"{replica} done", flush=True)
    if args.sync_dir:
        open(os.path.join(args.sync_dir, replica), "w").close()
    if replica == args.abort:
        end = time.monotonic() + 60
        while args.sync_dir and len(os.listdir(args.sync_dir)) < args.replicas and time.monotonic() < end:
            time.sleep(0.05)
        os.abort()
    time.sleep(args.linger)


if __name__ == "__main__":
    main()
