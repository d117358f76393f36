"""A job's `spec.volumeClaims` (a TrainJob's runtime's volumeClaimPolicies: dialects/volume_claims.py)
as the PersistentVolumeClaims the operator makes before the job's pods: named, labelled, annotated and
specified as written, in the job's namespace, labelled with the job; owned by the job (the garbage
collector deletes it with the job) unless `whenDeleted` is Retain, as JobSet sets the JobSet as the
owner only then (jobset pkg/controllers/volume_claim_policy.go). An existing claim of that name is
used as it is, as JobSet uses it (its webhook asks for Retain then). Pure."""

from __future__ import annotations

from typing import Any

from torchjob.api.model import TorchJob
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.labels.ownership import owner_reference


def claims(job: TorchJob) -> list[dict[str, Any]]:
    out = []
    for c in job.spec.volumeClaims or []:
        meta: dict[str, Any] = {"name": c.name, "namespace": job.metadata.namespace or "default",
                                "labels": {**(c.labels or {}), LABEL_JOB: job.name}}
        if c.annotations:
            meta["annotations"] = dict(c.annotations)
        if c.whenDeleted == "Delete":
            meta["ownerReferences"] = [owner_reference(job)]
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": dict(c.spec)})
    return out
