"""Trainer v2.4's rule on a runtime, as torchjob's CRDs enforce it against a real API server: a replicated
job's name of at most 20 characters (kubeflow/trainer#4394); the refusal names the job, its length, the
limit and the fix. The CRDs are applied as `torchjob install --trainer-api` applies them."""

from __future__ import annotations

import copy

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError

from tests.kube.conftest import wait_established
from torchjob.dialects.trainer_runtime import REPLICATED_JOB_NAME_MAX, TORCH_DISTRIBUTED
from torchjob.kube.machinery.client import ClusterTrainingRuntimeRes
from torchjob.kube.objects.install import apply
from torchjob.kube.served import trainer_objects

pytestmark = pytest.mark.kube


def test_a_runtime_with_a_replicated_job_name_over_20_characters_is_refused(kube: Client, kubeconfig: str) -> None:
    apply(trainer_objects.crds(), kubeconfig)
    for crd in trainer_objects.crds():
        wait_established(kube, crd["metadata"]["name"])
    long_name = "dataset-initializer-x"  # 21 characters
    assert len(long_name) == REPLICATED_JOB_NAME_MAX + 1
    runtime = copy.deepcopy(TORCH_DISTRIBUTED)
    runtime["metadata"] = {"name": "tj-long-job-name"}
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = long_name
    with pytest.raises(ApiError) as refused:
        kube.create(ClusterTrainingRuntimeRes(runtime))
    message = refused.value.status.message or ""
    assert refused.value.status.code == 422, message
    assert message.endswith(
        "spec.template.spec.replicatedJobs[0].name: Invalid value: a replicated job's name may have at most 20 "
        "characters in Kubeflow Trainer v2.4 (kubeflow/trainer#4394: the names of its Jobs and pods are made from "
        "it); shorten it, e.g. node, dataset-initializer, model-initializer"), message

    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = long_name[:REPLICATED_JOB_NAME_MAX]
    made = kube.create(ClusterTrainingRuntimeRes(runtime))  # 20: accepted, its spec kept as written
    try:
        assert made.to_dict()["spec"] == runtime["spec"]
    finally:
        kube.delete(ClusterTrainingRuntimeRes, "tj-long-job-name")
