"""torchjob's status projected into Kubeflow's PyTorchJob status (kube/served/kubeflow_status.py), pure:
the statuses are what the real core decides (tests/core/sim.py drives `core.reconcile`), and each
is read the way Kubeflow's clients read it: `kubectl get`'s State column, the SDK's "condition
True" checks, Kueue's counts, and Katib's documented GJSON success and failure conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import gjson
import pytest

from tests.core.sim import T0, SimResult, simulate
from tests.jobs import make_job
from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import ConditionType
from torchjob.kube.objects.labels import kubeflow as kfl
from torchjob.kube.served import kubeflow_status as kf

# Katib's defaults for a PyTorchJob trial (trialTemplate successCondition / failureCondition)
KATIB_SUCCESS = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
KATIB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
LABELS = "training.kubeflow.org/job-name=demo,training.kubeflow.org/operator-name=pytorchjob-controller"


def katib(obj: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Katib's reading of a trial's job (trial/util/job_util.go GetDeployedJobStatus): the failure
    condition first, then the success one; each matches when GJSON gives an object or a non-empty
    array (whose first element is the condition); else the trial is running."""
    for verdict, expression in (("Failed", KATIB_FAILURE), ("Succeeded", KATIB_SUCCESS)):
        try:
            got = gjson.get(obj, expression)
        except gjson.GJSONError:  # no such path: tidwall/gjson gives an empty result
            continue
        if isinstance(got, dict):
            return verdict, got
        if isinstance(got, list) and got:
            return verdict, got[0]
    return "Running", None


def project(job: TorchJob, status: JobStatus, seconds: float = 0) -> dict[str, Any]:
    """The PyTorchJob as a client sees it, with the projected status."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job.name},
            "status": kf.kubeflow_status(job, status, T0 + timedelta(seconds=seconds))}


def state(obj: Mapping[str, Any]) -> str | None:
    """`kubectl get pytorchjobs`' State: `.status.conditions[-1:].type`."""
    conds = obj["status"]["conditions"]
    return conds[-1]["type"] if conds else None


def true_types(obj: Mapping[str, Any]) -> list[str]:
    """What the Kubeflow SDK's is_job_* checks see: the condition types whose status is "True"."""
    return [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"]


def states(job: TorchJob, result: SimResult) -> list[str | None]:
    """The State column over the run, each change once."""
    out: list[str | None] = []
    for step in result.steps:
        s = state(project(job, step.plan.status, step.t))
        if not out or out[-1] != s:
            out.append(s)
    return out


def run(job: TorchJob, exits: Mapping[str, Sequence[tuple[float, int]]],
        **kwargs: Any) -> tuple[SimResult, dict[str, Any]]:
    result = simulate(job, exits, **kwargs)
    return result, project(job, result.status, result.end)


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in obj["status"]["conditions"] if c["type"] == ctype)
    return found


def seed_job(**kwargs: Any) -> TorchJob:
    """Seed 004's shape: a master and two workers, restartPolicy OnFailure."""
    return make_job("demo", workers=2, restart_policy=kwargs.pop("restart_policy", "OnFailure"), **kwargs)


def test_a_job_that_succeeds_reads_as_kubeflows_does() -> None:
    job = seed_job()
    result, obj = run(job, {"master-0": [(10, 0)], "worker-0": [(9, 0)], "worker-1": [(9, 0)]})
    assert states(job, result) == ["Created", "Running", "Succeeded"]
    status = obj["status"]
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Created", "True", "PyTorchJobCreated", "PyTorchJob demo is created."),
        # set False by the job's end, with its reason and message kept (Kubeflow's setCondition)
        ("Running", "False", "PyTorchJobRunning", "PyTorchJob demo is running."),
        ("Succeeded", "True", "PyTorchJobSucceeded", "PyTorchJob demo is successfully completed."),
    ]
    assert true_types(obj) == ["Created", "Succeeded"]
    assert status["replicaStatuses"] == {
        "Master": {"active": 0, "succeeded": 1, "failed": 0,
                   "selector": f"{LABELS},training.kubeflow.org/replica-type=master"},
        "Worker": {"active": 0, "succeeded": 2, "failed": 0,
                   "selector": f"{LABELS},training.kubeflow.org/replica-type=worker"}}
    assert status["startTime"] == "2024-01-01T00:00:00Z" and status["completionTime"] == "2024-01-01T00:00:10Z"
    assert status["lastReconcileTime"] == "2024-01-01T00:00:10Z"
    verdict, cond = katib(obj)
    assert verdict == "Succeeded" and cond is not None and cond["reason"] == "PyTorchJobSucceeded"


