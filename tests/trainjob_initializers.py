"""A Kubeflow Trainer runtime with dataset and model initializer jobs, shaped as Trainer's own
(manifests/base/runtimes/torchtune/*.yaml: the `trainjob-ancestor-step` labels, a container named as
its job, the workspace volume `initializer` at /workspace, the node job dependsOn both Complete), for
the tests that run one locally and on the real node. Its workspace is, as Trainer's, the claim of a
volumeClaimPolicies template (the real node has no provisioner: its test makes a hostPath
PersistentVolume for the claim), or a hostPath directory given. Its initializers are
tests/programs/initializer.py, a stand-in of Trainer's images that copies `hf://ORG/NAME` from a
local directory (HUB_DIR) instead of downloading it, because no model hub can be reached here. On
the real node it runs in stand-in images named as Trainer's (tests/e2e/images.py); locally by its
path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "tests" / "programs" / "initializer.py"
HUB = REPO / "tests" / "programs" / "hub"  # hf://tj/tiny-data, hf://tj/tiny-model
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
STEPS = ("dataset-initializer", "model-initializer")
TAG = "v2.4.0"  # Trainer's release tag (an untagged image is :latest, which the kubelet always pulls)
# What a node prints of the workspace the initializers filled (the SDK ships it, or a document runs it).
LIST_WORKSPACE = ("import pathlib; w = pathlib.Path('/workspace'); "
                  "print('workspace:', sorted(str(p.relative_to(w)) for p in w.rglob('*') if p.is_file()), flush=True)")

# torchtune-llama3.2-1b.yaml's (charts/kubeflow-trainer/files/runtimes), its claim made per TrainJob
CLAIM_POLICY = {"templates": [{"metadata": {"name": "initializer"}, "spec": {
    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}]}


def runtime(name: str, workspace: str | None, *, node_image: str, local: bool = False, backoff: int = 0,
            namespace: str | None = None) -> dict[str, Any]:
    """A runtime whose initializers fill the hostPath `workspace`, or with None the claim `initializer`
    of a volumeClaimPolicies template as Trainer's torchtune runtimes have it (20Gi ReadWriteOnce, no
    pod volume: JobSet, here torchjob, adds it); `local`: they run tests/programs/initializer.py by its
    path with this repository's hub (a local run has no image)."""
    host = {"path": workspace, "type": "DirectoryOrCreate"}
    volumes = [{"name": "initializer", "hostPath": host}] if workspace else []
    mount = {"name": "initializer", "mountPath": "/workspace"}

    def job(step: str, container: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {"name": step, **more, "template": {"metadata": {"labels": {ANCESTOR: step}}, "spec": {
            "backoffLimit": backoff, "template": {"spec": {"containers": [{**container, "volumeMounts": [mount]}],
                                                           **({"volumes": volumes} if volumes else {})}}}}}

    inits = []
    for step in STEPS:
        c: dict[str, Any] = {"name": step, "image": f"ghcr.io/kubeflow/trainer/{step}:{TAG}"}
        if local:
            c["command"] = ["python", str(PROGRAM), step.split("-")[0]]
            c["env"] = [{"name": "HUB_DIR", "value": str(HUB)}]
        inits.append(job(step, c))
    node = job("node", {"name": "node", "image": node_image}, dependsOn=[
        {"name": s, "status": "Complete"} for s in STEPS])
    node["template"]["metadata"]["labels"][ANCESTOR] = "trainer"
    claims = {} if workspace else {"volumeClaimPolicies": [copy.deepcopy(CLAIM_POLICY)]}
    meta: dict[str, Any] = {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime" if namespace is not None else "ClusterTrainingRuntime", "metadata": meta,
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                     "template": {"spec": {**claims, "replicatedJobs": [*inits, node]}}}}


def trainjob(name: str, runtime_name: str, dataset: str, model: str, *, kind: str = "ClusterTrainingRuntime",
             command: list[str] | None = None) -> dict[str, Any]:
    """The TrainJob the Kubeflow SDK writes for train(initializer=Initializer(dataset=HuggingFace...(dataset),
    model=HuggingFaceModelInitializer(model)), trainer=...) on two nodes: the model's IGNORE_PATTERNS
    as the SDK's default writes them."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime_name, "kind": kind},
                     "initializer": {"dataset": {"storageUri": dataset}, "model": {"storageUri": model, "env": [
                         {"name": "IGNORE_PATTERNS", "value": "*.msgpack,*.h5,*.bin,*.pt,*.pth"}]}},
                     "trainer": {"numNodes": 2, "command": command or ["python", "-c", LIST_WORKSPACE]}}}
