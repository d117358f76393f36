"""Pure: why a pod waits, as `describe --kube` and `run --kube` show it (found on the real node:
a job asking for GPUs the node lacks, or naming an image that cannot be pulled, said nothing)."""

from __future__ import annotations

from typing import Any

from lightkube.resources.core_v1 import Pod

from torchjob.kube.clientside.kube_runtime import waiting


def pod(status: dict[str, Any], deleting: bool = False) -> Pod:
    meta: dict[str, Any] = {"name": "j-master-0"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status})


def test_unschedulable_image_pull_and_crash_loop_are_named() -> None:
    unschedulable = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}
    assert waiting(pod(unschedulable)) == "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    pull = {"phase": "Pending", "containerStatuses": [
        {"name": "pytorch", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ErrImagePull", "message": "failed to resolve reference"}}}]}
    assert waiting(pod(pull)) == "ErrImagePull: failed to resolve reference"
    init = {"phase": "Pending", "initContainerStatuses": [
        {"name": "wait-for-master", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "InvalidImageName"}}}]}
    assert waiting(pod(init)) == "InvalidImageName"


def test_starting_running_finished_and_deleted_pods_are_not_waiting() -> None:
    creating = {"phase": "Pending", "containerStatuses": [
        {"name": "pytorch", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    assert waiting(pod(creating)) is None
    assert waiting(pod({"phase": "Running"})) is None
    assert waiting(pod({"phase": "Succeeded"})) is None
    assert waiting(pod({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}, deleting=True)) is None
