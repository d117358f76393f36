"""The operator's CPU for one round of one big job after one pod event, in process, against the
recording fake API of tests/controller/fakeapi.py (no cluster): a job of --pods pods (a master and
the rest workers) is made and every pod set Running, then, --rounds times, one pod's status is
written again (the same phase: a new resourceVersion, nothing for core to act on) and the job's
round timed (process CPU), with core.reconcile's share. What a round costs beyond what changed
(kube/controller/pods/seen_pods.py; docs/explanation/performance.md, "One job of 4,096 pods").

Usage: PYTHONPATH=<a torchjob src>:. python bench/round_cost.py [--pods 4096] [--rounds 10]
(from the repository's root; PYTHONPATH's src picks the tree measured, e.g. a checkout before a change)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import KEY, NS, one_round, settled, synced
from tests.controller.test_sequencing import torchjob as job_data

import torchjob
import torchjob.kube.controller.round.reconciler as reconciler_module


async def measure(pods: int, rounds: int) -> tuple[float, float]:
    """(ms of CPU a round, ms of it in core.reconcile), over `rounds` rounds after one pod event each."""
    core = [0.0]
    decide = reconciler_module.reconcile

    def timed(*args: Any) -> Any:
        t = time.process_time()
        try:
            return decide(*args)
        finally:
            core[0] += time.process_time() - t

    api = FakeApi()
    api.put(job_data(workers=pods - 1))
    async with synced(api) as c:
        await one_round(api, c)
        names = api.named("Pod", NS)
        for pod in names:
            api.kubelet(pod, NS, "Running")
        await one_round(api, c)
        await one_round(api, c)
        reconciler_module.reconcile = timed  # type: ignore[assignment]
        total = 0.0
        try:
            for i in range(rounds):
                api.kubelet(names[(i * 7) % len(names)], NS, "Running")
                await settled(api, c)
                t = time.process_time()
                await c.reconciler.reconcile(KEY)
                total += time.process_time() - t
                await settled(api, c)
        finally:
            reconciler_module.reconcile = decide
    return 1000 * total / rounds, 1000 * core[0] / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if args.pods < 2 or args.rounds < 1:
        parser.error("--pods: 2 or more (a master and a worker); --rounds: 1 or more")
    ms, core = asyncio.run(measure(args.pods, args.rounds))
    print(f"{args.pods} pods ({torchjob.__file__}): {ms:.1f} ms of CPU a round after one pod event, "
          f"{core:.1f} ms of it in core.reconcile (mean of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
