"""The operator at scale, on a real control plane (scripts/dev-cluster.sh: etcd, kube-apiserver,
kube-scheduler and KWOK fake nodes, so pods are scheduled and run without containers).

N jobs x 4 replicas (1 master + 3 workers) are created at once; measured:
  - time until every pod exists, and pods per second;
  - time until every job is Running (the scheduler bound the pods, KWOK ran them, the operator saw it);
  - the operator's peak memory (RSS);
  - the API server's own pod-creation rate for the same number of pods created directly, the
    ceiling any operator shares (the ratio is the operator's rate against it).

Usage: python bench/operator_scale.py [--jobs 200]  (the Kubeflow training-operator is not measured:
it is not built here; see the README).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod

REPO = Path(__file__).resolve().parents[1]
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def job(name: str, namespace: str) -> dict[str, Any]:
    template = {"spec": {"tolerations": [TOLERATION],
                         "containers": [{"name": "pytorch", "image": "example/trainer:1",
                                         "command": ["python", "train.py"]}]},
                "metadata": {"annotations": {"torchjob.dev/wait-for-master": "false"}}}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 3, "template": template}}}}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def count_pods(client: AsyncClient, namespace: str) -> int:
    return len([p async for p in client.list(Pod, namespace=namespace)])


async def create_all(client: AsyncClient, objs: list[Any], concurrency: int = 32) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(o: Any) -> None:
        async with sem:
            await client.create(o)

    await asyncio.gather(*(one(o) for o in objs))


async def main_async(args: argparse.Namespace, kubeconfig: str) -> None:
    from torchjob.kube.client import TorchJobRes

    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    stamp = int(time.time())
    n_pods = args.jobs * 4

    # The API server's own rate: the same number of pods, created directly.
    raw_ns = f"bench-raw-{stamp}"
    await client.create(Namespace(metadata=ObjectMeta(name=raw_ns)))
    pods = [Pod.from_dict({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"p-{i}", "namespace": raw_ns},
                           "spec": {"containers": [{"name": "c", "image": "x"}]}}) for i in range(n_pods)]
    t0 = time.perf_counter()
    await create_all(client, pods)
    direct_s = time.perf_counter() - t0

    ns = f"bench-{stamp}"
    await client.create(Namespace(metadata=ObjectMeta(name=ns)))
    port = free_port()
    log = open(f"/tmp/torchjob-bench-operator-{stamp}.log", "w")  # noqa: SIM115 (lives as long as the operator)
    op = subprocess.Popen([sys.executable, "-m", "torchjob", "operator", "--kubeconfig", kubeconfig,
                           "--no-leader-elect", "--metrics-port", str(port), "--workers", str(args.workers)],
                          stdout=log, stderr=log)
    try:
        await asyncio.sleep(3)
        base_rss = rss_mb(op.pid)
        peak = base_rss
        jobs = [TorchJobRes.from_dict(job(f"j{i}", ns)) for i in range(args.jobs)]
        t0 = time.perf_counter()
        await create_all(client, jobs)
        created_s = time.perf_counter() - t0
        all_pods_s = running_s = None
        deadline = time.perf_counter() + args.timeout
        while time.perf_counter() < deadline:
            peak = max(peak, rss_mb(op.pid))
            elapsed = time.perf_counter() - t0
            if all_pods_s is None and await count_pods(client, ns) >= n_pods:
                all_pods_s = elapsed
            if all_pods_s is not None:
                states = [((o.status or {}).get("state")) async for o in client.list(TorchJobRes, namespace=ns)]
                if sum(s == "Running" for s in states) == args.jobs:
                    running_s = elapsed
                    break
            await asyncio.sleep(0.5)
        peak = max(peak, rss_mb(op.pid))
    finally:
        op.terminate()
        op.wait(10)
        await client.close()

    print(f"\noperator at scale: {args.jobs} jobs x 4 replicas = {n_pods} pods, real kube-apiserver + "
          f"kube-scheduler + KWOK, {args.workers} workers")
    print(f"  jobs created by the client in        {created_s:7.2f} s")
    if all_pods_s is not None:
        print(f"  every pod exists after               {all_pods_s:7.2f} s  ({n_pods / all_pods_s:.0f} pods/s)")
    else:
        print("  not every pod was created in time")
    print(f"  every job Running after              {running_s:7.2f} s" if running_s else "  not every job ran in time")
    print(f"  the API server alone (direct creates) {direct_s:6.2f} s  ({n_pods / direct_s:.0f} pods/s)")
    if all_pods_s:
        print(f"  operator rate / API-server rate      {direct_s / all_pods_s:7.2f}")
    print(f"  operator memory: {base_rss:.0f} MB idle, {peak:.0f} MB peak")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    kubeconfig = os.environ.get("TORCHJOB_TEST_KUBECONFIG")
    started = not kubeconfig
    # A cluster of its own (never the tests'), with room for every pod on the fake nodes.
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": "/tmp/torchjob-bench-cluster", "DEVCLUSTER_NODES": "4",
           "DEVCLUSTER_NODE_PODS": str(max(110, args.jobs * 4 // 4 + 10))}
    if started:
        out = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "up"], capture_output=True,
                             text=True, check=True, env=env)
        kubeconfig = out.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
    assert kubeconfig
    try:
        from torchjob.kube.crd import crd
        from torchjob.kube.install import apply

        apply([crd()], kubeconfig)
        time.sleep(2)
        asyncio.run(main_async(args, kubeconfig))
    finally:
        if started:
            subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "down"], capture_output=True, env=env)


if __name__ == "__main__":
    main()