def test_while_it_runs_katib_waits_and_kueue_counts_the_active_replicas() -> None:
    job = seed_job()
    result = simulate(job, {"master-0": [(10, 0)], "worker-0": [(9, 0)], "worker-1": [(9, 0)]})
    step = next(s for s in result.steps if s.plan.status.is_true(ConditionType.RUNNING))
    obj = project(job, step.plan.status, step.t)
    assert state(obj) == "Running" and true_types(obj) == ["Created", "Running"]
    assert condition(obj, "Running")["reason"] == "PyTorchJobRunning"
    assert {t: r["active"] for t, r in obj["status"]["replicaStatuses"].items()} == {"Master": 1, "Worker": 2}
    assert obj["status"]["completionTime"] is None  # a merge patch clears a stale one
    assert katib(obj) == ("Running", None)


def test_a_restart_shows_restarting_then_running_again() -> None:
    job = seed_job()
    result, obj = run(job, {"master-0": [(10, 0)], "worker-0": [(9, 0)], "worker-1": [(3, 1), (5, 0)]})
    assert states(job, result) == ["Created", "Running", "Restarting", "Running", "Succeeded"]
    restarting = next(project(job, s.plan.status, s.t) for s in result.steps
                      if s.plan.status.is_true(ConditionType.RESTARTING))
    cond = condition(restarting, "Restarting")
    assert (cond["reason"], cond["message"]) == (
        "PyTorchJobRestarting", "PyTorchJob demo is restarting because 1 Worker replica(s) failed.")
    assert "Running" not in [c["type"] for c in restarting["status"]["conditions"]]  # they exclude each other
    assert katib(restarting) == ("Running", None)
    # torchjob's own account of it, beside Kubeflow's fields
    assert obj["status"]["torchjob"]["restartCount"] == 1
    assert obj["status"]["torchjob"]["replicaStatuses"]["Worker"]["restarts"] == 1


@pytest.mark.parametrize(("spec", "exits", "message"), [
    ({"restart_policy": "Never"}, {"worker-1": [(3, 2)]},
     "PyTorchJob demo is failed because 1 Worker replica(s) failed."),
    ({"run_policy": {"backoffLimit": 1}}, {"worker-1": [(3, 1), (3, 1)]},
     "Job demo has failed because it has reached the specified backoff limit"),
    ({"run_policy": {"activeDeadlineSeconds": 5}}, {},
     "Job demo has failed because it was active longer than specified deadline"),
    ({"restart_policy": "ExitCode"}, {"master-0": [(3, 1)]},
     'job "demo" is failing because "Master" replica(s) failed.'),
])
def test_a_failure_is_worded_as_kubeflow_words_its_cause_and_katib_sees_it(
        spec: dict[str, Any], exits: dict[str, list[tuple[float, int]]], message: str) -> None:
    job = seed_job(**spec)
    _, obj = run(job, {"master-0": [(60, 0)], "worker-0": [(60, 0)], "worker-1": [(60, 0)], **exits})
    cond = condition(obj, "Failed")
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "PyTorchJobFailed", message)
    assert state(obj) == "Failed" and "Succeeded" not in true_types(obj)
    verdict, got = katib(obj)
    assert verdict == "Failed" and got is not None and got["message"] == message
    assert obj["status"]["completionTime"] is not None


def test_the_root_cause_is_in_status_torchjob_where_no_reader_looks() -> None:
    job = seed_job(restart_policy="Never")
    _, obj = run(job, {"master-0": [(60, 0)], "worker-0": [(60, 0)], "worker-1": [(3, 137)]})
    failure = obj["status"]["torchjob"]["failure"]
    assert failure["replica"] == "worker-1" and failure["exitCode"] == 137 and failure["signal"] == "SIGKILL"
    assert obj["status"]["torchjob"]["state"] == "Failed"
    assert set(obj["status"]) == {"conditions", "replicaStatuses", "startTime", "completionTime",
                                  "lastReconcileTime", "torchjob"}


