"""A TrainJob whose runtime has dataset and model initializers, served by torchjob against a real API
server, with the Kubeflow SDK unchanged (`train(initializer=Initializer(...))`); the test plays the
kubelet (their real pods run in tests/e2e/test_trainjob_real.py). The initializers' pods come first,
labelled as Trainer's so that the SDK lists their steps; no node pod before both have succeeded; their
jobs in `status.jobsStatus`; a failed one is the TrainJob's Failed condition, with its last words."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod
from lightkube.types import PatchType

from tests.docs import blocks
from tests.kube.conftest import now_iso, set_pod
from tests.kube.test_trainjob_api import (  # noqa: F401 (trainer_api, trainer_operator: the fixtures)
    condition,
    node_pods,
    sdk,
    trainer_api,
    trainer_operator,
    wait_trainjob,
)
from tests.kube.test_trainjob_api import trainjob as trainjob_of
from tests.trainjob_initializers import STEPS, runtime
from torchjob.kube.objects.install import apply
from torchjob.kube.objects.labels.trainjob import JOBSET_NAME, REPLICATED_JOB

trainer = pytest.importorskip("kubeflow.trainer")
PAGE = "how-to/trainjob-initializers.md"


def step_pods(kube: Client, name: str, namespace: str) -> dict[str, Any]:
    pods = kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name, REPLICATED_JOB: list(STEPS)})
    return {p.metadata.labels[REPLICATED_JOB]: p for p in pods}


def wait_steps(kube: Client, name: str, namespace: str,
               new: Callable[[Any], bool] = lambda p: True) -> dict[str, Any]:
    """Both initializer pods of `name`, once each is one that `new` accepts."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        found = step_pods(kube, name, namespace)
        if len(found) == 2 and all(new(p) for p in found.values()):
            return found
        time.sleep(0.1)
    raise AssertionError(f"no initializer pods of {name}: {found}")


def train(x: int) -> None:  # shipped by the SDK (not run here: the test plays the kubelet)
    print("trained", x)


def start(kubeconfig: str, namespace: str, dataset: str, runtime: dict[str, Any]) -> tuple[Any, str]:
    from kubeflow.trainer import CustomTrainer, HuggingFaceDatasetInitializer, HuggingFaceModelInitializer, Initializer

    apply([runtime], kubeconfig)
    client = sdk(kubeconfig, namespace)
    name = client.train(runtime=runtime["metadata"]["name"], initializer=Initializer(
        dataset=HuggingFaceDatasetInitializer(storage_uri=dataset),
        model=HuggingFaceModelInitializer(storage_uri="hf://tj/tiny-model")),
        trainer=CustomTrainer(func=train, func_args={"x": 1}, image="busybox:1.36", num_nodes=2,
                              resources_per_node={"cpu": 1}))
    return client, name


@pytest.mark.usefixtures("trainer_operator")
def test_the_initializers_run_first_and_the_sdk_lists_their_steps(
        kube: Client, kubeconfig: str, namespace: str) -> None:
    # the runtime the docs show (Trainer's torchtune runtime, its workspace a volumeClaimPolicies claim)
    (page,) = blocks.tested(PAGE, "test_the_initializers_run_first_and_the_sdk_lists_their_steps")
    client, name = start(kubeconfig, namespace, "hf://tj/tiny-data", yaml.safe_load(page))
    steps = wait_steps(kube, name, namespace)
    data = steps["dataset-initializer"].spec.containers[0]
    env = {e.name: e.value for e in data.env}
    assert (data.name, data.image, env["STORAGE_URI"]) == (
        "dataset-initializer", "ghcr.io/kubeflow/trainer/dataset-initializer:v2.4.0", "hf://tj/tiny-data")
    assert [(m.name, m.mountPath) for m in data.volumeMounts] == [("initializer", "/workspace")]
    # its volumeClaimPolicies' claim, made as JobSet makes it: TEMPLATE-TRAINJOB, the template's spec,
    # owned by the TrainJob (goes with it); every pod mounts it by the template's name
    claim = kube.get(PersistentVolumeClaim, f"initializer-{name}", namespace=namespace)
    assert claim.metadata.labels[JOBSET_NAME] == name
    assert (claim.spec.accessModes, claim.spec.resources.requests) == (["ReadWriteOnce"], {"storage": "20Gi"})
    (owner,) = claim.metadata.ownerReferences
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "TrainJob", name, trainjob_of(kube, name, namespace)["metadata"]["uid"], True)
    for p in steps.values():
        assert [(v.name, v.persistentVolumeClaim.claimName) for v in p.spec.volumes
                if v.persistentVolumeClaim] == [("initializer", f"initializer-{name}")]
    model_env = {e.name: e.value for e in steps["model-initializer"].spec.containers[0].env}
    assert model_env["STORAGE_URI"] == "hf://tj/tiny-model" and "*.bin" in model_env["IGNORE_PATTERNS"]
    assert sorted(s.name for s in client.get_job(name).steps) == list(STEPS)
    wait_trainjob(kube, name, namespace, lambda s: [j["name"] for j in s.get("jobsStatus") or []] == [
        *STEPS, "node"] and s["jobsStatus"][0]["active"] == 1)
    for p in steps.values():
        set_pod(kube, p, "Running")
    set_pod(kube, steps["dataset-initializer"], "Succeeded", 0)
    wait_trainjob(kube, name, namespace, lambda s: s["jobsStatus"][0]["succeeded"] == 1)
    assert not list(kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name, REPLICATED_JOB: "node"}))
    set_pod(kube, steps["model-initializer"], "Succeeded", 0)
    nodes = node_pods(kube, name, namespace, 2)  # only now
    for p in nodes.values():
        assert [v.persistentVolumeClaim.claimName for v in p.spec.volumes if v.persistentVolumeClaim] == [
            f"initializer-{name}"]
    assert sorted(s.name for s in client.get_job(name).steps) == [*STEPS, "node-0", "node-1"]
    for p in nodes.values():
        set_pod(kube, p, "Succeeded", 0)
    client.wait_for_job_status(name, status={"Complete"}, timeout=60, polling_interval=1)
    stored = wait_trainjob(kube, name, namespace, lambda s: condition(s, "Complete") is not None)["status"]
    assert [(j["name"], j["succeeded"]) for j in stored["jobsStatus"]] == [
        ("dataset-initializer", 1), ("model-initializer", 1), ("node", 1)]


