"""What the stacks front costs a pod's start (issue 42): on a cluster, every pod whose command Python runs is made with
torchjob's stacks front in front of it by default (kube/objects/front/stacks.py). This starts N one-replica jobs of each
kind at once (the default, with the front, and one annotated torchjob.dev/stacks: "false", without it), their
command `python /bench/first_line.py` (a ConfigMap's: `python -c` gets no front), which prints how long after its
container's first process was exec'd its own first line ran, then how long until `import torch` was done (the
front execs the command in the same process, so those times hold the front's whole run: its interpreter's start,
the hook it writes, the watcher it forks), and when the pod was made and its container started. It prints the
medians of each kind.

Usage: python bench/stacks_front.py --kubeconfig PATH [-n NAMESPACE] [--pods 5] [--image IMAGE]
(the image must have python and torch; the dev cluster's real node has localhost/torchjob-tests:dev)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# Seconds since the container's first process was exec'd (its start time, in clock ticks since boot), read on the
# same clock (CLOCK_BOOTTIME); then the first line.
PROGRAM = """import os, time
ticks = int(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])
since = lambda: (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf('SC_CLK_TCK')) * 1000
print('since-exec-ms %.1f' % since(), flush=True)
import torch
print('after-torch-ms %.1f' % since(), flush=True)
"""
CONFIGMAP = "stacks-front-bench"


def job(name: str, namespace: str, image: str, front: bool) -> dict[str, Any]:
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {} if front else {"torchjob.dev/stacks": "false"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
                "spec": {"containers": [{"name": "pytorch", "image": image, "imagePullPolicy": "IfNotPresent",
                                         "command": ["python", "/bench/first_line.py"],
                                         "volumeMounts": [{"name": "bench", "mountPath": "/bench"}]}],
                         "volumes": [{"name": "bench", "configMap": {"name": CONFIGMAP}}]}}}}}}


def main() -> None:
    from lightkube import Client, KubeConfig
    from lightkube.resources.core_v1 import ConfigMap, Pod

    from torchjob.kube.machinery.client import TorchJobRes

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("-n", "--namespace", default="default")
    ap.add_argument("--pods", type=int, default=5)
    ap.add_argument("--image", default="localhost/torchjob-tests:dev")
    args = ap.parse_args()
    kube = Client(KubeConfig.from_file(args.kubeconfig))
    stamp = int(time.time()) % 100000
    kube.apply(ConfigMap.from_dict({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": CONFIGMAP, "namespace": args.namespace},
                                    "data": {"first_line.py": PROGRAM}}), field_manager="bench")
    names = {f"front-{stamp}-{i}": True for i in range(args.pods)}
    names.update({f"plain-{stamp}-{i}": False for i in range(args.pods)})
    for name, front in names.items():
        kube.create(TorchJobRes.from_dict(job(name, args.namespace, args.image, front)))
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    end = time.monotonic() + 300
    left = dict(names)
    while left and time.monotonic() < end:
        for name, front in list(left.items()):
            try:
                pod = kube.get(Pod, f"{name}-master-0", namespace=args.namespace)
                lines = list(kube.log(pod.metadata.name, namespace=args.namespace, container="pytorch"))
            except Exception:
                continue
            since = next((float(line.split()[1]) for line in lines if line.startswith("since-exec-ms")), None)
            torch = next((float(line.split()[1]) for line in lines if line.startswith("after-torch-ms")), None)
            started = next((s.state.running.startedAt if s.state.running else s.state.terminated.startedAt
                            for s in pod.status.containerStatuses or [] if s.state and (s.state.running
                                                                                       or s.state.terminated)),
                           None)
            if since is None or torch is None or started is None:
                continue
            made: datetime = pod.metadata.creationTimestamp
            results[front].append((since, torch, (started - made).total_seconds()))
            del left[name]
        time.sleep(0.5)
    for name in names:
        kube.delete(TorchJobRes, name, namespace=args.namespace)
    for front, label in ((True, "with the front (the default)"), (False, 'without it ("false")')):
        got = results[front]
        if not got:
            print(f"{label}: no pod answered")
            continue
        first, torch, started = (statistics.median(g[i] for g in got) for i in range(3))
        print(f"{label}, {len(got)} pods: exec to the command's first line {first:.0f} ms median (max "
              f"{max(g[0] for g in got):.0f}), to torch imported {torch:.0f} ms median; pod made to container "
              f"started {started:.1f} s median")


if __name__ == "__main__":
    main()
