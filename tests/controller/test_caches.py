"""What the operator's informers keep of each object (kube/machinery/informer.py): only what is
read, so that 10,000 jobs fit in the operator's memory, and core sees the same world from it."""

from __future__ import annotations

from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.core.shape.topology import replicas
from torchjob.kube.controller.pods.pod_index import controller_uid
from torchjob.kube.controller.round.observe import observe
from torchjob.kube.machinery.informer import LAST_APPLIED, metadata_only, pod_cached, whole
from torchjob.kube.objects.labels import attempt_of, replica_name
from torchjob.kube.objects.workload import pods as pod_objects


def real_pods() -> tuple[Any, list[dict[str, Any]]]:
    job = job_from_data(job_data("c", workers=2, uid="job-uid"))
    pods = []
    for i, rid in enumerate(replicas(job)):
        p = pod_objects.pod(job, rid, 1)
        p["metadata"] |= {"uid": f"pod-{i}", "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                          "managedFields": [{"manager": "torchjob-operator", "fieldsV1": {"f:spec": {}}}]}
        container = p["spec"]["containers"][0]["name"]
        state = ({"terminated": {"exitCode": 3, "reason": "Error", "message": "RuntimeError: boom",
                                 "startedAt": "2026-01-01T00:00:10Z", "finishedAt": "2026-01-01T00:01:00Z"}}
                 if i else {"running": {"startedAt": "2026-01-01T00:00:10Z"}})
        p["status"] = {"phase": "Failed" if i else "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "False"}],
                       "containerStatuses": [{"name": container, "image": "x", "imageID": "y", "ready": False,
                                              "restartCount": 0, "state": state}]}
        pods.append(p)
    pods[2]["metadata"]["deletionTimestamp"] = "2026-01-01T00:02:00Z"
    return job, pods


def test_core_sees_the_same_world_from_cached_pods() -> None:
    job, pods = real_pods()
    cached = [pod_cached(p) for p in pods]
    assert observe(job, pods) == observe(job, cached)
    assert observe(job, pods[:1], gone=pods[1:]) == observe(job, cached[:1], gone=cached[1:])
    assert [controller_uid(p) for p in cached] == ["job-uid"] * 3
    owner = cached[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("TorchJob", "c")  # whose it is: the stale-pod rule reads it
    assert replica_name(cached[1]["metadata"]["labels"]) == "worker-0" and attempt_of(cached[1]) == 1


def test_a_cached_pod_drops_what_nobody_reads() -> None:
    _, pods = real_pods()
    cached = pod_cached(pods[0])
    assert set(cached) == {"apiVersion", "kind", "metadata", "status"}
    assert not {"managedFields", "annotations"} & set(cached["metadata"]) or \
        set(cached["metadata"]["annotations"]) <= {a for a in pods[0]["metadata"]["annotations"]
                                                   if a.startswith("torchjob.dev/")}
    assert "managedFields" not in cached["metadata"] and "spec" not in cached
    assert not {"conditions", "podIP"} & set(cached["status"])
    assert cached["status"]["containerStatuses"] == [{"name": pods[0]["spec"]["containers"][0]["name"]}]


def test_owned_objects_and_jobs_are_cached_lean() -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "spec": {"clusterIP": "None"},
           "metadata": {"name": "a", "namespace": "ns", "uid": "s", "resourceVersion": "3", "labels": {"x": "y"},
                        "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"uid": "u"}]}}
    assert metadata_only(svc)["metadata"] == {"name": "a", "namespace": "ns", "uid": "s", "resourceVersion": "3",
                                              "labels": {"x": "y"}}
    job = job_data("j")
    job["metadata"]["annotations"] = {LAST_APPLIED: "{...the whole object again...}", "keep": "me"}
    kept = whole(job)
    assert kept["metadata"]["annotations"] == {"keep": "me"} and kept["spec"] == job["spec"]


def test_a_pending_pod_the_scheduler_found_no_node_for_keeps_its_words_in_the_cache() -> None:
    job, pods = real_pods()
    said = ("0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
            "1 node(s) were unschedulable")
    pending = {**pods[1], "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said,
         "lastTransitionTime": "2026-01-01T00:00:01Z"}, {"type": "Ready", "status": "False"}]}}
    cached = pod_cached(pending)
    assert cached["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said}]
    assert observe(job, [pending]) == observe(job, [cached])
    assert observe(job, [cached]).replicas["worker-0"].unschedulable == said
    # scheduled: its PodScheduled True is not kept, and nothing waits
    scheduled = {**pending, "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert "conditions" not in pod_cached(scheduled)["status"]
    assert observe(job, [pod_cached(scheduled)]).replicas["worker-0"].unschedulable is None
