"""The ConfigMap that carries a job's code (a script, a directory, a shipped function) to its pods,
mounted as `torchjob.api.build` says. Owned by the job (an ownerReference with its uid), so that
Kubernetes' garbage collector deletes it with the job. Pure."""

from __future__ import annotations

import base64
from typing import Any

from torchjob.api.model import API_VERSION, KIND
from torchjob.kube.objects.labels import LABEL_JOB


def code_configmap(name: str, job: str, namespace: str, files: dict[str, bytes]) -> dict[str, Any]:
    """Text files as `data`, the others (not UTF-8) as `binaryData`."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for key, content in files.items():
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode("ascii")
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_JOB: job}},
                           "data": data}
    if binary:
        out["binaryData"] = binary
    return out


def owned_by(job: str, uid: str) -> dict[str, Any]:
    """A merge patch making the job the ConfigMap's owner. Not its controller, and not blocking the job's
    deletion (that would need the user to be allowed to update the job's finalizers)."""
    return {"metadata": {"ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": job, "uid": uid,
                                              "controller": False, "blockOwnerDeletion": False}]}}
