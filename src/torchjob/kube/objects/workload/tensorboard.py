"""T9k's `tensorboardSpec` on Kubernetes: a TensorBoard Deployment and Service `{job}-tensorboard`
reading the job's log directories. `t9k://pvc/NAME/PATH` mounts claim NAME read-only; any other
entry (s3://, gs://, a path in the image) is handed to TensorBoard as it is. Pure: dicts out.

The board outlives the training (people read it after the job ends) and goes with the job,
through its owner reference.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.defaults import ADDED_USER, TENSORBOARD_RESOURCES
from torchjob.api.model import TensorBoardSpec, TorchJob

DEFAULT_IMAGE = "tensorflow/tensorflow:2.17.0"  # ships the tensorboard command
PORT = 6006
LABEL = "torchjob.dev/tensorboard"  # not the job label: these pods are not replicas
MOUNT_ROOT = "/tensorboard"
TMP = "/tmp"  # an emptyDir: the root is read-only, and TensorBoard keeps its info file there


def name(job: TorchJob) -> str:
    return f"{job.name}-tensorboard"


def log_dirs(logdirs: list[str]) -> tuple[list[str], list[str]]:
    """The directories as TensorBoard sees them, and the claims to mount (in order, once each)."""
    paths, claims = [], []
    for item in logdirs:
        pvc = TensorBoardSpec.on_claim(item)
        if pvc is not None:
            claim, rest = pvc
            if claim not in claims:
                claims.append(claim)
            paths.append(f"{MOUNT_ROOT}/{claim}/{rest}".rstrip("/"))
        else:
            paths.append(item)
    return paths, claims


def pod_security(job: TorchJob) -> dict[str, Any]:
    """The board's pod runs as the job's pods do where their templates name a non-root user (so it
    reads the files they write), else as ADDED_USER; restricted-compliant either way."""
    names = {"runAsUser", "runAsGroup", "fsGroup", "supplementalGroups"}
    sc: dict[str, Any] = {}
    for rspec in job.spec.pytorchReplicaSpecs.values():  # Master first: the model keeps the document's order
        found = rspec.template.spec.securityContext or {}
        if found.get("runAsUser"):
            sc = {k: v for k, v in found.items() if k in names}
            break
    sc.setdefault("runAsUser", ADDED_USER)
    sc.setdefault("runAsGroup", ADDED_USER)
    return {**sc, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def objects(job: TorchJob, owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The Service and the Deployment (in creation order: the address exists before the pod), or nothing."""
    tb = job.spec.tensorboard
    if tb is None:
        return []
    ns = job.metadata.namespace or "default"
    labels = {LABEL: job.name}
    meta = {"name": name(job), "namespace": ns, "labels": labels, "ownerReferences": [owner]}
    paths, claims = log_dirs(tb.logDirs)
    container = {
        "name": "tensorboard",
        "image": tb.image or DEFAULT_IMAGE,
        "command": ["tensorboard", "--logdir_spec", ",".join(f"{i}:{p}" for i, p in enumerate(paths)),
                    "--bind_all", "--port", str(PORT)],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
        "env": [{"name": "HOME", "value": TMP}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True},
        "resources": copy.deepcopy(TENSORBOARD_RESOURCES),
        "volumeMounts": [*({"name": f"logs-{i}", "mountPath": f"{MOUNT_ROOT}/{c}", "readOnly": True}
                           for i, c in enumerate(claims)), {"name": "tmp", "mountPath": TMP}],
    }
    if tb.resources is not None:  # T9k's tensorboardSpec.resources: the document's, as written, replace the default
        container["resources"] = tb.resources.model_dump(exclude_none=True)
    volumes = [*({"name": f"logs-{i}", "persistentVolumeClaim": {"claimName": c, "readOnly": True}}
                 for i, c in enumerate(claims)), {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"securityContext": pod_security(job), "containers": [container],
                                       "volumes": volumes}}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": dict(meta),
        "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    return [service, deployment]


def address(job: TorchJob) -> str:
    return f"http://{name(job)}.{job.metadata.namespace or 'default'}.svc:{PORT}/"
