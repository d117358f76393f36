"""The kinds the operator serves with one controller and one core: torchjob's own `TorchJob`,
Kubeflow's `kubeflow.org/v1` `PyTorchJob` (read by the Kubeflow dialect, its status written in
Kubeflow's shape with torchjob's under `status.torchjob`) and Kubeflow Trainer v2's
`trainer.kubeflow.org/v1alpha1` `TrainJob` (kube/served/trainjob.py). Everything that differs between
them is here; the controller, the reconciler and core are the same code for all."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lightkube import operators

from torchjob.api.errors import InvalidJob
from torchjob.api.model import WORKER, JobStatus, TorchJob
from torchjob.api.source import Document
from torchjob.dialects import kubeflow as kubeflow_dialect
from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.objects.install.kubeflow_crd import API_VERSION as KUBEFLOW_API_VERSION
from torchjob.kube.objects.install.kubeflow_crd import KIND as KUBEFLOW_KIND
from torchjob.kube.objects.install.kubeflow_crd import PLURAL as KUBEFLOW_PLURAL
from torchjob.kube.objects.labels import LABEL_JOB, LABEL_TYPE
from torchjob.kube.objects.labels import kubeflow as kfl
from torchjob.kube.objects.labels.ownership import ANNOTATION_SERVED_AS, as_torchjob
from torchjob.kube.objects.labels.t9k import LABEL_KIND as T9K_LABEL
from torchjob.kube.objects.labels.t9k import labels as t9k_labels
from torchjob.kube.objects.labels.trainjob import JOBSET_NAME
from torchjob.kube.served import kubeflow_status as kf
from torchjob.kube.served import t9k, t9k_objects, trainer_objects, trainjob
from torchjob.kube.served.reading import Unreadable, stored


def read_torchjob(raw: dict[str, Any], found: Sequence[dict[str, Any]] = ()) -> TorchJob:
    """A stored TorchJob. An annotation saying it was read from another kind (a user's, since the
    operator never stores it) is dropped: its pods are the TorchJob's own, whatever it says."""
    from pydantic import ValidationError

    try:
        return as_torchjob(TorchJob.model_validate(stored(raw)))
    except ValidationError as e:
        raise Unreadable("; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())) from e


def read_pytorchjob(raw: dict[str, Any], found: Sequence[dict[str, Any]] = ()) -> TorchJob:
    """A PyTorchJob as the Kubeflow dialect reads it (the same reader as `torchjob run` of the file),
    marked as served for that kind: its pods are owned by it and carry Kubeflow's labels."""
    meta = raw["metadata"]
    doc = Document(stored(raw), f"{KUBEFLOW_KIND} {meta.get('namespace', 'default')}/{meta['name']}")
    try:
        job = kubeflow_dialect.read(doc).job
    except InvalidJob as e:
        raise Unreadable(str(e)) from e
    served_as = f"{KUBEFLOW_API_VERSION}/{KUBEFLOW_KIND}"
    annotations = {**(job.metadata.annotations or {}), ANNOTATION_SERVED_AS: served_as}
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})


def torchjob_status_patch(job: TorchJob | None, status: JobStatus, now: datetime) -> dict[str, Any]:
    data = status.model_dump(mode="json")
    del data["progress"]  # the progress writer's (kube/progress/writer.py): a reconcile neither writes nor clears it
    data["state"] = status.state  # for `kubectl get tj`
    if job is not None and WORKER in job.spec.pytorchReplicaSpecs:
        data["workerSelector"] = f"{LABEL_JOB}={job.name},{LABEL_TYPE}=worker"
    return data


def pytorchjob_status_patch(job: TorchJob | None, status: JobStatus, now: datetime) -> dict[str, Any]:
    if job is None:  # unreadable: Kubeflow's conditions need the job's replica types; torchjob's status says why
        return {EXTRAS_KEY: {**status.model_dump(mode="json", exclude={"progress"}), "state": status.state},
                "conditions": [{"type": c.type, "status": c.status, "reason": f"{KUBEFLOW_KIND}{c.reason}",
                                "message": c.message, "lastUpdateTime": _iso(c.lastUpdateTime),
                                "lastTransitionTime": _iso(c.lastTransitionTime)} for c in status.conditions]}
    return kf.kubeflow_status(job, status, now)


