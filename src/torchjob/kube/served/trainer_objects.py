"""Kubeflow Trainer v2's API as torchjob serves it (`torchjob install --trainer-api`): the CRDs
`trainjobs`, `trainingruntimes` and `clustertrainingruntimes` of `trainer.kubeflow.org/v1alpha1`, the
default `torch-distributed` ClusterTrainingRuntime as Trainer v2.3 ships it
(manifests/base/runtimes/torch_distributed.yaml; its image a setting), Trainer's torchtune runtimes,
whose dataset and model initializers fill the workspace before the node (trainer_runtimes.py), the
`kubeflow-trainer-public` ConfigMap the Kubeflow SDK reads (with the Role that lets every
authenticated user read it, as Trainer's chart has), and the operator's RBAC for them. Pure: dicts
out.

The TrainJob schema types what Trainer v2.3's does for the fields the Kubeflow SDK writes
(runtimeRef, trainer {image, command, args, env, numNodes, resourcesPerNode, numProcPerNode},
initializer, runtimePatches, suspend, managedBy, activeDeadlineSeconds) with Trainer's bounds and
defaults (numNodes >= 1, activeDeadlineSeconds >= 1, at most 16 runtimePatches, managedBy one of the
two values Trainer's CEL admits, the name an RFC 1035 label); pod-shaped parts are kept as written
(`x-kubernetes-preserve-unknown-fields`): the pods made from them are checked by the API server then.
The status is kept as written too: Trainer's fields (conditions, jobsStatus, trainerStatus) and
torchjob's own under `status.torchjob`. A runtime's spec is kept as written: the operator reads it
with the dialect (dialects/trainer_runtime.py), which names any field it cannot honour; but for
Trainer v2.4's rule on it, a replicated job's name of at most 20 characters (kubeflow/trainer#4394),
which its API server enforces and so do these CRDs.

Trainer v2.4 (kubeflow/trainer v2.4.0): the API served is v2.3's with v2.4's changes to what a
TrainJob or runtime may say, as its release announcement names them (#4394 above; #4301 and #4029
change MPI runtimes, which torchjob refuses; #4122 keeps the chart's CRDs on `helm uninstall`, as
torchjob's chart does). v2.4.0's sources were not at hand here (the newest stored snapshot of
kubeflow/trainer is 8c0f505 of 2026-08-21, after v2.3.0; fetched again on 2026-11-29, the same), so
the schemas are v2.3.0's and that snapshot's (numProcPerNode >= 1), read in pkg/apis/trainer/v1alpha1,
with #4394 added."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from torchjob.api.errors import UserError
from torchjob.dialects.trainer_runtime import REPLICATED_JOB_NAME_MAX, TORCH_DISTRIBUTED
from torchjob.kube.objects import install
from torchjob.kube.objects.install import owner as install_owner
from torchjob.kube.served.trainer_runtimes import torchtune_runtimes

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"
RUNTIME_KIND, RUNTIME_PLURAL = "TrainingRuntime", "trainingruntimes"
CLUSTER_RUNTIME_KIND, CLUSTER_RUNTIME_PLURAL = "ClusterTrainingRuntime", "clustertrainingruntimes"
MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"  # Trainer's default: the TrainJob controller
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGERS = [MANAGED_BY_TRAINER, MANAGED_BY_MULTIKUEUE]
EXTRAS = "torchjob"  # status.torchjob: torchjob's own status, beside Trainer's fields
DEFAULT_RUNTIME = "torch-distributed"
DEFAULT_RUNTIME_IMAGE = TORCH_DISTRIBUTED["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
    "template"]["spec"]["containers"][0]["image"]
PUBLIC_CONFIGMAP = "kubeflow-trainer-public"  # what the SDK's TrainerClient reads on start
SYSTEM_NAMESPACE = "kubeflow-system"  # where it reads it ($KUBEFLOW_SYSTEM_NAMESPACE, by default)
TRAINER_VERSION = "v2.4.0"  # the Trainer API torchjob serves, as the ConfigMap says it
MANAGED_BY = dict([install_owner.OURS_LABEL])
# On the objects torchjob installs: what says so when Helm has relabelled them `managed-by: Helm`
INSTALLED_BY = dict([install_owner.OURS_ANNOTATION])
RUNTIME_READERS = "torchjob-trainingruntimes-reader"  # the ClusterRole (and its binding) that lists the runtimes
# Who may list the ClusterTrainingRuntimes (the Kubeflow SDK does, for every TrainJob): every authenticated
# user and ServiceAccount by default, as Trainer's chart grants; `torchjob install --trainer-runtime-reader`
# and the chart's trainerApi.runtimeReaders narrow it (none: no binding; bind the ClusterRole yourself)
DEFAULT_RUNTIME_READERS: tuple[dict[str, str], ...] = (
    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"},)
OPERATOR_ROLE = "torchjob-operator-trainer"  # the ClusterRole (and its binding) for serving TrainJobs

_FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_ENV = {"type": "array", "items": {"type": "object", "required": ["name"], "x-kubernetes-preserve-unknown-fields": True,
                                   "properties": {"name": {"type": "string"}}}}


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def trainjob_schema() -> dict[str, Any]:
    # Trainer's bounds (pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.3.0 and @8c0f505): a storageUri
    # is empty or a URI (kubeflow/trainer#3510), at most 128 env entries, command and args items, and
    # initializer and trainer immutable once made
    env = {**_ENV, "maxItems": 128}
    strings = {"type": "array", "maxItems": 128, "items": {"type": "string", "maxLength": 1048576}}
    uri = _rule("self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
                "storageUri may be empty, or it must be a valid URI (scheme://..., e.g. hf://ORG/NAME)")
    initializer = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
        "storageUri": {"type": "string", "maxLength": 2048, "x-kubernetes-validations": [uri]}, "env": env,
        "secretRef": _FREE}}
    trainer = {"type": "object", "properties": {
        "image": {"type": "string", "maxLength": 500},
        "command": strings,
        "args": strings,
        "env": env,
        "numNodes": {"type": "integer", "format": "int32", "minimum": 1},
        "resourcesPerNode": _FREE,
        # an integer of at least 1 since v2.2 (kubeflow/trainer @8c0f505 has the rule); v2.0/v2.1's words kept
        "numProcPerNode": {"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
            _rule("type(self) == string || self >= 1", "numProcPerNode must be greater than or equal to 1")]},
    }, "x-kubernetes-validations": [_rule("self == oldSelf", "trainer is immutable")]}
    spec = {
        "type": "object",
        "required": ["runtimeRef"],
        "properties": {
            "runtimeRef": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 253},
                "apiGroup": {"type": "string", "default": GROUP, "maxLength": 253},
                "kind": {"type": "string", "default": CLUSTER_RUNTIME_KIND,
                         "enum": [RUNTIME_KIND, CLUSTER_RUNTIME_KIND]},
            }, "x-kubernetes-validations": [_rule("self == oldSelf", "runtimeRef is immutable")]},
            "initializer": {"type": "object", "properties": {"dataset": initializer, "model": initializer},
                            "x-kubernetes-validations": [_rule("self == oldSelf", "initializer is immutable")]},
            "trainer": trainer,
            "runtimePatches": {"type": "array", "maxItems": 16, "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["manager"],
                               "items": {"type": "object", "required": ["manager"],
                                         "x-kubernetes-preserve-unknown-fields": True,
                                         "properties": {"manager": {"type": "string"},
                                                        "time": {"type": "string", "format": "date-time"},
                                                        "trainingRuntimeSpec": _FREE}}},
            "suspend": {"type": "boolean", "default": False},
            "managedBy": {"type": "string", "default": MANAGED_BY_TRAINER, "maxLength": 253,
                          "x-kubernetes-validations": [
                _rule(f"self in {MANAGERS!r}",
                      f"managedBy must be {MANAGED_BY_TRAINER} (the TrainJob controller: torchjob's operator here) "
                      f"or {MANAGED_BY_MULTIKUEUE}"),
                _rule("self == oldSelf", "managedBy is immutable")]},
            "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 1,
                                      "x-kubernetes-validations": [_rule("self == oldSelf",
                                                                         "activeDeadlineSeconds is immutable")]},
        },
    }
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
                "conditions": {"type": "array", "maxItems": 8, "items": _FREE},
                "jobsStatus": {"type": "array", "items": _FREE},
                "trainerStatus": _FREE,
            }},
        },
        "x-kubernetes-validations": [_rule(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",
            "metadata.name must be an RFC 1035 label of at most 63 characters (Trainer's rule): lower-case "
            "letters, digits and '-', starting with a letter")],
    }


def _crd(kind: str, plural: str, scope: str, schema: dict[str, Any], columns: list[dict[str, Any]],
         status: bool) -> dict[str, Any]:
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema}, "additionalPrinterColumns": columns}
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": dict(MANAGED_BY), "annotations": dict(INSTALLED_BY)},
        "spec": {"group": GROUP, "scope": scope, "versions": [version],
                 "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}},
    }


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def installed_by_torchjob(crd: dict[str, Any]) -> bool:
    """Whether torchjob installed a CRD: its label (`torchjob install`), or its annotation (the chart's:
    Helm sets the label to its own name)."""
    return install_owner.ours(crd)


def runtime_schema() -> dict[str, Any]:
    """A runtime's schema: its spec kept as written (the dialect reads it), but for what Trainer v2.4's API
    server refuses: a replicated job's name of more than 20 characters (kubeflow/trainer#4394)."""
    def kept(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": properties}

    job = kept({"name": {"type": "string", "minLength": 1, "maxLength": 253}})
    job["required"] = ["name"]
    job["x-kubernetes-validations"] = [{
        "rule": f"size(self.name) <= {REPLICATED_JOB_NAME_MAX}", "fieldPath": ".name",
        "message": f"a replicated job's name may have at most {REPLICATED_JOB_NAME_MAX} characters in Kubeflow "
                   "Trainer v2.4 (kubeflow/trainer#4394: the names of its Jobs and pods are made from it); shorten "
                   "it, e.g. node, dataset-initializer, model-initializer"}]
    spec = kept({"template": kept({"spec": kept({"replicatedJobs": {"type": "array", "items": job}})})})
    return {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                             "metadata": {"type": "object"}, "spec": spec}}


