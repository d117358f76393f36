"""The Kubeflow SDK (`kubeflow-training` from PyPI, its `TrainingClient`, code unchanged) against
torchjob's operator serving `pytorchjobs.kubeflow.org`: a real kube-apiserver, the operator as a
process; the test plays the kubelet (its pods run and exit as told). What is checked is that the
SDK answers as it does for Kubeflow's operator."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Pod

from tests.kube.conftest import Operator, set_pod
from tests.kube.test_kubeflow_api import kubeflow_operator  # noqa: F401 (the fixture)
from tests.kube.test_kubeflow_crd import pytorchjobs, seed  # noqa: F401 (the fixture)
from tests.kube.test_operator import wait_pods

training = pytest.importorskip("kubeflow.training")


def sdk_job(data: dict[str, Any]) -> Any:
    """A PyTorchJob as the SDK's own model (KubeflowOrgV1PyTorchJob), made by its deserializer."""
    from kubeflow.training.api_client import ApiClient
    from kubeflow.training.utils.utils import FakeResponse

    return ApiClient().deserialize(FakeResponse(data), "KubeflowOrgV1PyTorchJob")


def client(kubeconfig: str, namespace: str) -> Any:
    return training.TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="PyTorchJob")


def run_pods(kube: Client, name: str, namespace: str, exits: dict[str, int]) -> None:
    """The kubelet's part: every pod of the job runs, then those in `exits` end with that code."""
    pods = {p.metadata.name: p for p in wait_pods(kube, name, namespace, 3)}
    for p in pods.values():
        set_pod(kube, p, "Running")
    for pod, code in exits.items():
        set_pod(kube, pods[f"{name}-{pod}"], "Succeeded" if code == 0 else "Failed", code)


def test_create_wait_get_pods_and_delete_with_the_sdk(kube: Client, kubeconfig: str, namespace: str,
                                                      kubeflow_operator: Operator) -> None:  # noqa: F811
    sdk = client(kubeconfig, namespace)
    data = seed("mnist")
    data["metadata"]["namespace"] = namespace
    data["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}  # the SDK's model requires one
    sdk.create_job(job=sdk_job(data))
    got = sdk.get_job("mnist")
    assert got.spec.pytorch_replica_specs["Worker"].replicas == 2
    assert got.spec.run_policy.suspend is False  # the CRD's default, as Kubeflow's
    run_pods(kube, "mnist", namespace, {})
    sdk.wait_for_job_conditions("mnist", expected_conditions={"Running"}, wait_timeout=60, polling_interval=1)
    set_pod(kube, kube.get(Pod, "mnist-master-0", namespace=namespace), "Succeeded", 0)
    done = sdk.wait_for_job_conditions("mnist", wait_timeout=60, polling_interval=1)
    assert sdk.is_job_created("mnist") and sdk.is_job_succeeded("mnist") and not sdk.is_job_running("mnist")
    assert done.status.replica_statuses["Master"].succeeded == 1
    assert done.status.completion_time is not None
    assert sdk.get_job_pod_names("mnist", is_master=True) == ["mnist-master-0"]
    assert sorted(sdk.get_job_pod_names("mnist", replica_type="worker")) == ["mnist-worker-0", "mnist-worker-1"]
    assert sdk.get_job_pod_names("mnist", replica_type="worker", replica_index=1) == ["mnist-worker-1"]
    sdk.delete_job("mnist")
    assert "mnist" not in [j.metadata.name for j in sdk.list_jobs()]


def test_wait_for_running_then_a_failed_job_raises(kube: Client, kubeconfig: str, namespace: str,
                                                  kubeflow_operator: Operator) -> None:  # noqa: F811
    sdk = client(kubeconfig, namespace)
    # made as `kubectl create -f` makes it, with no runPolicy: the SDK still reads it (the CRD stores
    # runPolicy: {} by default; its model of a PyTorchJob requires one)
    data = seed("broken")
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["restartPolicy"] = "Never"
    kube.create(codecs.from_dict(data), namespace=namespace)
    assert sdk.get_job("broken").spec.run_policy.suspend is False
    run_pods(kube, "broken", namespace, {})
    job = sdk.wait_for_job_conditions("broken", expected_conditions={"Running"}, wait_timeout=60, polling_interval=1)
    assert sdk.is_job_running(job=job)
    pods = {p.metadata.name: p for p in wait_pods(kube, "broken", namespace, 3)}
    set_pod(kube, pods["broken-worker-1"], "Failed", 2)
    with pytest.raises(RuntimeError, match="Failed"):
        sdk.wait_for_job_conditions("broken", wait_timeout=60, polling_interval=1)
    assert sdk.is_job_failed("broken")
