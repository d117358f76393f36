"""The Kubeflow SDK's TrainerClient (`kubeflow` from PyPI, code unchanged) against torchjob serving
Kubeflow Trainer v2's TrainJob API on the real node: the function the SDK ships runs as real torch
on two nodes (real pods, real torch.distributed over the pods' network, PET_MASTER_ADDR resolved by
CoreDNS), the SDK follows it to Running and Complete, reads its steps, logs and events, a failing
function makes it raise, and deleting the TrainJob takes its pods (the garbage collector follows
their owner reference)."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.e2e.conftest import wait_for
from tests.e2e.images import TESTS_IMAGE
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.labels.trainjob import JOBSET_NAME
from torchjob.kube.served import trainer_objects

trainer = pytest.importorskip("kubeflow.trainer")


def sdk(kubeconfig: str, namespace: str) -> Any:
    from kubeflow.common.types import KubernetesBackendConfig

    return trainer.TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))


def all_reduce(label: str) -> None:
    """Shipped by the SDK into the command of every node, and run there by torchrun."""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([dist.get_rank() + 1])
    dist.all_reduce(t)
    print(f"{label}: rank {dist.get_rank()} of {dist.get_world_size()} on node {os.environ['PET_NODE_RANK']} "
          f"sum {int(t.item())}", flush=True)
    dist.destroy_process_group()


def fail(code: int) -> None:
    import sys

    print("failing on purpose", flush=True)
    sys.exit(code)


def runtime(namespace: str | None, name: str, backoff: int | None = None) -> dict[str, Any]:
    rt = trainer_objects.default_runtime(TESTS_IMAGE)
    if namespace is not None:
        rt["kind"] = "TrainingRuntime"
        rt["metadata"] = {**rt["metadata"], "name": name, "namespace": namespace}
    if backoff is not None:
        rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = backoff
    return rt


def pods_of(node: Client, name: str, ns: str) -> list[Pod]:
    return list(node.list(Pod, namespace=ns, labels={JOBSET_NAME: name}))


def test_the_sdk_trains_a_function_on_two_real_nodes_and_follows_it(node_kubeconfig: str, node: Client,
                                                                    ns: str) -> None:
    apply([runtime(None, "torch-distributed"), *trainer_objects.public_objects()[:2]], node_kubeconfig)
    client = sdk(node_kubeconfig, ns)
    assert "torch-distributed" in [r.name for r in client.list_runtimes()]
    name = client.train(runtime="torch-distributed", trainer=trainer.CustomTrainer(
        func=all_reduce, func_args={"label": "sdk"}, image=TESTS_IMAGE, num_nodes=2,
        resources_per_node={"cpu": 1}))
    client.wait_for_job_status(name, status={"Running", "Complete"}, timeout=240, polling_interval=1)
    job = client.wait_for_job_status(name, status={"Complete"}, timeout=240, polling_interval=1)
    # Complete once every node has succeeded, as Trainer's JobSet is: no step is still Running then
    assert {s.name: s.status for s in job.steps} == {"node-0": "Succeeded", "node-1": "Succeeded"}
    assert {s.device_count for s in job.steps} == {"1"}  # PET_NPROC_PER_NODE: the CPUs asked for
    logs = "".join(client.get_job_logs(name, step="node-0"))
    # 2 nodes x 1 process: ranks 0 and 1, +1 each, sum 3
    assert "rank 0 of 2 on node 0 sum 3" in logs, logs
    assert "rank 1 of 2 on node 1 sum 3" in "".join(client.get_job_logs(name, step="node-1"))
    assert any(e.involved_object_kind == "TrainJob" for e in client.get_job_events(name))
    assert len(pods_of(node, name, ns)) == 2
    client.delete_job(name)
    wait_for("its pods collected", lambda: not pods_of(node, name, ns), timeout=120)


def test_a_failing_function_makes_the_sdk_raise(node_kubeconfig: str, node: Client, ns: str) -> None:
    apply([runtime(ns, "torch-once", backoff=0)], node_kubeconfig)
    client = sdk(node_kubeconfig, ns)
    name = client.train(runtime="torch-once", trainer=trainer.CustomTrainer(
        func=fail, func_args={"code": 3}, image=TESTS_IMAGE, num_nodes=2, resources_per_node={"cpu": 1}))
    with pytest.raises(RuntimeError, match="Failed"):
        client.wait_for_job_status(name, status={"Complete"}, timeout=240, polling_interval=1)
    # the node that failed first has it; the other may be stopped before it printed (the job failed then)
    logs = "".join(line for step in ("node-0", "node-1") for line in client.get_job_logs(name, step=step))
    assert "failing on purpose" in logs


def test_an_elastic_trainjob_of_min_max_nodes_runs(node_kubeconfig: str, node: Client, ns: str) -> None:
    """`torchjob.dev/nodes: 1:2` (torchjob's; Trainer's elastic TrainJob is its KEP-2903): two nodes
    meet in a c10d rendezvous and train as one group."""
    from lightkube import codecs

    from tests.kube.test_trainjob_api import condition
    from torchjob.kube.machinery.client import TrainJobRes

    apply([runtime(None, "torch-distributed")], node_kubeconfig)
    node.create(codecs.from_dict({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "elastic", "namespace": ns, "annotations": {"torchjob.dev/nodes": "1:2"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"image": TESTS_IMAGE, "numNodes": 2, "command": ["torchrun", "/opt/tests/ddp_step.py"],
                             "resourcesPerNode": {"requests": {"cpu": "1"}}}}}), namespace=ns)

    def ended() -> dict[str, Any] | None:
        status = node.get(TrainJobRes, "elastic", namespace=ns).to_dict().get("status") or {}
        return status if condition(status, "Complete") or condition(status, "Failed") else None

    status = wait_for("the elastic TrainJob ended", ended, timeout=240, every=1)
    assert condition(status, "Complete") is not None, status
    found = pods_of(node, "elastic", ns)
    env = {e.name: e.value for e in found[0].spec.containers[0].env if e.value is not None}
    assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_BACKEND"] == "c10d"
    logs = "".join(line for p in found for line in node.log(p.metadata.name, namespace=ns, container="node"))
    assert logs.count("all-reduce ok: 3") == 2, logs  # both nodes in one group of 2: 1 + 2
