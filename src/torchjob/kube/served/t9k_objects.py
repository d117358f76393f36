"""T9k's `batch.tensorstack.dev/v1beta1` PyTorchTrainingJob API as torchjob serves it (`torchjob
install --t9k-api`): its CRD, the operator's RBAC for it, and the aggregated roles that let a
namespace's editors make PyTorchTrainingJobs. Pure: dicts out.

The spec is kept as written (`x-kubernetes-preserve-unknown-fields`) with `replicaSpecs` required:
the operator reads it with the T9k dialect (dialects/t9k.py), which names every field it cannot
honour in the job's Failed condition. The status is T9k's shape (kube/served/t9k.py); `kubectl get
pytorchtrainingjobs` shows its phase."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchjob.kube.objects import install
from torchjob.kube.served.trainer_objects import INSTALLED_BY

GROUP = "batch.tensorstack.dev"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PyTorchTrainingJob"
PLURAL = "pytorchtrainingjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"
EXTRAS = "torchjob"  # status.torchjob: torchjob's own status, beside T9k's fields
MANAGED_BY = {"app.kubernetes.io/managed-by": "torchjob"}
OPERATOR_ROLE = "torchjob-operator-t9k"
_FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def crd() -> dict[str, Any]:
    schema = {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "required": ["replicaSpecs"],
                 "properties": {"replicaSpecs": {"type": "array", "minItems": 1, "items": _FREE}}},
        "status": _FREE}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": dict(MANAGED_BY), "annotations": dict(INSTALLED_BY)},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower()},
            "versions": [{
                "name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
            }],
        },
    }


JOB_RULES: list[dict[str, Any]] = [
    # no patch: nothing writes a PyTorchTrainingJob's spec (the Kueue gate is not run for it: kinds.T9K)
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
]
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": [CRD_NAME], "verbs": ["get"]},
]


def t9k_api_objects(namespace: str, watch_namespaces: Sequence[str] = (), crd_only: bool = False
                    ) -> list[dict[str, Any]]:
    """What `torchjob install --t9k-api` adds: the CRD (alone with `crd_only`), then the RBAC."""
    if crd_only:
        return [crd()]
    return [crd(), *install.roles(OPERATOR_ROLE, JOB_RULES, CLUSTER_RULES, namespace, watch_namespaces),
            *install.aggregated(GROUP, PLURAL, "torchjob-pytorchtrainingjobs")]
