"""Kubeflow training-operator `kubeflow.org/v1` `PyTorchJob` -> `TorchJob`.

The native spec is a superset of PyTorchJob v1 with the same field names, so the spec carries
over as it is. What differs is what Kubeflow's webhook demands and its defaults:
- every replica needs a container named `pytorch` (Kubeflow's rule; it is the training container);
- `Master.replicas` may be left out (Kubeflow rejects that; it means 1), and replica keys are
  case-insensitive (Kubeflow's webhook rejects `worker` before its defaulter would fix it);
- env semantics where they differ (documented in the README): torchjob's WORLD_SIZE counts
  processes in plain mode too and torchrun sets RANK/WORLD_SIZE itself in torchrun mode.
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION as NATIVE_API
from torchjob.api.model import DEFAULT_CONTAINER
from torchjob.api.model import KIND as NATIVE_KIND
from torchjob.api.source import Document
from torchjob.dialects import Converted, Notes

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
SPEC_FIELDS = {"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"}


def read(doc: Document) -> Converted:
    notes = Notes(doc)
    data = doc.data
    notes.top_level()
    spec = data.get("spec")
    if not isinstance(spec, dict):
        notes.error(["spec"], "a PyTorchJob needs a spec with pytorchReplicaSpecs", "add spec.pytorchReplicaSpecs")
        notes.raise_if_any()
        raise AssertionError  # unreachable
    notes.unknown(spec, SPEC_FIELDS, ["spec"])
    for rtype, rspec in notes.section(spec, "pytorchReplicaSpecs", ["spec"]).items():
        if not isinstance(rspec, dict):
            notes.error(["spec", "pytorchReplicaSpecs", rtype], f"must be a mapping, got {type(rspec).__name__}")
            continue
        template = rspec.get("template")
        pod = template.get("spec") if isinstance(template, dict) else None
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if not isinstance(containers, list):
            continue  # the model says what is missing
        if containers and not any(isinstance(c, dict) and c.get("name") == DEFAULT_CONTAINER for c in containers):
            notes.error(
                ["spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers"],
                f"no container is named {DEFAULT_CONTAINER!r}: Kubeflow requires one, and it is the one trained in",
                f"name the training container {DEFAULT_CONTAINER}",
            )
    ep = notes.section(spec, "elasticPolicy", ["spec"])
    if "nProcPerNode" in ep:
        notes.warn(["spec", "elasticPolicy", "nProcPerNode"], "deprecated since Kubeflow v1.7; use spec.nprocPerNode")
    notes.raise_if_any()
    native = {"apiVersion": NATIVE_API, "kind": NATIVE_KIND, "metadata": copy.deepcopy(data.get("metadata")),
              "spec": copy.deepcopy(spec)}
    return Converted(job_from_data(native, doc), notes.warnings)


def write(job_data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Native job data (explicit, see `convert.explicit`) -> a PyTorchJob, and what was lost."""
    lost: list[str] = []
    spec = job_data["spec"]
    out_spec: dict[str, Any] = {}
    for key in ("runPolicy", "elasticPolicy", "nprocPerNode"):
        if key in spec:
            out_spec[key] = copy.deepcopy(spec[key])
    rp = out_spec.get("runPolicy") or {}
    if rp.get("cleanPodPolicy") == "Unfinished":
        rp["cleanPodPolicy"] = "Running"
        lost.append("runPolicy.cleanPodPolicy Unfinished is written as Running (Kubeflow's nearest)")
    sp = rp.get("schedulingPolicy") or {}
    for key in ("priority", "schedulerName"):
        if key in sp:
            lost.append(f"runPolicy.schedulingPolicy.{key} has no Kubeflow field (Kubeflow sets the scheduler "
                        "per operator: --gang-scheduler-name)")
            del sp[key]
    for key in ("policies", "minSuccess", "runMode", "tensorboard", "volcano", "waitForMaster", "initializers",
                "volumeClaims"):
        if key in spec:
            lost.append(f"spec.{key} has no Kubeflow equivalent")
    replicas: dict[str, Any] = {}
    for rtype, rspec in spec["pytorchReplicaSpecs"].items():
        r = {k: copy.deepcopy(v) for k, v in rspec.items() if k in ("replicas", "restartPolicy", "template")}
        for key in ("policies", "maxRestarts", "dependsOn"):
            if key in rspec:
                lost.append(f"pytorchReplicaSpecs.{rtype}.{key} has no Kubeflow equivalent")
        containers = r["template"]["spec"]["containers"]
        if not any(c.get("name") == DEFAULT_CONTAINER for c in containers):
            lost.append(f"pytorchReplicaSpecs.{rtype}: container {containers[0]['name']!r} renamed "
                        f"{DEFAULT_CONTAINER!r} (Kubeflow requires it)")
            containers[0]["name"] = DEFAULT_CONTAINER
        replicas[rtype] = r
    out_spec["pytorchReplicaSpecs"] = replicas
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": copy.deepcopy(job_data["metadata"]),
            "spec": out_spec}, lost