def fail_step(kube: Client, pod: Any, namespace: str, words: str) -> str:
    """End `pod` Failed as the kubelet does: the end of its log as the termination message
    (FallbackToLogsOnError); its finishedAt (returned)."""
    ended = {"exitCode": 1, "reason": "Error", "message": words, "finishedAt": now_iso()}
    name = pod.spec.containers[0].name
    status = {"phase": "Failed", "containerStatuses": [{"name": name, "image": "x", "imageID": "", "ready": False,
                                                        "restartCount": 0, "state": {"terminated": ended}}]}
    kube.patch(Pod.Status, pod.metadata.name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE)
    return ended["finishedAt"]


@pytest.mark.usefixtures("trainer_operator")
def test_a_failed_initializer_is_retried_after_a_jobs_backoff_then_fails_the_trainjob_with_its_words(
        kube: Client, kubeconfig: str, namespace: str) -> None:
    """Its Jobs' backoffLimit 1 (the docs' runtime retries 6 times): the failed pod's replacement is made
    10 s after its end, as a Kubernetes Job makes it; the second failure fails the TrainJob with the
    step's last words, and no node pod is ever made."""
    once = runtime("torch-init-retry", "/tmp/ws", node_image="x:1", backoff=1)
    client, name = start(kubeconfig, namespace, "hf://tj/missing", once)
    steps = wait_steps(kube, name, namespace)
    words = "Downloading dataset: tj/missing\nRepositoryNotFoundError: dataset tj/missing is not on the hub\n"
    first = steps["dataset-initializer"]
    failed_at = datetime.fromisoformat(fail_step(kube, first, namespace, words))
    waits = wait_trainjob(kube, name, namespace, lambda s: (s.get("torchjob") or {}).get("initializers", {}).get(
        "dataset-initializer", {}).get("notBefore") is not None)["status"]["torchjob"]["initializers"]
    assert datetime.fromisoformat(waits["dataset-initializer"]["notBefore"]) == failed_at + timedelta(seconds=10)
    again = wait_steps(kube, name, namespace, lambda p: p.metadata.uid != first.metadata.uid)["dataset-initializer"]
    assert again.metadata.creationTimestamp >= failed_at + timedelta(seconds=10)  # not at once
    assert not list(kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name, REPLICATED_JOB: "node"}))
    fail_step(kube, again, namespace, words)
    status = wait_trainjob(kube, name, namespace, lambda s: condition(s, "Failed") is not None)["status"]
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InitializerFailed"
    assert failed["message"] == ("initializer dataset-initializer failed (exit code 1): RepositoryNotFoundError: "
                                 "dataset tj/missing is not on the hub"), failed
    assert [(j["name"], j["failed"]) for j in status["jobsStatus"]] == [
        ("dataset-initializer", 1), ("model-initializer", 0), ("node", 0)]
    assert not list(kube.list(Pod, namespace=namespace, labels={JOBSET_NAME: name, REPLICATED_JOB: "node"}))
    with pytest.raises(RuntimeError, match="Failed"):
        client.wait_for_job_status(name, status={"Complete"}, timeout=30, polling_interval=1)
