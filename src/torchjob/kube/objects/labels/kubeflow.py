"""The labels Kubeflow's training-operator puts on a PyTorchJob's pods and Services, which its
clients select by (the SDK, Kueue, Katib): torchjob's pods of a PyTorchJob it serves carry them.
Read in training-operator v1.8.1 (`pkg/controller.v1/common/pod.go`, GenLabels). Pure."""

from __future__ import annotations

from torchjob.api.model import MASTER

OPERATOR_NAME = "pytorchjob-controller"  # Kubeflow's PyTorchJob controller's name, in its labels
LABEL_OPERATOR = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"


def job_labels(job_name: str) -> dict[str, str]:
    """The labels every pod and Service of the job carries (Kubeflow's GenLabels); Kueue selects the
    job's pods by exactly these two."""
    return {LABEL_OPERATOR: OPERATOR_NAME, LABEL_JOB_NAME: job_name.replace("/", "-")}


def is_master_role(rtype: str, index: int, has_master: bool) -> bool:
    """Kubeflow's master role: the Master replica, or worker 0 of a job with no Master."""
    return rtype == MASTER if has_master else index == 0


def pod_labels(job_name: str, rtype: str, index: int, has_master: bool) -> dict[str, str]:
    """The Kubeflow labels of one replica's pod: the replica type lower-case, as Kubeflow writes it
    (`master`, `worker`), its index, and `job-role: master` on the master role only (the SDK's
    `get_job_pod_names(is_master=True)` and Katib's primaryPodLabels select it)."""
    labels = {**job_labels(job_name), LABEL_REPLICA_TYPE: rtype.lower(), LABEL_REPLICA_INDEX: str(index)}
    if is_master_role(rtype, index, has_master):
        labels[LABEL_JOB_ROLE] = "master"
    return labels


def service_labels(job_name: str, rtype: str | None = None, index: int | None = None) -> dict[str, str]:
    """The Kubeflow labels of a Service: Kubeflow makes one per pod, labelled with its replica's type
    and index (never `job-role`); torchjob's one headless Service per job carries the job's two."""
    labels = job_labels(job_name)
    if rtype is not None:
        labels[LABEL_REPLICA_TYPE] = rtype.lower()
    if index is not None:
        labels[LABEL_REPLICA_INDEX] = str(index)
    return labels
