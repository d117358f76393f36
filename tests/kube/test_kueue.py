"""What the operator asks of Kueue and does with its answers (pure; the cluster side is in
test_gang_kube.py)."""

from __future__ import annotations

from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import JobStatus, TorchJob
from torchjob.kube.objects.admission import kueue

OWNER = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "name": "demo", "uid": "u"}
POOL = {"metadata": {"name": "spot"}, "spec": {
    "nodeLabels": {"pool": "spot"}, "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}}


def queued_job(workers: int = 3) -> TorchJob:
    data = job_data("demo", workers=workers)
    data["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    return job_from_data(data)


def admitted_workload(job: TorchJob, active: bool = True) -> dict[str, Any]:
    wl = kueue.workload(job, OWNER, {"torchjob.dev/job-name": "demo"})
    wl["spec"]["active"] = active
    assignments = [{"name": "master", "flavors": {"cpu": "spot"}},
                   {"name": "worker", "flavors": {"cpu": "spot", "memory": "spot"}}]
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
                    "conditions": [{"type": "Admitted", "status": "True"}]}
    return wl


def test_the_workload_asks_for_the_whole_job_in_one_pod_set_per_replica_type() -> None:
    wl = kueue.workload(queued_job(), OWNER, {"torchjob.dev/job-name": "demo"})
    assert wl["metadata"]["name"] == "torchjob-demo" and wl["metadata"]["ownerReferences"] == [OWNER]
    assert wl["spec"]["queueName"] == "team-a" and wl["spec"]["active"] is True
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("master", 1), ("worker", 3)]
    assert wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}


def test_admitted_means_admitted_and_active() -> None:
    job = queued_job()
    assert kueue.admitted(admitted_workload(job))
    assert not kueue.admitted(admitted_workload(job, active=False))
    assert not kueue.admitted(kueue.workload(job, OWNER, {}))
    taken_back = admitted_workload(job)
    taken_back["status"] = {"conditions": [{"type": "Admitted", "status": "False"},
                                           {"type": "Evicted", "status": "True", "message": "Preempted by wl-b"}]}
    assert not kueue.admitted(taken_back)
    assert "Preempted by wl-b" in kueue.lost_admission(taken_back)
    assert "deactivated" in kueue.lost_admission(admitted_workload(job, active=False))
    assert "waiting for Kueue to admit" in kueue.lost_admission(kueue.workload(job, OWNER, {}))


def test_admission_resumes_the_job_on_its_flavors_and_suspension_restores_the_templates() -> None:
    job = queued_job()
    wl = admitted_workload(job)
    assert kueue.flavor_names(wl) == {"spot"}
    patch = kueue.admit_patch(job, wl, {"spot": POOL})
    assert patch["runPolicy"] == {"suspend": False}
    master = patch["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["nodeSelector"] == {"disk": "ssd", "pool": "spot"} and master["tolerations"] == POOL["spec"][
        "tolerations"]
    assert patch["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}

    placed = job_from_data(_merge(job.model_dump(exclude_none=True, by_alias=True), {"spec": patch}))
    back = kueue.suspend_patch(placed, wl)
    assert back["runPolicy"] == {"suspend": True}
    assert back["pytorchReplicaSpecs"]["Master"]["template"]["spec"] == {
        "nodeSelector": {"disk": "ssd", "pool": None}, "tolerations": None}
    assert back["pytorchReplicaSpecs"]["Worker"]["template"]["spec"] == {"nodeSelector": None, "tolerations": None}
    assert "pytorchReplicaSpecs" not in kueue.suspend_patch(job, wl)  # nothing to undo


def test_a_finished_job_finishes_its_workload() -> None:
    status = JobStatus.model_validate({"conditions": [{"type": "Succeeded", "status": "True", "reason": "Done"}]})
    body = kueue.finished_status("torchjob-demo", "ns", status, "2026-11-23T00:00:00Z")
    assert body["status"]["conditions"] == [{"type": "Finished", "status": "True", "reason": "Succeeded",
                                             "message": "the TorchJob succeeded",
                                             "lastTransitionTime": "2026-11-23T00:00:00Z"}]
    assert kueue.finished({"status": body["status"]})


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7386 merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def test_render_kube_shows_the_workload_first() -> None:
    from torchjob.kube.objects.workload import pods as pod_objects

    kinds = [m["kind"] for m in pod_objects.manifests(queued_job(workers=1))]
    assert kinds == ["Workload", "Service", "Pod", "Pod"]
