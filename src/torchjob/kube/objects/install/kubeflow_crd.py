"""Kubeflow's `pytorchjobs.kubeflow.org` v1 CustomResourceDefinition, as torchjob serves it.

The names, scope, subresources (status and scale) and printer columns are those of the
training-operator v1.8.1's CRD, so `kubectl get pytorchjobs`, the Kubeflow SDK, Kueue and Katib
see the kind they know. The schema accepts what Kubeflow's accepts, with three differences:

- the pod template is kept as written (`x-kubernetes-preserve-unknown-fields`): only the parts a
  rule reads (`containers[].name`, `containers[].image`) are typed. Kubeflow's CRD types the whole
  PodTemplateSpec; the pods torchjob creates from it are checked by the API server then.
- `runPolicy.managedBy` (added in v1.9, the last v1 line; Kueue's MultiKueue sets it) is known.
- `runPolicy.progressDeadlineSeconds`, torchjob's stall deadline, and `runPolicy.restartScope`, what a
  failed replica's restart restarts (the TorchJob's fields), are known; Kubeflow's CRD would prune
  them, and Kubeflow's clients ignore them.

What Kubeflow's validating webhook checks (v1.8.1, with what v1.9 added) is done by the API
server itself through CEL rules: no webhook server. Each message names the field and the fix.
"""

from __future__ import annotations

from typing import Any

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PyTorchJob"
LIST_KIND = "PyTorchJobList"
PLURAL = "pytorchjobs"
SINGULAR = "pytorchjob"
SHORT_NAMES: list[str] = []  # Kubeflow's CRD has none (`kubectl get pytorchjobs`)
CRD_NAME = f"{PLURAL}.{GROUP}"
CONTAINER = "pytorch"  # the training container, by Kubeflow's rule
REPLICA_TYPES = ("Master", "Worker")
RESTART_POLICIES = ["Always", "OnFailure", "Never", "ExitCode"]
CLEAN_POD_POLICIES = ["None", "Running", "All"]
MANAGED_BY_KUBEFLOW = "kubeflow.org/training-operator"  # Kubeflow's own value: the PyTorchJob controller
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGERS = [MANAGED_BY_KUBEFLOW, MANAGED_BY_MULTIKUEUE]
EXTRAS = "torchjob"  # status.torchjob: torchjob's own status, beside Kubeflow's fields

_INT32 = {"type": "integer", "format": "int32"}
_FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_TIME = {"type": "string", "format": "date-time"}


def _rule(rule: str, message: str, field_path: str | None = None, *, expression: bool = False) -> dict[str, str]:
    out = {"rule": rule, "messageExpression" if expression else "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


def _replica_spec() -> dict[str, Any]:
    container = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "required": ["name"],
        # a container name is a DNS label (the API server refuses the pod otherwise): the bound keeps
        # the rules' cost within the API server's budget
        "properties": {"name": {"type": "string", "maxLength": 63}, "image": {"type": "string"}},
        "x-kubernetes-validations": [_rule(
            "has(self.image) && size(self.image) > 0",
            "'every container needs an image: set image on container ' + self.name",
            expression=True)],
    }
    containers = {
        "type": "array", "items": container,
        "x-kubernetes-validations": [_rule(
            f"self.exists(c, c.name == '{CONTAINER}')",
            f"must have a container named {CONTAINER}: it is the training container (Kubeflow's rule); "
            f"name yours {CONTAINER}")],
    }
    template = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "metadata": _FREE,
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "required": ["containers"],
                     "properties": {"containers": containers}},
        },
    }
    return {
        "type": "object",
        "required": ["template"],
        "properties": {
            "replicas": {**_INT32, "default": 1},  # Kubeflow's defaulter's value, stored so every reader sees it
            "restartPolicy": {"type": "string", "enum": RESTART_POLICIES},
            "template": template,
        },
        "x-kubernetes-validations": [_rule(
            "has(self.template.spec)",
            f"template.spec is missing: give the replica a pod spec with a container named {CONTAINER}",
            ".template")],
    }


_MANAGER = "(has({0}.runPolicy) && has({0}.runPolicy.managedBy) ? {0}.runPolicy.managedBy : '')"

SPEC_RULES = [
    _rule("!has(self.elasticPolicy) || 'Worker' in self.pytorchReplicaSpecs",
          "spec.elasticPolicy needs a Worker replica (elastic jobs scale the workers): add "
          "spec.pytorchReplicaSpecs.Worker, or remove elasticPolicy", ".elasticPolicy"),
    _rule("!(has(self.elasticPolicy) && has(self.elasticPolicy.nProcPerNode) && has(self.nprocPerNode))",
          "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode: it is deprecated; "
          "keep only spec.nprocPerNode", ".elasticPolicy.nProcPerNode"),
    _rule(f"{_MANAGER.format('self')} == {_MANAGER.format('oldSelf')}",
          "spec.runPolicy.managedBy is immutable: create a new job to give it another manager",
          ".runPolicy.managedBy"),
]

