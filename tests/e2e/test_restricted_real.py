"""A job in a namespace that enforces Pod Security `restricted` and whose ResourceQuota requires
requests and limits, on the real node: the example of docs/operator/restricted.md, unchanged but for
its namespace's name, trains with real torch (DDP over gloo, a master and a worker) as user 1000
with a read-only root, the wait-for-master init container torchjob adds admitted beside it, and
succeeds. The operator runs as a process on the host, as in the other real-node tests."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Pod, ResourceQuota

from tests.docs.blocks import tested as blocks
from tests.e2e.conftest import pods, torchjob
from tests.kube.conftest import REPO, Operator

pytestmark = pytest.mark.kube
PAGE = REPO / "docs" / "operator" / "restricted.md"


def page_namespace(node: Client) -> tuple[str, str]:
    """The page's restricted namespace and quota made under a fresh name; the page's job, for it."""
    ns = f"restricted-{uuid.uuid4().hex[:6]}"
    setup, job = (b.replace("team-a", ns) for b in blocks(PAGE, "test_a_restricted_job_trains_to_success_in_a_"
                                                           "restricted_namespace"))
    for obj in codecs.load_all_yaml(setup):
        node.create(obj)
    return ns, job


def test_a_restricted_job_trains_to_success_in_a_restricted_namespace(
        node_kubeconfig: str, node: Client, node_operator: Operator, tmp_path: Path) -> None:
    ns, job = page_namespace(node)
    try:
        labels = node.get(Namespace, ns).metadata.labels or {}
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        # The quota requires limits: a compliant pod that says none is refused (once its status is in)
        bare = Pod.from_dict({"metadata": {"name": "bare", "namespace": ns}, "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "x", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}})
        refusal = ""
        for _ in range(100):
            try:
                node.create(bare, dry_run=True)
            except ApiError as e:
                refusal = str(e.status.message)
                if "must specify" in refusal:
                    break
            time.sleep(0.1)
        assert "failed quota: compute: must specify limits.cpu" in refusal, refusal
        path = tmp_path / "job.yaml"
        path.write_text(job)
        t0 = time.monotonic()
        run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
        took = time.monotonic() - t0
        assert run.returncode == 0, run.stdout + run.stderr
        assert "torchjob: job ddp-restricted succeeded" in run.stderr
        logs = torchjob(node_kubeconfig, "logs", "ddp-restricted", "-n", ns)
        assert logs.returncode == 0, logs.stderr
        assert "world size 2, master ddp-restricted-master-0.ddp-restricted:" in logs.stdout
        for rank in range(2):
            assert re.search(rf"rank {rank} epoch 3/3 loss 0\.0\d+", logs.stdout), logs.stdout
        made = {p.metadata.name: p for p in pods(node, "ddp-restricted", ns)}
        worker = made["ddp-restricted-worker-0"]
        init: Any = worker.spec.initContainers[0]
        assert init.name == "wait-for-master" and init.securityContext.runAsNonRoot
        assert init.resources.limits == {"cpu": "100m", "memory": "64Mi"}
        assert worker.status.initContainerStatuses[0].state.terminated.exitCode == 0  # it ran, as user 1000
        assert worker.spec.securityContext.runAsUser == 1000
        quota = node.get(ResourceQuota, "compute", namespace=ns)
        print(f"restricted job: run --kube to succeeded in {took:.1f}s; quota used {quota.status.used}")
        print(yaml.safe_dump({"init": init.securityContext.to_dict()}))
    finally:
        node.delete(Namespace, ns)


def test_torchrun_runs_as_65532_with_a_read_only_root_and_no_home(
        node_kubeconfig: str, node: Client, node_operator: Operator, tmp_path: Path) -> None:
    """The page's job through torchrun (two processes a pod) as user 65532, HOME unset: torchrun needs
    only the writable /tmp the template mounts (without it: `No usable temporary directory found`)."""
    ns, job = page_namespace(node)
    try:
        data = yaml.safe_load(job)
        data["metadata"]["name"] = "ddp-torchrun"
        data["spec"]["nprocPerNode"] = "2"
        for rspec in data["spec"]["pytorchReplicaSpecs"].values():
            pod = rspec["template"]["spec"]
            pod["securityContext"].update(runAsUser=65532, runAsGroup=65532)
            pod["containers"][0].pop("env")
            pod["containers"][0]["command"] = ["torchrun", "examples/ddp/train.py", "--epochs", "1"]
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(data))
        run = torchjob(node_kubeconfig, "run", str(path), "-n", ns, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        logs = torchjob(node_kubeconfig, "logs", "ddp-torchrun", "-n", ns)
        assert "world size 4," in logs.stdout, logs.stdout
        for rank in range(4):  # each process trained and ended with the weights DDP kept in step
            assert re.search(rf"rank {rank} done: y = ", logs.stdout), logs.stdout
    finally:
        node.delete(Namespace, ns)
