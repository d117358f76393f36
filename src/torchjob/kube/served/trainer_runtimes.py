"""Kubeflow Trainer's runtimes with initializer steps, as `torchjob install --trainer-api` makes them
beside `torch-distributed`: the three torchtune ClusterTrainingRuntimes, as Trainer's manifests have
them (kubeflow/trainer @8c0f505, 2026-08-21, the same at v2.3.0 @658725b:
manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml, llama3_2/llama3_2_3B.yaml and
qwen2_5/qwen2_5_1.5B.yaml, installed by manifests/overlays/runtimes; the chart's
files/runtimes/torchtune-*.yaml are the same). Each has a `dataset-initializer` and a
`model-initializer` job (Trainer's images, `STORAGE_URI` a Hugging Face dataset and model), a `node`
job that dependsOn both, and the workspace, the claim `initializer` of a volumeClaimPolicies template
(20Gi, ReadWriteOnce) mounted at /workspace by all three. Trainer's release overlay tags the images
with the release (at v2.3.0: `newTag: v2.3.0`); here with the release torchjob serves. Pure: dicts
out."""

from __future__ import annotations

from typing import Any

from torchjob.dialects.trainer_runtime import ANCESTOR, NODE
from torchjob.kube.objects.install import owner as install_owner

REGISTRY = "ghcr.io/kubeflow/trainer"
DATASET_INITIALIZER_IMAGE = f"{REGISTRY}/dataset-initializer"  # the tag: the release
MODEL_INITIALIZER_IMAGE = f"{REGISTRY}/model-initializer"
TORCHTUNE_IMAGE = f"{REGISTRY}/torchtune-trainer"
WORKSPACE = "initializer"  # the claim template's name, and the volume every job mounts
WORKSPACE_PATH = "/workspace"
DATASET = "hf://tatsu-lab/alpaca"
# name -> (model, torchtune config, the tokenizer's arguments): what differs between the three
TORCHTUNE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "torchtune-llama3.2-1b": ("hf://meta-llama/Llama-3.2-1B-Instruct", "llama3_2/1B_full",
                              ("tokenizer.path=/workspace/model/original/tokenizer.model",)),
    "torchtune-llama3.2-3b": ("hf://meta-llama/Llama-3.2-3B-Instruct", "llama3_2/3B_full",
                              ("tokenizer.path=/workspace/model/original/tokenizer.model",)),
    "torchtune-qwen2.5-1.5b": ("hf://Qwen/Qwen2.5-1.5B-Instruct", "qwen2_5/1.5B_full",
                               ("tokenizer.path=/workspace/model/vocab.json",
                                "tokenizer.merges_file=/workspace/model/merges.txt")),
}


def _job(name: str, ancestor: str, container: dict[str, Any], **more: Any) -> dict[str, Any]:
    mount = {"mountPath": WORKSPACE_PATH, "name": WORKSPACE}
    return {"name": name, **more, "template": {
        "metadata": {"labels": {ANCESTOR: ancestor}},
        "spec": {"template": {"spec": {"containers": [{**container, "volumeMounts": [mount]}]}}}}}


def _initializer(step: str, image: str, uri: str) -> dict[str, Any]:
    return _job(step, step, {"name": step, "image": image, "env": [{"name": "STORAGE_URI", "value": uri}]})


def torchtune_runtime(name: str, tag: str) -> dict[str, Any]:
    """Trainer's torchtune ClusterTrainingRuntime `name` (a key of TORCHTUNE), its images tagged `tag`,
    marked as installed by torchjob."""
    model, config, tokenizer = TORCHTUNE[name]
    command = ["tune", "run", "--rdzv_endpoint=localhost:29500", "full_finetune_distributed", "--config", config,
               "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet",
               "dataset.data_dir=/workspace/dataset/data", "output_dir=/workspace/output", *tokenizer,
               "checkpointer.checkpoint_dir=/workspace/model"]
    node = _job(NODE, "trainer", {"name": NODE, "image": f"{TORCHTUNE_IMAGE}:{tag}", "command": command,
                                  "resources": {"limits": {"nvidia.com/gpu": 2}}},
                dependsOn=[{"name": s, "status": "Complete"} for s in ("dataset-initializer", "model-initializer")])
    claim = {"metadata": {"name": WORKSPACE},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torchtune",
                                              **dict([install_owner.OURS_LABEL])},
                     "annotations": dict([install_owner.OURS_ANNOTATION])},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {
                "volumeClaimPolicies": [{"templates": [claim]}],
                "replicatedJobs": [_initializer("dataset-initializer", f"{DATASET_INITIALIZER_IMAGE}:{tag}", DATASET),
                                   _initializer("model-initializer", f"{MODEL_INITIALIZER_IMAGE}:{tag}", model),
                                   node]}},
        },
    }


def torchtune_runtimes(tag: str) -> list[dict[str, Any]]:
    """The three torchtune runtimes, their images tagged `tag` (the Trainer release served)."""
    return [torchtune_runtime(name, tag) for name in TORCHTUNE]
