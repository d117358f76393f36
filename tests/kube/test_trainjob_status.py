"""TrainJob's and T9k's status shapes and whether their APIs are served (pure: torchjob's status in,
the stored status out; the cluster's CRD in, the decision out)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from torchjob.api.model import JobStatus
from torchjob.kube.served import t9k, t9k_objects, trainer_api, trainer_objects, trainjob

NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC)
T = "2026-11-27T19:59:00Z"


def status(*conditions: tuple[str, str, str], **more: Any) -> JobStatus:
    return JobStatus.model_validate({"conditions": [
        {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": T}
        for t, s, r in conditions], **more})


def test_while_running_no_condition_and_the_node_job_active_and_ready() -> None:
    running = status(("Created", "True", "Created"), ("Running", "True", "Running"),
                     replicaStatuses={"Master": {"active": 1}, "Worker": {"active": 1}})
    out = trainjob.trainjob_status(None, running, NOW)
    assert out["conditions"] == []
    assert out["jobsStatus"] == [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
                                  "suspended": 0}]
    assert trainjob.status_of({"status": out}) == running  # read back whole from status.torchjob


def test_complete_failed_and_suspended_are_trainers_with_every_metav1_field() -> None:
    done = trainjob.conditions(status(("Running", "False", "Running"), ("Succeeded", "True", "Succeeded")), NOW)
    assert done == [{"type": "Complete", "status": "True", "reason": trainjob.COMPLETE_REASON,
                     "message": trainjob.COMPLETE_MESSAGE, "lastTransitionTime": T}]
    failed = status(("Failed", "True", "DeadlineExceeded"),
                    failure={"reason": "DeadlineExceeded", "message": "active longer than 2 s"})
    (c,) = trainjob.conditions(failed, NOW)
    assert (c["type"], c["reason"], c["message"]) == ("Failed", "DeadlineExceeded", "Failed DeadlineExceeded")
    assert trainjob.jobs_status(failed)[0]["failed"] == 1
    paused = trainjob.trainjob_status(None, status(("Suspended", "True", "Suspended")), NOW)
    assert [(c["type"], c["status"], c["reason"]) for c in paused["conditions"]] == [
        ("Suspended", "True", "Suspended")]
    assert paused["jobsStatus"][0]["suspended"] == 1
    resumed = trainjob.conditions(status(("Suspended", "False", "Resumed")), NOW)
    assert [(c["status"], c["reason"], c["message"]) for c in resumed] == [
        ("False", "Resumed", trainjob.RESUMED_MESSAGE)]


def test_a_trainjob_trainer_finished_stays_finished() -> None:
    stored = {"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                         "message": "done", "lastTransitionTime": T}]}}
    assert trainjob.status_of(stored).finished


def test_progress_lands_in_trainer_status() -> None:
    patch = trainjob.progress_patch({"percent": 42.7, "etaSeconds": 30, "lastReportTime": T,
                                     "metrics": [{"name": "loss", "value": "0.5"}]})
    assert patch["trainerStatus"] == {"lastUpdatedTime": T, "progressPercentage": 42, "estimatedRemainingSeconds": 30,
                                      "metrics": [{"name": "loss", "value": "0.5"}]}
    assert patch["torchjob"]["progress"]["percent"] == 42.7


def test_managed_by_someone_else_is_left_alone() -> None:
    assert trainjob.served_here({"spec": {}})
    assert trainjob.served_here({"spec": {"managedBy": trainer_objects.MANAGED_BY_TRAINER}})
    assert not trainjob.served_here({"spec": {"managedBy": trainer_objects.MANAGED_BY_MULTIKUEUE}})


def test_each_api_is_served_only_with_torchjobs_crd() -> None:
    ours = trainer_objects.crds()[0]
    trainers = {**ours, "metadata": {"name": ours["metadata"]["name"]}}
    assert trainer_api.decide(ours, True)[0]
    served, why = trainer_api.decide(trainers, True)
    assert not served and "Trainer's controller" in why
    assert not trainer_api.decide(None, True)[0] and not trainer_api.decide(None, False)[0]
    helms = {**ours, "metadata": {**ours["metadata"], "labels": {"app.kubernetes.io/managed-by": "Helm"}}}
    assert trainer_api.decide(helms, True)[0]  # the chart's: Helm relabels it, torchjob's annotation stays
    assert t9k.decide(t9k_objects.crd(), True)[0] and not t9k.decide(None, True)[0]


def test_t9k_phase_and_aggregate() -> None:
    running = status(("Running", "True", "Running"), replicaStatuses={"Master": {"active": 1},
                                                                       "Worker": {"active": 3, "restarts": 2}},
                     restartCount=2)
    out = t9k.t9k_status(None, running, NOW)
    assert out["phase"] == "Running" and out["backoffCount"] == 2
    assert out["aggregate"]["running"] == 4 and out["aggregate"]["pending"] == 0
    assert {t["type"]: t["restartCount"] for t in out["tasks"]} == {"master": 0, "worker": 2}
    assert t9k.t9k_status(None, status(("Suspended", "True", "Suspended")), NOW)["phase"] == "Paused"
    assert t9k.t9k_status(None, status(), NOW)["phase"] == "Pending"


def test_a_node_that_waits_for_a_node_is_a_scheduled_false_condition_until_it_has_one() -> None:
    waits = status(("Created", "True", "Created"), ("Scheduled", "False", "WaitingForNode"),
                   replicaStatuses={"Master": {"active": 1}, "Worker": {"active": 1}})
    out = trainjob.trainjob_status(None, waits, NOW)
    assert out["conditions"] == [{"type": "Scheduled", "status": "False", "reason": "WaitingForNode",
                                  "message": "Scheduled WaitingForNode", "lastTransitionTime": T}]
    assert trainjob.status_of({"status": out}) == waits
    running = status(("Created", "True", "Created"), ("Running", "True", "Running"))
    assert trainjob.trainjob_status(None, running, NOW)["conditions"] == []  # gone with it: the SDK says Running
