"""How a pod reports progress to the operator's endpoint, as Kubeflow Trainer's pods do: the
variables, a projected volume (a service-account token for the job, the endpoint's CA) and its
mount; and the ConfigMap that gives each job namespace that CA."""

from __future__ import annotations

from typing import Any

from torchjob.api.model import TorchJob
from torchjob.kube.objects.labels.ownership import served_as

PROGRESS_VOLUME = "torchjob-progress"
PROGRESS_DIR = "/var/run/secrets/torchjob.dev/progress"
CA_CONFIGMAP = "torchjob-progress-ca"  # the progress endpoint's CA, in each job namespace
CA_KEY = "ca.crt"
PROGRESS_TOKEN_S = 3600  # the projected token's lifetime; the kubelet renews it before it ends


def progress_env(job: TorchJob, base_url: str) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """What a pod reports progress with, as Kubeflow Trainer gives it
    (`plugins/trainjobstatus/trainjobstatus.go` @8c0f505): the variables, a projected volume with a
    service-account token whose audience names the job and the endpoint's CA, and its mount."""
    from torchjob.progress.server import (
        PYTORCHJOBS,
        PYTORCHTRAININGJOBS,
        TORCHJOBS,
        TRAINJOBS,
        audience,
        status_path,
    )

    ns = job.metadata.namespace or "default"
    plurals = {"PyTorchJob": PYTORCHJOBS, "TrainJob": TRAINJOBS, "PyTorchTrainingJob": PYTORCHTRAININGJOBS}
    plural = plurals.get(served_as(job)[1], TORCHJOBS)  # the kind's path and audience
    env = {"KUBEFLOW_TRAINER_SERVER_URL": base_url.rstrip("/") + status_path(ns, job.name, plural),
           "KUBEFLOW_TRAINER_SERVER_CA_CERT": f"{PROGRESS_DIR}/{CA_KEY}",
           "KUBEFLOW_TRAINER_SERVER_TOKEN": f"{PROGRESS_DIR}/token"}
    volume = {"name": PROGRESS_VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"audience": audience(ns, job.name, plural), "expirationSeconds": PROGRESS_TOKEN_S,
                                 "path": "token"}},
        {"configMap": {"name": CA_CONFIGMAP, "items": [{"key": CA_KEY, "path": CA_KEY}]}}]}}
    mount = {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR, "readOnly": True}
    return env, volume, mount


def ca_configmap(namespace: str, ca_pem: str) -> dict[str, Any]:
    """The ConfigMap that gives a namespace's pods the progress endpoint's CA (they project it)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CA_CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
            "data": {CA_KEY: ca_pem}}
