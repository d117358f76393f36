"""The labels the pods of a TrainJob carry as Kubeflow Trainer v2.3's carry them (JobSet's, on the
pods of its Indexed Jobs): what the Kubeflow SDK's TrainerClient selects a TrainJob's pods by and
names its steps from (`node-<index>`), and what Kueue's pod selector reads. torchjob makes the pods
itself: no JobSet or Job exists, only their labels. Pure."""

from __future__ import annotations

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"  # the TrainJob's name (Trainer names its JobSet so)
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"  # the runtime's trainer job: `node`
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the node's rank (PET_NODE_RANK)
NODE_JOB = "node"


def pod_labels(job_name: str, rank: int) -> dict[str, str]:
    return {JOBSET_NAME: job_name, REPLICATED_JOB: NODE_JOB, COMPLETION_INDEX: str(rank)}


def step_labels(job_name: str, step: str) -> dict[str, str]:
    """An initializer's pod (its replicated job `dataset-initializer` or `model-initializer`, one pod)."""
    return {JOBSET_NAME: job_name, REPLICATED_JOB: step, COMPLETION_INDEX: "0"}


def service_labels(job_name: str) -> dict[str, str]:
    return {JOBSET_NAME: job_name}
