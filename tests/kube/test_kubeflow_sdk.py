"""The Kubeflow SDK (`kubeflow-training` from PyPI, its `TrainingClient`, code unchanged) against a
real kube-apiserver serving torchjob's `pytorchjobs.kubeflow.org` CRD. No operator runs here: the
test plays it, writing the status `kube/kubeflow_status` projects from what the real core decided,
and creating pods with the labels `kubeflow_status.pod_labels` gives them (as it plays the kubelet
elsewhere). What is checked is that the SDK, reading those, answers as it does for Kubeflow's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.types import PatchType

from tests.core.sim import simulate
from tests.jobs import make_job
from tests.kube.test_kubeflow_crd import PyTorchJobRes, pytorchjobs, seed  # noqa: F401 (the fixture)
from torchjob.kube import kubeflow_status as kf

training = pytest.importorskip("kubeflow.training")


def sdk_job(data: dict[str, Any]) -> Any:
    """A PyTorchJob as the SDK's own model (KubeflowOrgV1PyTorchJob), made by its deserializer."""
    from kubeflow.training.api_client import ApiClient
    from kubeflow.training.utils.utils import FakeResponse

    return ApiClient().deserialize(FakeResponse(data), "KubeflowOrgV1PyTorchJob")


def client(kubeconfig: str, namespace: str) -> Any:
    return training.TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="PyTorchJob")


def play_operator(kube: Client, name: str, namespace: str, exits: dict[str, list[tuple[float, int]]],
                  **job: Any) -> None:
    """Write, step by step, the status torchjob's core decides for a seed-shaped job with these exits."""
    torchjob = make_job(name, workers=2, restart_policy=job.pop("restart_policy", "OnFailure"), **job)
    for step in simulate(torchjob, exits).steps:
        kube.patch(PyTorchJobRes.Status, name, {"status": kf.kubeflow_status(torchjob, step.plan.status)},
                   namespace=namespace, patch_type=PatchType.MERGE)


def test_create_wait_get_pods_and_delete_with_the_sdk(pytorchjobs: Client, kubeconfig: str,  # noqa: F811
                                                      namespace: str) -> None:
    sdk = client(kubeconfig, namespace)
    data = seed("mnist")
    data["metadata"]["namespace"] = namespace
    data["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}  # the SDK's model requires one
    sdk.create_job(job=sdk_job(data))
    got = sdk.get_job("mnist")
    assert got.spec.pytorch_replica_specs["Worker"].replicas == 2
    assert got.spec.run_policy.suspend is False  # the CRD's default, as Kubeflow's
    assert not sdk.is_job_created("mnist")  # no status yet
    play_operator(pytorchjobs, "mnist", namespace, {"master-0": [(10, 0)], "worker-0": [(9, 0)],
                                                    "worker-1": [(9, 0)]})
    assert sdk.is_job_created("mnist") and sdk.is_job_succeeded("mnist") and not sdk.is_job_running("mnist")
    done = sdk.wait_for_job_conditions("mnist", wait_timeout=5, polling_interval=1)
    assert done.status.replica_statuses["Worker"].succeeded == 2
    assert done.status.completion_time is not None
    # the pods the operator would make, with Kubeflow's labels: the SDK finds them by those
    for rtype, index in (("Master", 0), ("Worker", 0), ("Worker", 1)):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"mnist-{rtype.lower()}-{index}", "labels": kf.pod_labels("mnist", rtype, index, True)},
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
        pytorchjobs.create(codecs.from_dict(copy.deepcopy(pod)), namespace=namespace)
    assert sdk.get_job_pod_names("mnist", is_master=True) == ["mnist-master-0"]
    assert sorted(sdk.get_job_pod_names("mnist", replica_type="worker")) == ["mnist-worker-0", "mnist-worker-1"]
    assert sdk.get_job_pod_names("mnist", replica_type="worker", replica_index=1) == ["mnist-worker-1"]
    sdk.delete_job("mnist")
    assert "mnist" not in [j.metadata.name for j in sdk.list_jobs()]


def test_wait_for_running_then_a_failed_job_raises(pytorchjobs: Client, kubeconfig: str,  # noqa: F811
                                                  namespace: str) -> None:
    sdk = client(kubeconfig, namespace)
    # made as `kubectl create -f` makes it, with no runPolicy: the SDK still reads it (the CRD stores
    # runPolicy: {} by default; its model of a PyTorchJob requires one)
    pytorchjobs.create(codecs.from_dict(seed("broken")), namespace=namespace)
    assert sdk.get_job("broken").spec.run_policy.suspend is False
    torchjob = make_job("broken", workers=2, restart_policy="Never")
    steps = simulate(torchjob, {"master-0": [(60, 0)], "worker-0": [(60, 0)], "worker-1": [(3, 2)]}).steps
    running = next(s for s in steps if s.plan.status.is_true("Running"))
    pytorchjobs.patch(PyTorchJobRes.Status, "broken", {"status": kf.kubeflow_status(torchjob, running.plan.status)},
                      namespace=namespace, patch_type=PatchType.MERGE)
    job = sdk.wait_for_job_conditions("broken", expected_conditions={"Running"}, wait_timeout=5, polling_interval=1)
    assert sdk.is_job_running(job=job)
    play_operator(pytorchjobs, "broken", namespace, {"master-0": [(60, 0)], "worker-0": [(60, 0)],
                                                     "worker-1": [(3, 2)]}, restart_policy="Never")
    assert sdk.is_job_failed("broken")
    with pytest.raises(RuntimeError, match="Failed"):
        sdk.wait_for_job_conditions("broken", wait_timeout=5, polling_interval=1)