def test_a_job_with_no_master_words_its_messages_with_the_namespace_and_its_worker_0_is_the_master() -> None:
    job = make_job("demo", master=False, workers=2, restart_policy="OnFailure")
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": "team"})})
    _, obj = run(job, {"worker-0": [(5, 0)], "worker-1": [(5, 0)]})
    assert condition(obj, "Running")["message"] == "PyTorchJob team/demo is running."
    assert condition(obj, "Succeeded")["message"] == "PyTorchJob team/demo successfully completed."
    assert set(obj["status"]["replicaStatuses"]) == {"Worker"}
    assert kfl.pod_labels("demo", "Worker", 0, has_master=False)["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in kfl.pod_labels("demo", "Worker", 1, has_master=False)


def test_suspend_and_resume_read_as_kubeflows() -> None:
    job = seed_job()
    result = simulate(job, {"master-0": [(20, 0), (20, 0)], "worker-0": [(20, 0), (20, 0)],
                            "worker-1": [(20, 0), (20, 0)]},
                      run_policy_changes=[(5, {"suspend": True}), (8, {"suspend": False})])
    suspended = next(project(job, s.plan.status, s.t) for s in result.steps
                     if s.plan.status.is_true(ConditionType.SUSPENDED))
    assert state(suspended) == "Suspended"
    assert (condition(suspended, "Suspended")["reason"], condition(suspended, "Suspended")["message"]) == (
        "PyTorchJobSuspended", "PyTorchJob demo is suspended.")
    running = condition(suspended, "Running")
    assert (running["status"], running["reason"]) == ("False", "PyTorchJobSuspended")
    final = project(job, result.status, result.end)
    resumed = condition(final, "Suspended")
    assert (resumed["status"], resumed["reason"], resumed["message"]) == (
        "False", "PyTorchJobResumed", "PyTorchJob demo is resumed.")
    assert state(final) == "Succeeded"


def test_labels_are_kubeflows() -> None:
    assert kfl.pod_labels("demo", "Master", 0, has_master=True) == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "demo",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master"}
    worker = kfl.pod_labels("demo", "Worker", 1, has_master=True)
    assert worker["training.kubeflow.org/replica-type"] == "worker" and "training.kubeflow.org/job-role" not in worker
    assert kfl.service_labels("demo") == {"training.kubeflow.org/operator-name": "pytorchjob-controller",
                                         "training.kubeflow.org/job-name": "demo"}
    assert kfl.service_labels("demo", "Worker", 1)["training.kubeflow.org/replica-index"] == "1"
    # the selector in replicaStatuses selects the pods it counts
    sel = dict(kv.split("=") for kv in kf.selector("demo", "Worker").split(","))
    assert sel.items() <= worker.items()


def test_managed_by_and_suspend() -> None:
    assert kf.served_here({}) and kf.served_here({"runPolicy": {"managedBy": "kubeflow.org/training-operator"}})
    assert not kf.served_here({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}})
    assert kf.manager({"runPolicy": {"suspend": True}}) is None
    assert kf.suspended({"runPolicy": {"suspend": True}}) and not kf.suspended({"runPolicy": {}})


def test_torchjob_reads_its_status_back_whole() -> None:
    job = seed_job()
    result = simulate(job, {"master-0": [(10, 0)], "worker-0": [(9, 0)], "worker-1": [(3, 1), (5, 0)]})
    for step in result.steps:
        stored = kf.kubeflow_status(job, step.plan.status)
        assert kf.torchjob_status(stored) == step.plan.status.model_copy(update={"progress": None})
        assert "lastReconcileTime" not in stored  # not given: the stored one is left as it is


def test_a_job_kubeflow_finished_stays_finished_when_torchjob_takes_over() -> None:
    kubeflows = {"conditions": [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "PyTorchJob demo is created.",
         "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
         "message": "PyTorchJob demo is successfully completed.", "lastUpdateTime": "2024-01-01T00:01:00Z",
         "lastTransitionTime": "2024-01-01T00:01:00Z"}],
        "replicaStatuses": {"Master": {"succeeded": 1}}, "startTime": "2024-01-01T00:00:00Z",
        "completionTime": "2024-01-01T00:01:00Z"}
    status = kf.torchjob_status(kubeflows)
    assert status.finished and status.condition(ConditionType.SUCCEEDED).reason == "Succeeded"  # type: ignore[union-attr]
    assert status.completionTime == T0 + timedelta(minutes=1)
    assert not kf.torchjob_status(None).conditions


def test_a_job_that_waits_for_a_node_keeps_kubeflows_condition_types() -> None:
    job = make_job(workers=1)
    waits = JobStatus.model_validate({"conditions": [
        {"type": "Created", "status": "True", "reason": "Created", "message": "made", "lastTransitionTime": T0},
        {"type": "Scheduled", "status": "False", "reason": "WaitingForNode", "message": "worker-0 waits for a node: "
         "0/2 nodes are available", "lastTransitionTime": T0 + timedelta(seconds=1)}]})
    out = project(job, waits)
    assert [c["type"] for c in out["status"]["conditions"]] == ["Created"]  # `kubectl get pytorchjobs`: Created
    assert state(out) == "Created"
    assert out["status"]["torchjob"]["conditions"][1]["reason"] == "WaitingForNode"  # torchjob's own, whole
