"""describe --kube and the dashboard read a big job's running pods as their metadata only (issue 46:
kube/clientside/pod_listing.py), every other pod whole: the summary (counts by state, the pods not
running named with why) is the one a whole listing gives. Against a real kube-apiserver, with no
operator: the pods are made and their statuses written here, as an operator and a kubelet would, and
no scheduler takes them (a scheduler name of none)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from tests.kube.conftest import now_iso
from torchjob.kube.clientside.kube_runtime import KubeRuntime
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.front.inplace import ANNOTATION_EXIT
from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, LABEL_INDEX, LABEL_JOB, LABEL_TYPE
from torchjob.runtime import summarised

pytestmark = pytest.mark.kube
WORKERS = 19  # and a master: 20 replicas, over SUMMARY_OVER


def job(name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "example/trainer:1", "command": ["python"]}]}}
    return {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": WORKERS, "template": template}}}}


def pod(name: str, rtype: str, index: int, owner: dict[str, Any] | None, **notes: str) -> Pod:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL_JOB: "lst", LABEL_TYPE: rtype, LABEL_INDEX: str(index)},
                            "annotations": {ANNOTATION_ATTEMPT: "1", **notes}, "finalizers": ["torchjob.dev/test"]}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "schedulerName": "none-such", "restartPolicy": "Never",
        "containers": [{"name": "pytorch", "image": "example/trainer:1", "command": ["python"]}]}})


def status(kube: Client, name: str, namespace: str, phase: str, state: dict[str, Any]) -> None:
    cs = {"name": "pytorch", "image": "example/trainer:1", "imageID": "", "ready": phase == "Running",
          "restartCount": 0, "state": state}
    kube.patch(Pod.Status, name, {"status": {"phase": phase, "startTime": now_iso(), "containerStatuses": [cs]}},
               namespace=namespace, patch_type=PatchType.MERGE)


def test_a_big_jobs_summary_reads_its_running_pods_as_metadata_and_says_what_a_whole_listing_says(
        kubeconfig: str, kube: Client, namespace: str) -> None:
    made = kube.create(TorchJobRes.from_dict(job("lst")), namespace=namespace)
    owner = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "lst", "uid": made.metadata.uid,
             "controller": True}
    names = ["lst-master-0", *(f"lst-worker-{i}" for i in range(WORKERS))]
    for n in names:
        rtype, index = n.split("-")[1:]
        notes = {ANNOTATION_EXIT: "{}"} if n == "lst-worker-3" else {}  # an in-place end said: read whole
        kube.create(pod(n, rtype, int(index), owner, **notes), namespace=namespace)
    kube.create(pod("someone-elses", "worker", 0, None), namespace=namespace)  # the job's labels, not its pod
    running = {"running": {"startedAt": now_iso()}}
    try:
        for n in [*names[:-2], "someone-elses"]:
            status(kube, n, namespace, "Running", running)
        status(kube, "lst-worker-17", namespace, "Failed",
               {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": now_iso()}})
        status(kube, "lst-worker-18", namespace, "Pending",
               {"waiting": {"reason": "ErrImagePull", "message": "no such image"}})
        kube.delete(Pod, "lst-worker-5", namespace=namespace, grace_period=30)  # a finalizer keeps it: Stopping

        rt = KubeRuntime(kubeconfig, namespace=namespace)
        t0 = time.monotonic()
        light = rt.describe("lst", summary=True)
        took = time.monotonic() - t0
        whole = rt.describe("lst")
        counts, odd = summarised(light.attempts)
        whole_counts, whole_odd = summarised(whole.attempts)
        # the same, but for the start of a running pod that is being deleted (Stopping: read as metadata)
        assert counts == whole_counts and [replace(a, started=None) if a.reason == "Stopping" else a
                                           for a in whole_odd] == odd
        assert counts == {"Running": 17, "Failed": 1, "Pending": 1, "Stopping": 1}, counts
        assert [(a.replica, a.exit_code, a.waiting) for a in odd] == [
            ("worker-5", None, None), ("worker-17", 3, None), ("worker-18", None, "ErrImagePull: no such image")]
        # the running ones came as their metadata: no start time; the in-place one was read whole
        started = {a.replica: a.started for a in light.attempts}
        assert started["worker-0"] is None and started["worker-3"] is not None and whole.attempts[1].started
        assert light.raw is None and whole.raw is not None and len(whole.raw["pods"]) == 20
        assert {a.attempt for a in light.attempts} == {1}
        assert took < 10, took
    finally:
        kube.delete(TorchJobRes, "lst", namespace=namespace)
        for n in [*names, "someone-elses"]:  # gone (no kubelet, no garbage collector here), not left Running
            kube.patch(Pod, n, {"metadata": {"finalizers": None}}, namespace=namespace, patch_type=PatchType.MERGE)
            if n != "lst-worker-5":
                kube.delete(Pod, n, namespace=namespace, grace_period=0)
