"""A pod deleted by someone else while its job runs (Volcano's PodEvicted): counted when the job
has a policy on that event, otherwise simply made again. Pure: pods as dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.model import TorchJob
from torchjob.api.status import ConditionType
from torchjob.core.round.reconcile import Create, Phase, Stop, as_core_sees, reconcile
from torchjob.core.shape.topology import ReplicaId, replicas
from torchjob.kube.controller.round.observe import observe
from torchjob.kube.objects.workload import pods as pod_objects

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def running_job(policies: list[dict[str, Any]] | None) -> tuple[TorchJob, list[dict[str, Any]]]:
    """A 1+2 job whose pods all run, after the operator created them."""
    data = job_data("ev", workers=2, restart_policy="Never")
    if policies:
        data["spec"]["policies"] = policies
    job = job_from_data(data)
    first = reconcile(job, observe(job, []), NOW)
    job = job.model_copy(update={"status": first.status})
    pods = []
    for rid in replicas(job):
        pod = pod_objects.pod(job, rid, 0)
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return job, pods


def deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def test_a_deleted_pod_is_an_eviction_for_a_job_with_a_pod_evicted_policy() -> None:
    job, pods = running_job([{"event": "PodEvicted", "action": "RestartJob"}])
    gone = pods.pop(1)  # worker-0 deleted (a drain); the informer kept its last state
    world = observe(job, pods, gone=[gone])
    assert world.replicas["worker-0"].deleted  # observed as deleted; what that means is core's to say
    obs = as_core_sees(job, world, NOW).replicas["worker-0"]
    assert (obs.phase, obs.reason) == (Phase.FAILED, "Evicted")
    plan = reconcile(job, world, NOW)
    assert {r.attempt for r in plan.status.replicas.values()} == {1}  # RestartJob: every replica anew
    assert {a.replica.name for a in plan.actions if isinstance(a, Stop)} == {"master-0", "worker-1"}


def test_a_pod_being_deleted_counts_before_it_is_gone() -> None:
    job, pods = running_job([{"event": "*", "action": "AbortJob"}])
    deleting(pods[2])
    plan = reconcile(job, observe(job, pods), NOW)
    assert plan.status.is_true(ConditionType.FAILED)


def test_without_such_a_policy_a_deleted_pod_is_made_again_uncounted() -> None:
    job, pods = running_job(None)
    gone = pods.pop(1)
    world = observe(job, pods, gone=[gone])
    assert "worker-0" not in as_core_sees(job, world, NOW).replicas
    plan = reconcile(job, world, NOW)
    assert [(a.replica, a.attempt) for a in plan.actions if isinstance(a, Create)] == [(ReplicaId("Worker", 0), 0)]
    assert plan.status.restartCount == 0 and not plan.status.finished


def test_pods_the_operator_stops_itself_are_not_evictions() -> None:
    job, pods = running_job([{"event": "PodEvicted", "action": "AbortJob"}])
    suspended = job.model_copy(update={"spec": job.spec.model_copy(update={
        "runPolicy": job.run_policy.model_copy(update={"suspend": True})})})
    plan = reconcile(suspended, observe(suspended, pods), NOW)  # the suspension is written first
    after = suspended.model_copy(update={"status": plan.status})
    world = as_core_sees(after, observe(after, [deleting(p) for p in pods]), NOW)
    assert all(o.phase is Phase.RUNNING and o.stopping for o in world.replicas.values())
