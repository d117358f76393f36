"""Whose a job's objects are: the owner reference torchjob sets (the TorchJob, or the foreign kind
the operator serves it as), and what an object found in the cluster says of its owner: this job,
an earlier job of the same name, or another controller."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchjob.api.model import API_VERSION, KIND, TorchJob
from torchjob.api.validate import SERVED_AS

# On a job read from a foreign kind the operator serves (never stored): that kind's apiVersion/kind.
ANNOTATION_SERVED_AS = SERVED_AS


def served_as(job: TorchJob) -> tuple[str, str]:
    """The apiVersion and kind of the stored object this job was read from: its own, or the foreign
    kind the operator serves it as (a Kubeflow PyTorchJob), which then owns its pods."""
    served = (job.metadata.annotations or {}).get(ANNOTATION_SERVED_AS)
    if served:
        api_version, _, kind = served.rpartition("/")
        return api_version, kind
    return API_VERSION, KIND


def as_torchjob(job: TorchJob) -> TorchJob:
    """A TorchJob as its own kind: an annotation that says it was read from another kind (which the
    operator sets only on the foreign kinds it serves, never stored) dropped, so that its pods are
    owned by it and labelled as its own, whatever its document says."""
    annotations = job.metadata.annotations or {}
    if ANNOTATION_SERVED_AS not in annotations:
        return job
    kept = {k: v for k, v in annotations.items() if k != ANNOTATION_SERVED_AS}
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": kept})})


def owner_reference(job: TorchJob) -> dict[str, Any]:
    api_version, kind = served_as(job)
    return {"apiVersion": api_version, "kind": kind, "name": job.name, "uid": job.metadata.uid or "",
            "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """An object's controller (its ownerReference marked `controller`), or None."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def owned_by(obj: Mapping[str, Any], job: TorchJob) -> bool:
    """Whether the job itself (its uid) controls an object (a pod, a Workload, a PodGroup)."""
    owner = controller_of(obj)
    return owner is not None and bool(job.metadata.uid) and owner.get("uid") == job.metadata.uid


def left_by_earlier(obj: Mapping[str, Any], job: TorchJob) -> bool:
    """Whether an object is controlled by an earlier job of this one's kind and name (another uid):
    what that job left behind, until the garbage collector takes it."""
    owner = controller_of(obj) or {}
    return (not owned_by(obj, job) and owner.get("name") == job.name
            and (owner.get("apiVersion"), owner.get("kind")) == served_as(job))


def whose(obj: Mapping[str, Any]) -> str:
    """An object's controller, as a message says it."""
    owner = controller_of(obj)
    return f"{owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})" if owner else "no controller"