REPLICA_SPECS_RULES = [
    _rule("self.all(k, k == 'Master' || k == 'Worker')",
          "the replica types are Master and Worker (case-sensitive, as Kubeflow's): rename or remove the others"),
    _rule("!('Master' in self) || self['Master'].replicas == 1",
          "a job has one master: set spec.pytorchReplicaSpecs.Master.replicas to 1 (more replicas go in Worker)"),
    _rule("!('Worker' in self) || self['Worker'].replicas >= 1",
          "spec.pytorchReplicaSpecs.Worker.replicas must be at least 1: remove Worker to run the master alone"),
    _rule("self.size() > 0",
          "spec.pytorchReplicaSpecs is empty: add a Master and/or Worker replica spec"),
]

ROOT_RULES = [
    _rule("self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
          "metadata.name must be a DNS-1035 label (at most 63 lower-case letters, digits and '-', starting with "
          "a letter): rename the job"),
]


def _elastic_policy() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "minReplicas": _INT32, "maxReplicas": _INT32, "maxRestarts": _INT32, "nProcPerNode": _INT32,
            "rdzvBackend": {"type": "string"}, "rdzvHost": {"type": "string"}, "rdzvId": {"type": "string"},
            "rdzvPort": _INT32,
            "rdzvConf": {"type": "array", "items": {"type": "object", "properties": {
                "key": {"type": "string"}, "value": {"type": "string"}}}},
            "standalone": {"type": "boolean"},
            "metrics": {"type": "array", "items": _FREE},  # autoscaling/v2 MetricSpec
        },
    }


def _run_policy() -> dict[str, Any]:
    quantity = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    return {
        "type": "object",
        # stored even when left out (and with it suspend: false): the Kubeflow SDK's model of a
        # PyTorchJob requires runPolicy, and its get_job fails on a job stored without one
        "default": {},
        "properties": {
            "cleanPodPolicy": {"type": "string", "enum": CLEAN_POD_POLICIES},
            "ttlSecondsAfterFinished": _INT32,
            "activeDeadlineSeconds": {"type": "integer", "format": "int64"},
            "backoffLimit": _INT32,
            # torchjob's extension (no field of Kubeflow's): the stall deadline, as on a TorchJob
            "progressDeadlineSeconds": {**_INT32, "minimum": 1},
            "hangDeadlineSeconds": {**_INT32, "minimum": 0},
            "restartScope": {"type": "string", "enum": ["Job", "Replica"]},
            "schedulingPolicy": {"type": "object", "properties": {
                "minAvailable": _INT32,
                "queue": {"type": "string", "x-kubernetes-validations": [
                    _rule("self == oldSelf", "spec.runPolicy.schedulingPolicy.queue is immutable")]},
                "minResources": {"type": "object", "additionalProperties": quantity},
                "priorityClass": {"type": "string"},
                "scheduleTimeoutSeconds": _INT32,
            }},
            "suspend": {"type": "boolean", "default": False},
            "managedBy": {"type": "string", "enum": MANAGERS},
        },
    }


def _status() -> dict[str, Any]:
    condition = {"type": "object", "required": ["type", "status"], "properties": {
        "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"},
        "message": {"type": "string"}, "lastUpdateTime": _TIME, "lastTransitionTime": _TIME}}
    replica_status = {"type": "object", "properties": {
        "active": _INT32, "succeeded": _INT32, "failed": _INT32, "selector": {"type": "string"},
        "labelSelector": {**_FREE, "x-kubernetes-map-type": "atomic"}}}  # deprecated by Kubeflow; kept readable
    return {"type": "object", "properties": {
        "conditions": {"type": "array", "items": condition},
        "replicaStatuses": {"type": "object", "additionalProperties": replica_status},
        "startTime": _TIME, "completionTime": _TIME, "lastReconcileTime": _TIME,
        "observedGeneration": {"type": "integer", "format": "int64"},  # the generation torchjob last acted on
        EXTRAS: _FREE,  # torchjob's own status (root cause, exit codes, restarts, progress)
    }}


def openapi_schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["pytorchReplicaSpecs"],
        "properties": {
            # at most Master and Worker (the rules say so by name; the bound keeps their cost in budget)
            "pytorchReplicaSpecs": {"type": "object", "maxProperties": 2, "additionalProperties": _replica_spec(),
                                    "x-kubernetes-validations": REPLICA_SPECS_RULES},
            "runPolicy": _run_policy(),
            "elasticPolicy": _elastic_policy(),
            "nprocPerNode": {"type": "string"},
        },
        "x-kubernetes-validations": SPEC_RULES,
    }
    return {
        "type": "object",
        "description": "PyTorchJob represents a PyTorchJob resource (Kubeflow's kubeflow.org/v1 API, served by "
                       "torchjob).",
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                       "spec": spec, "status": _status()},
        "x-kubernetes-validations": ROOT_RULES,
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": LIST_KIND, "plural": PLURAL, "singular": SINGULAR,
                      **({"shortNames": SHORT_NAMES} if SHORT_NAMES else {})},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": openapi_schema()},
                "subresources": {
                    "status": {},
                    "scale": {  # an HPA scales the workers, as with Kubeflow's
                        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
                        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
                    },
                },
                "additionalPrinterColumns": [
                    # Kubeflow's State: the type of the condition updated last (kubeflow_status keeps that order)
                    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }],
        },
    }
