"""A failed job's condition, as Kubeflow's SDK and Trainer's read it from a PyTorchJob or a TrainJob,
carries what the failing replica itself said (its termination message's line: the script's error),
beside the kind's own wording. Pure: core decides the failure, the served kinds word it."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.jobs import make_job
from torchjob.api.model import JobStatus, TorchJob
from torchjob.core.reconcile import Observed, Phase, World, reconcile
from torchjob.core.topology import ReplicaId
from torchjob.kube.served import kubeflow_status, trainjob

SAID = "train.py: error: argument --epochs: invalid int value: 'five'"
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def failed(message: str | None) -> tuple[TorchJob, JobStatus]:
    job = make_job("demo", workers=1, restart_policy="Never")
    job = job.model_copy(update={"status": reconcile(job, World(replicas={}), NOW).status})
    world = World(replicas={"worker-0": Observed(ReplicaId("Worker", 0), 0, Phase.FAILED, 2, "Error", message, NOW),
                            "master-0": Observed(ReplicaId("Master", 0), 0, Phase.RUNNING)})
    return job, reconcile(job, world, NOW).status


def test_the_pytorchjob_and_trainjob_failed_conditions_say_the_scripts_own_words() -> None:
    job, status = failed(SAID)
    assert status.failure is not None and status.failure.message.endswith(f": {SAID}")
    kf = next(c for c in kubeflow_status.conditions(job, status) if c["type"] == "Failed")
    assert kf["message"] == f"PyTorchJob demo is failed because 1 Worker replica(s) failed. worker-0: {SAID}"
    tj = next(c for c in trainjob.conditions(status, NOW) if c["type"] == "Failed")
    assert tj["message"] == f"worker-0 failed with exit code 2 (restartPolicy Never): {SAID}"


def test_without_the_replicas_words_the_wording_is_the_kinds_own() -> None:
    job, status = failed(None)
    kf = next(c for c in kubeflow_status.conditions(job, status) if c["type"] == "Failed")
    assert kf["message"] == "PyTorchJob demo is failed because 1 Worker replica(s) failed."
    tj = next(c for c in trainjob.conditions(status, NOW) if c["type"] == "Failed")
    assert tj["message"] == "worker-0 failed with exit code 2 (restartPolicy Never)"
