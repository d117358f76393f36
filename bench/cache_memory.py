"""What the operator's caches of N jobs x 4 pods weigh, without a cluster: the informers of a
`torchjob operator` (its own Informer class, transforms and caches, from --src or the torchjob this
Python imports) are given N TorchJobs, their 4 pods each and their Services, shaped as the API
server returns them once every job is Running (the bench's jobs of operator_scale.py, the pods
`torchjob render --kube` renders, with the status KWOK gives a running pod), the way their watch
events fill them (`Informer.remember`); each job gets the memory a round gives it. The process's
RSS is read before and after, in a fresh interpreter that has imported the operator first.

    python bench/cache_memory.py [--jobs 10000] [--src DIR]

It measures the caches alone: the operator's peak under a real run adds what is in flight (watch
events, requests, the work queue); bench/operator_scale.py measures that.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from operator_scale import torchjob
from scale_floor import default_statuses

NS = "bench-torchjob-1795821377"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    return 0.0


def rendered(src: str | None) -> list[dict[str, Any]]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(src).resolve()), env.get("PYTHONPATH")) if p)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(torchjob("jobname", NS), f)
        f.flush()
        out = subprocess.run([sys.executable, "-m", "torchjob", "render", "--kube", f.name, "-o", "json"], env=env,
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def measure(jobs: int, objs: list[dict[str, Any]]) -> dict[str, float]:
    from torchjob.kube.controller.round.memory import Memories
    from torchjob.kube.machinery.informer import Informer, metadata_only, pod_cached, whole

    text = json.dumps(objs)
    status = json.dumps(default_statuses("jobname")[-1])
    informers = {kind: Informer(None, kind, NS, lambda o: None, transform=t)  # type: ignore[arg-type]
                 for kind, t in (("TorchJob", whole), ("Pod", pod_cached), ("Service", metadata_only))}
    memories = Memories()
    gc.collect()
    before = rss_mb()
    rv = 1000
    for i in range(jobs):
        name = f"j{i}"
        job = torchjob(name, NS)
        job["metadata"] |= {"uid": f"{i:08d}-0000-4000-8000-000000000000", "generation": 1,
                            "resourceVersion": str(rv), "creationTimestamp": "2026-11-27T23:00:00Z"}
        job["status"] = json.loads(status.replace("jobname", name))
        informers["TorchJob"].remember(job)
        for k, o in enumerate(json.loads(text.replace("jobname", name))):
            rv += 1
            o["metadata"] |= {"uid": f"{i:08d}-{k:04d}-4000-8000-000000000000", "resourceVersion": str(rv),
                              "creationTimestamp": "2026-11-27T23:00:00Z"}
            if o["kind"] == "Pod":
                o["spec"]["nodeName"] = f"kwok-node-{k}"
                o["status"] = {"phase": "Running", "hostIP": "10.0.0.1", "podIP": f"10.1.{i % 250}.{k}",
                               "startTime": "2026-11-27T23:00:01Z", "qosClass": "BestEffort",
                               "conditions": [{"type": t, "status": "True",
                                               "lastTransitionTime": "2026-11-27T23:00:01Z"}
                                              for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                               "containerStatuses": [{"name": "pytorch", "ready": True, "restartCount": 0,
                                                      "image": "example/trainer:1", "imageID": "", "started": True,
                                                      "state": {"running": {"startedAt": "2026-11-27T23:00:01Z"}}}]}
            informers[o["kind"]].remember(o)
        key = (NS, name)
        memories.of(key)
        if hasattr(memories, "settle"):
            memories.settle(key)
    gc.collect()
    after = rss_mb()
    return {"rss_before_mb": before, "rss_after_mb": after, "caches_mb": after - before,
            "objects": float(sum(len(i.cache) for i in informers.values()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--src", help="the torchjob source tree measured (default: the torchjob this Python imports)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # the fresh interpreter: the operator's modules imported, as a running operator has them
        import torchjob.kube.controller.process.operator  # noqa: F401

        objs = json.loads(sys.stdin.read())
        print(json.dumps(measure(args.jobs, objs)))
        return
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(args.src).resolve()), env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, __file__, "--child", "--jobs", str(args.jobs)], env=env, check=True,
                         input=json.dumps(rendered(args.src)), capture_output=True, text=True)
    got = json.loads(out.stdout)
    print(f"the operator's caches of {args.jobs} jobs x 4 pods + 1 Service each ({got['objects']:.0f} objects), "
          f"from {args.src or 'the torchjob this Python imports'}")
    print(f"  RSS with the operator's modules imported (MB)     {got['rss_before_mb']:8.1f}")
    print(f"  RSS with the caches filled (MB)                   {got['rss_after_mb']:8.1f}")
    print(f"  the caches (MB)                                   {got['caches_mb']:8.1f}")
    print(f"  per job, its pods and Service (kB)                {got['caches_mb'] * 1024 / args.jobs:8.2f}")


if __name__ == "__main__":
    main()
