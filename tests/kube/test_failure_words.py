"""A failed job's condition, as Kubeflow's SDK and Trainer's read it from a PyTorchJob or a TrainJob,
carries what the failing replica itself said (its termination message's line: the script's error),
beside the kind's own wording. Pure: core decides the failure, the served kinds word it."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.jobs import make_job
from torchjob.api.model import JobStatus, TorchJob
from torchjob.core.round.reconcile import Observed, Phase, World, reconcile
from torchjob.core.shape.topology import ReplicaId
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


def test_the_operator_reads_the_rank_s_own_line_from_a_termination_message_that_is_the_log_s_end() -> None:
    """With FallbackToLogsOnError a torchrun replica's termination message ends in torchrun's report:
    the status's line is what the rank said before it, not the report's last rule."""
    from tests.core.test_torch_errors import TORCHRUN_OUTPUT
    from torchjob.kube.controller.round.observe import observe_pod

    job = make_job("demo", workers=1, restart_policy="Never")
    message = "".join(TORCHRUN_OUTPUT.splitlines(keepends=True)[-80:])[-2048:]  # as the kubelet keeps it
    pod = {"metadata": {"name": "demo-worker-0", "labels": {"torchjob.dev/job-name": "demo",
                                                             "torchjob.dev/replica-type": "worker",
                                                             "torchjob.dev/replica-index": "0"},
                        "annotations": {"torchjob.dev/attempt": "0"}},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "pytorch", "state": {"terminated": {
               "exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T00:00:00Z", "message": message}}}]}}
    seen = observe_pod(job, pod)
    assert seen is not None and seen.exit_code == 1
    assert seen.message == ("what():  [enforce fail at gloo/transport/tcp/address.cc:131] rv != -1. getpeername: "
                            "Transport endpoint is not connected")
