"""What `torchjob install` says of an operator that does not come up, read from its pods as the kubelet
reports them (the documents below are the shapes kubelet writes: reasons from pkg/kubelet/images and
pkg/kubelet/container), and the version `torchjob version --kube` reads from the image's tag. The same
words against a real node's kubelet: tests/incluster/test_registry.py."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob.kube.clientside.operator_status import diagnose, image_version, is_ready, pending_reason

IMAGE = "registry.example/torchjob-operator:0.1.0"


def pod(*, waiting: dict[str, str] | None = None, last: dict[str, Any] | None = None, restarts: int = 0,
        running: bool = False, ready: bool = False, phase: str = "Pending") -> dict[str, Any]:
    state: dict[str, Any] = {"waiting": waiting} if waiting else ({"running": {}} if running else {})
    status = {"name": "operator", "image": IMAGE, "state": state, "restartCount": restarts, "ready": ready}
    if last:
        status["lastState"] = {"terminated": last}
    return {"metadata": {"name": "torchjob-operator-abc", "namespace": "torchjob-system"},
            "status": {"phase": phase, "containerStatuses": [status]}}


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"])
def test_an_image_that_cannot_be_pulled_names_the_image_and_the_fix(reason: str) -> None:
    said = 'failed to resolve reference "registry.example/torchjob-operator:0.1.0": not found'
    trouble = diagnose([pod(waiting={"reason": reason, "message": said})], IMAGE)
    assert trouble is not None and trouble.pod == "torchjob-operator-abc"
    assert IMAGE in trouble.what and reason in trouble.what and said in trouble.what
    assert "--image" in trouble.fix and "image.repository" in trouble.fix and "operator-image --push" in trouble.fix


def test_a_container_that_keeps_exiting_is_a_crash_with_its_exit_code() -> None:
    trouble = diagnose([pod(waiting={"reason": "CrashLoopBackOff"}, last={"exitCode": 2, "reason": "Error"},
                            restarts=3, phase="Running")], IMAGE)
    assert trouble is not None
    assert "keeps exiting (exit code 2; restarted 3 times)" in trouble.what
    one = diagnose([pod(waiting={"reason": "CrashLoopBackOff"}, last={"exitCode": 2}, restarts=1)], IMAGE)
    assert one is not None and "restarted 1 time)" in one.what
    assert "kubectl logs -n torchjob-system torchjob-operator-abc --previous" in trouble.fix


def test_one_restart_is_not_yet_a_crash_nor_is_a_pod_still_starting() -> None:
    assert diagnose([pod(running=True, last={"exitCode": 1}, restarts=1, phase="Running")], IMAGE) is None
    assert diagnose([pod(waiting={"reason": "ContainerCreating"})], IMAGE) is None
    assert diagnose([], IMAGE) is None


def test_what_a_wait_that_ran_out_says_of_the_pods() -> None:
    unscheduled = pod()
    unscheduled["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                            "message": "0/1 nodes are available: 1 Insufficient cpu."}]
    assert pending_reason([unscheduled]) == ("torchjob-operator-abc: Pending (not scheduled: 0/1 nodes are "
                                             "available: 1 Insufficient cpu.)")
    assert pending_reason([pod(running=True, phase="Running")]) == \
        "torchjob-operator-abc: Running (running, not Ready yet)"
    assert pending_reason([]) == "no pod of it exists yet"


def deployment(want: int, generation: int = 2, **status: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": want}, "status": status}


def test_ready_is_the_newest_spec_rolled_out_and_every_replica_available() -> None:
    assert is_ready(deployment(2, observedGeneration=2, replicas=2, updatedReplicas=2, availableReplicas=2))
    assert not is_ready(deployment(2, observedGeneration=2, replicas=2, updatedReplicas=2, availableReplicas=1))
    assert not is_ready(deployment(1, observedGeneration=1, replicas=1, updatedReplicas=1, availableReplicas=1))
    # an old replica still going away (maxSurge): not yet
    assert not is_ready(deployment(1, observedGeneration=2, replicas=2, updatedReplicas=1, availableReplicas=1))
    assert not is_ready(deployment(1))


@pytest.mark.parametrize("image,version", [
    ("torchjob/operator:0.1.0", "0.1.0"), ("localhost:5000/torchjob-operator:v1.2.3", "1.2.3"),
    ("localhost/torchjob-operator:dev", "dev"), ("localhost:5000/torchjob-operator", "unknown"),
    ("torchjob/operator@sha256:" + "0" * 64, "unknown"), ("localhost:5000/x:0.2.0@sha256:" + "0" * 64, "0.2.0"),
])
def test_the_operator_s_version_is_its_image_s_tag(image: str, version: str) -> None:
    assert image_version(image) == version