def _iso(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


EXTRAS_KEY = "torchjob"


@dataclass(frozen=True)
class ServedKind:
    kind: str  # as kube.client.KINDS names it
    plural: str  # as the API server's errors name it
    pod_labels: dict[str, Any]  # selects this kind's pods and Services (lightkube's label selector)
    read: Callable[[dict[str, Any], list[dict[str, Any]]], TorchJob]  # (stored, what `needs` found); raises Unreadable
    status_of: Callable[[dict[str, Any]], JobStatus]  # torchjob's status, from the stored object
    status_patch: Callable[[TorchJob | None, JobStatus, datetime], dict[str, Any]]  # -> the stored status
    serves: Callable[[dict[str, Any]], bool]  # whether this operator acts on the object at all
    own_kueue: bool  # torchjob makes and follows its Kueue Workload (Kueue's own integration does for PyTorchJob)
    progress_patch: Callable[[dict[str, Any]], dict[str, Any]]  # a job's progress -> the status merge patch
    # the cluster objects reading a stored job also takes (a TrainJob's runtime), fetched each round
    needs: Callable[[ApiProtocol, dict[str, Any]], Awaitable[list[dict[str, Any]]]] | None = None
    # (stored, a TorchJob-shaped spec merge patch: Kueue's suspend and placement) -> the kind's own
    spec_patch: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None


TORCHJOB = ServedKind(
    kind="TorchJob", plural="torchjobs",
    # Not a pod of a PyTorchJob torchjob serves (those carry Kubeflow's operator label too).
    pod_labels={LABEL_JOB: operators.exists(), kfl.LABEL_OPERATOR: operators.not_exists(),
                JOBSET_NAME: operators.not_exists(), T9K_LABEL: operators.not_exists()},
    read=read_torchjob,
    status_of=lambda raw: JobStatus.model_validate(raw.get("status") or {}),
    status_patch=torchjob_status_patch,
    serves=lambda raw: True,
    own_kueue=True,
    progress_patch=lambda progress: {"progress": progress},
)

PYTORCHJOB = ServedKind(
    kind=f"{KUBEFLOW_API_VERSION}/{KUBEFLOW_KIND}", plural=KUBEFLOW_PLURAL,
    pod_labels={LABEL_JOB: operators.exists(), kfl.LABEL_OPERATOR: kfl.OPERATOR_NAME},
    read=read_pytorchjob,
    status_of=lambda raw: kf.torchjob_status(raw.get("status")),
    status_patch=pytorchjob_status_patch,
    serves=lambda raw: kf.served_here(raw.get("spec") or {}),
    own_kueue=False,
    # Kubeflow's status has no progress: it goes with torchjob's other extras (where status_of reads them)
    progress_patch=lambda progress: {EXTRAS_KEY: {"progress": progress}},
)

TRAINJOB = ServedKind(
    kind=f"{trainer_objects.API_VERSION}/{trainer_objects.KIND}", plural=trainer_objects.PLURAL,
    pod_labels={LABEL_JOB: operators.exists(), JOBSET_NAME: operators.exists()},
    read=trainjob.read,
    status_of=trainjob.status_of,
    status_patch=trainjob.trainjob_status,
    serves=trainjob.served_here,
    own_kueue=True,  # Kueue's own TrainJob integration needs JobSet: torchjob makes and follows the Workload
    progress_patch=trainjob.progress_patch,
    needs=trainjob.runtime_of,
    spec_patch=trainjob.kueue_spec_patch,
)

T9K = ServedKind(
    kind=f"{t9k_objects.API_VERSION}/{t9k_objects.KIND}", plural=t9k_objects.PLURAL,
    pod_labels={LABEL_JOB: operators.exists(), **t9k_labels()},
    read=t9k.read,
    status_of=t9k.status_of,
    status_patch=t9k.t9k_status,
    serves=lambda raw: True,
    own_kueue=False,  # not yet: the Kueue gate writes a TorchJob's runPolicy.suspend
    progress_patch=lambda progress: {EXTRAS_KEY: {"progress": progress}},
)