def crds() -> list[dict[str, Any]]:
    """TrainJob's, TrainingRuntime's and ClusterTrainingRuntime's CRDs (TrainJob's first)."""
    runtime = runtime_schema()
    return [
        # Trainer's State column: the type of the last condition
        _crd(KIND, PLURAL, "Namespaced", trainjob_schema(),
             [{"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}, AGE], True),
        _crd(RUNTIME_KIND, RUNTIME_PLURAL, "Namespaced", copy.deepcopy(runtime), [AGE], False),
        _crd(CLUSTER_RUNTIME_KIND, CLUSTER_RUNTIME_PLURAL, "Cluster", copy.deepcopy(runtime), [AGE], False),
    ]


def default_runtime(image: str = DEFAULT_RUNTIME_IMAGE) -> dict[str, Any]:
    """Trainer v2.3's `torch-distributed` ClusterTrainingRuntime, its node image `image`."""
    rt = copy.deepcopy(TORCH_DISTRIBUTED)
    rt["metadata"]["labels"] = {**rt["metadata"]["labels"], **MANAGED_BY}
    rt["metadata"]["annotations"] = {**rt["metadata"].get("annotations", {}), **INSTALLED_BY}
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = image
    return rt


def public_objects() -> list[dict[str, Any]]:
    """The ConfigMap the Kubeflow SDK reads the Trainer version from, its namespace, and read access to
    it for every authenticated user (as Trainer's chart grants)."""
    rbac = "rbac.authorization.k8s.io/v1"
    meta = {"name": PUBLIC_CONFIGMAP, "namespace": SYSTEM_NAMESPACE, "labels": dict(MANAGED_BY),
            "annotations": dict(INSTALLED_BY)}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
         "data": {"kubeflow_trainer_version": TRAINER_VERSION}},
        {"apiVersion": rbac, "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLIC_CONFIGMAP],
                    "verbs": ["get"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": PUBLIC_CONFIGMAP},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]},
    ]


# Serving TrainJobs: the verbs the operator uses on TorchJobs, its runtimes read by name, and whether
# the TrainJob CRD is torchjob's (kube/served/trainer_api.py).
JOB_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch", "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    {"apiGroups": [GROUP], "resources": [RUNTIME_PLURAL], "verbs": ["get"]},
]
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP], "resources": [CLUSTER_RUNTIME_PLURAL], "verbs": ["get"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": [CRD_NAME], "verbs": ["get"]},
]
EDIT_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
VIEW_VERBS = ["get", "list", "watch"]


def operator_rbac(namespace: str, watch_namespaces: Sequence[str] = (),
                  runtime_readers: Sequence[dict[str, str]] = DEFAULT_RUNTIME_READERS) -> list[dict[str, Any]]:
    """The operator ServiceAccount's rights to serve TrainJobs (a ClusterRole, or Roles in the watched
    namespaces), and the aggregated roles that let a namespace's editors make TrainJobs and read the
    runtimes; the SDK lists ClusterTrainingRuntimes: `runtime_readers` (RBAC subjects) may (none: no
    binding, only the ClusterRole)."""
    rbac = "rbac.authorization.k8s.io/v1"
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    out = install.roles(OPERATOR_ROLE, JOB_RULES, CLUSTER_RULES, namespace, watch_namespaces)
    reader = RUNTIME_READERS
    out += [
        {"apiVersion": rbac, "kind": "ClusterRole",
         "metadata": {"name": "torchjob-trainjobs-edit", "labels": {f"{agg}admin": "true", f"{agg}edit": "true"}},
         "rules": [{"apiGroups": [GROUP], "resources": [PLURAL, RUNTIME_PLURAL], "verbs": EDIT_VERBS},
                   {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": VIEW_VERBS}]},
        {"apiVersion": rbac, "kind": "ClusterRole",
         "metadata": {"name": "torchjob-trainjobs-view", "labels": {f"{agg}view": "true"}},
         "rules": [{"apiGroups": [GROUP], "resources": [PLURAL, f"{PLURAL}/status", RUNTIME_PLURAL],
                    "verbs": VIEW_VERBS}]},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": reader},
         "rules": [{"apiGroups": [GROUP], "resources": [CLUSTER_RUNTIME_PLURAL], "verbs": VIEW_VERBS}]},
    ]
    if runtime_readers:
        out.append({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": reader},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
                    "subjects": [dict(s) for s in runtime_readers]})
    return out


def reader_subject(text: str) -> dict[str, str]:
    """One `--trainer-runtime-reader`: `group:NAME`, `user:NAME` or `serviceaccount:NAMESPACE:NAME`, as
    an RBAC subject (UserError naming the flag otherwise)."""
    kind, _, rest = text.partition(":")
    api = {"apiGroup": "rbac.authorization.k8s.io"}
    if kind == "group" and rest:
        return {**api, "kind": "Group", "name": rest}
    if kind == "user" and rest:
        return {**api, "kind": "User", "name": rest}
    namespace, _, name = rest.partition(":")
    if kind == "serviceaccount" and namespace and name and ":" not in name:
        return {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    raise UserError(f"--trainer-runtime-reader {text!r}: not a subject to bind",
                    fix="pass group:NAME (e.g. group:system:serviceaccounts:team-a), user:NAME or "
                        "serviceaccount:NAMESPACE:NAME; or none, for no binding")


def trainer_api_objects(namespace: str, watch_namespaces: Sequence[str] = (), crd_only: bool = False,
                        runtime_image: str = DEFAULT_RUNTIME_IMAGE,
                        runtime_readers: Sequence[dict[str, str]] = DEFAULT_RUNTIME_READERS) -> list[dict[str, Any]]:
    """What `torchjob install --trainer-api` adds: the CRDs (alone with `crd_only`), then the default
    runtime and the torchtune ones (with initializers), the SDK's ConfigMap and the RBAC (`runtime_readers`:
    who may list the ClusterTrainingRuntimes)."""
    if crd_only:
        return crds()
    return [*crds(), default_runtime(runtime_image), *torchtune_runtimes(TRAINER_VERSION), *public_objects(),
            *operator_rbac(namespace, watch_namespaces, runtime_readers)]
