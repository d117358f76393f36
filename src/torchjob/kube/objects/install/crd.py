"""The TorchJob CustomResourceDefinition, generated from the pydantic model.

pydantic's JSON schema is turned into a Kubernetes *structural* schema: references inlined,
`X | None` as nullable X, typed mappings as `additionalProperties`, free-form ones marked
`x-kubernetes-preserve-unknown-fields`, quantities as int-or-string, docstrings and field
descriptions as the `description`s `kubectl explain` shows. Rules a schema cannot say live in CEL
(`x-kubernetes-validations`) so that the API server itself refuses a bad job with a clear message.

The status has a schema too, from the same model (`api.status.JobStatus`) and `OperatorStatus`
(what the operator adds to it): the API server prunes whatever a schema does not name, so a key the
operator writes and the schema lacks would be lost (tests/kube/test_crd_status.py keeps them together).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from torchjob.api.model import API_VERSION, KIND, JobStatus, TorchJob
from torchjob.api.status import JobState
from torchjob.api.validate import MAX_LABEL

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "torchjobs"
SHORT_NAMES = ["tj"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# CEL rules on the root object (they may read metadata.name).
ROOT_RULES = [
    {
        "rule": "!has(self.spec.pytorchReplicaSpecs.Master) || !has(self.spec.pytorchReplicaSpecs.Master.replicas)"
        " || self.spec.pytorchReplicaSpecs.Master.replicas == 1",
        "message": "a job has exactly one master: set spec.pytorchReplicaSpecs.Master.replicas to 1",
    },
    {
        "rule": "!has(self.spec.pytorchReplicaSpecs.Worker) || !has(self.spec.pytorchReplicaSpecs.Worker.replicas)"
        " || self.spec.pytorchReplicaSpecs.Worker.replicas >= 1",
        "message": "spec.pytorchReplicaSpecs.Worker.replicas must be at least 1 "
        "(remove Worker to run the master alone)",
    },
    {
        "rule": f"self.metadata.name.size() + (has(self.spec.pytorchReplicaSpecs.Worker) && "
        f"has(self.spec.pytorchReplicaSpecs.Worker.replicas) ? "
        f"string(self.spec.pytorchReplicaSpecs.Worker.replicas - 1).size() + 8 : 9) <= {MAX_LABEL}",
        "message": f"metadata.name is too long: the pod names derived from it ({{name}}-worker-{{N}}) must stay "
        f"within {MAX_LABEL} characters",
    },
    {
        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "message": "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a "
        "letter)",
    },
]


class OperatorStatus(BaseModel):
    """What the operator writes into a TorchJob's status besides the job's status (`JobStatus`): the
    keys kube/served/kinds.py's `torchjob_status_patch` and the reconciler's write add to it."""

    observedGeneration: int | None = Field(
        None, description="The generation of the spec the operator last decided on: a client that changed the spec "
        "knows the operator has acted on its change once this reaches the generation the change made.")
    state: JobState | None = None
    workerSelector: str | None = Field(
        None, description="The label selector of the job's worker pods (the scale subresource's, for kubectl scale "
        "and a HorizontalPodAutoscaler).")


def _described(node: dict[str, Any]) -> dict[str, Any]:
    return {"description": node["description"]} if node.get("description") else {}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:  # a field's own description says more than its type's docstring
        return {**_structural(defs[node["$ref"].rsplit("/", 1)[-1]], defs), **_described(node)}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        if len(options) == 1:
            one: dict[str, Any] = _structural(options[0], defs)
        elif all(o.get("type") in ("string", "integer", "number") for o in options):
            one = {"x-kubernetes-int-or-string": True}
        else:
            one = {"x-kubernetes-preserve-unknown-fields": True}
        one = {**one, **_described(node)}
        return {**one, "nullable": True} if nullable else one
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default", "$defs", "additionalProperties"):
            continue
        if key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    if node.get("type") == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = _structural(extra, defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if not out or ("type" not in out and not any(k.startswith("x-kubernetes") for k in out)):
        out = {"x-kubernetes-preserve-unknown-fields": True, **out}
    return out


def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema()
    out: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    return out


def status_schema() -> dict[str, Any]:
    """The status as the operator stores it (written only by the operator, through the status
    subresource): the job's status and the operator's own keys."""
    status, ours = _schema_of(JobStatus), _schema_of(OperatorStatus)
    both = set(status["properties"]) & set(ours["properties"])
    if both:
        raise ValueError(f"OperatorStatus repeats JobStatus fields: {sorted(both)}")
    return {**status, "properties": {**status["properties"], **ours["properties"]}}


def openapi_schema() -> dict[str, Any]:
    raw = TorchJob.model_json_schema()
    defs = raw.get("$defs", {})
    spec = _structural(raw["properties"]["spec"], defs)
    return {
        "type": "object",
        **_described(raw),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status_schema(),
        },
        "x-kubernetes-validations": ROOT_RULES,
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower(), "shortNames": SHORT_NAMES,
                      "listKind": f"{KIND}List"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
                            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                            "labelSelectorPath": ".status.workerSelector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        # a job of one replica (`-j 1x2`) has a master and no Worker: both said
                        {"name": "Master", "type": "integer", "jsonPath": ".spec.pytorchReplicaSpecs.Master.replicas"},
                        {"name": "Workers", "type": "integer", "jsonPath": ".spec.pytorchReplicaSpecs.Worker.replicas"},
                        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restartCount"},
                        # kubectl prints a number as it is: the unit in the name
                        {"name": "Progress%", "type": "number", "jsonPath": ".status.progress.percent"},
                        {"name": "ETA", "type": "integer", "jsonPath": ".status.progress.etaSeconds",
                         "priority": 1},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }
