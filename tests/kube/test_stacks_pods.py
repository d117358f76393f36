"""What a pod is made with so that its ranks give their stacks (kube/objects/front/stacks.py; by default, unless
the job's metadata.annotations torchjob.dev/stacks says "false"): the watcher in front of a command Python runs, its two
volumes, the annotation naming its container; nothing otherwise.
Pure (the program itself: tests/inpod/test_stacks_front.py; on real pods: tests/e2e/test_stacks_real.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.kube.objects.workload import pods as pod_objects


def pod_of(command: list[str], annotation: str | None = None, **kw: Any) -> dict[str, Any]:
    data = job_data("j", workers=1, command=command, **kw)
    if annotation is not None:
        data["metadata"]["annotations"] = {pod_stacks.ANNOTATION: annotation}
    return pod_objects.pod(job_from_data(data), ReplicaId("Worker", 0), 0, progress_url="https://10.0.0.1:8443/x/status")


def test_a_jobs_pods_run_the_watcher_in_front_of_the_command_by_default() -> None:
    pod = pod_of(["python", "-u", "train.py", "--lr", "0.1"])
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["python", "-I", "-c", pod_stacks.boot(), "python", "-u", "train.py", "--lr", "0.1"]
    # the spec carries the front's hash, not its source (issue 46: 4,096 pods in etcd and in every watch event)
    assert hashlib.sha256(pod_stacks.source().encode()).hexdigest() in pod_stacks.boot()
    assert len(json.dumps(pod)) < 6000 and pod_stacks.boot().startswith(pod_stacks.HEAD + inplace.BOOT_HEAD)
    assert inplace.first_attempt(pod) is None  # the in-place entry point's boot is not the front's
    assert "args" not in c and pod_stacks.container_of(pod) == c["name"]
    # the operator's cache keeps torchjob's annotations, not the spec: where a stalled job's answer is read
    assert pod["metadata"]["annotations"][pod_stacks.ANNOTATION_CONTAINER] == c["name"]
    assert pod_of(["python", "-u", "train.py", "--lr", "0.1"], annotation="true") == pod
    source = pod_stacks.source()  # torchjob's start-up hook is in it, as the text the front writes out
    assert source.startswith(pod_stacks.HEAD) and pod_stacks.HOOK_LINE not in source and "_register_stacks()" in source
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[pod_stacks.VOLUME] == {"name": pod_stacks.VOLUME, "emptyDir": {}}
    # the front's source from the operator's ConfigMap; optional: a pod never waits for it (then it runs without)
    assert volumes[pod_stacks.PROGRAM_VOLUME]["configMap"] == {
        "name": inplace.CONFIGMAP, "optional": True, "items": [{"key": pod_stacks.ENTRY, "path": pod_stacks.ENTRY}]}
    assert inplace.configmap("ns")["data"][pod_stacks.ENTRY] == pod_stacks.source()
    field = volumes[pod_stacks.REQUEST_VOLUME]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert field == "metadata.annotations['torchjob.dev/stacks-request']"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts[pod_stacks.REQUEST_VOLUME]["readOnly"] and mounts[pod_stacks.VOLUME]["mountPath"] == pod_stacks.DIR
    assert pod_stacks.request_note("r1") == {"metadata": {"annotations": {"torchjob.dev/stacks-request": "r1"}}}


def windows_pod() -> dict[str, Any]:
    data = job_data("j", workers=1, command=["python", "train.py"])
    for rspec in data["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["os"] = {"name": "windows"}  # the front forks and reads /proc: POSIX only
    return pod_objects.pod(job_from_data(data), ReplicaId("Worker", 0), 0)


def test_pods_are_unchanged_when_opted_out_or_without_a_python_command() -> None:
    for pod in (pod_of(["python", "train.py"], annotation="false"), pod_of(["python", "train.py"], annotation="False"),
                pod_of(["bash", "-c", "python train.py"]), pod_of(["torchrun", "train.py"]), windows_pod()):
        c = pod["spec"]["containers"][0]
        assert c["command"][:1] != ["python"] or c["command"] == ["python", "train.py"]
        assert pod_stacks.container_of(pod) is None
        assert not any(v["name"].startswith("torchjob-stacks") for v in pod["spec"].get("volumes", []))
        assert pod_stacks.ANNOTATION_CONTAINER not in pod["metadata"]["annotations"]


def test_a_pod_that_restarts_in_place_keeps_its_own_front() -> None:
    pod = pod_of(["python", "train.py"], restart_policy="OnFailure", run_policy={"warmSpares": True})
    assert pod["metadata"]["annotations"].get("torchjob.dev/in-place") == "true"
    assert pod_stacks.container_of(pod) is None  # in-place pods: not yet (docs/how-to/hangs.md)
