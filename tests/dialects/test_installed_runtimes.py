"""The runtimes `torchjob install --trainer-api` makes beside torch-distributed (Trainer's torchtune
runtimes, kube/served/trainer_runtimes.py) serve a TrainJob as Trainer does: the dialect reads their
dataset and model initializers and their workspace claim, and the TrainJob's spec.initializer fills
them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from torchjob.api.errors import InvalidJob
from torchjob.dialects.load import load
from torchjob.kube.served import trainer_objects, trainer_runtimes


@pytest.mark.parametrize("name", list(trainer_runtimes.TORCHTUNE))
def test_an_installed_torchtune_runtime_serves_a_trainjob_with_initializers(name: str, tmp_path: Path) -> None:
    (rt,) = [o for o in trainer_objects.trainer_api_objects("team") if o["metadata"]["name"] == name]
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tune"},
                "spec": {"runtimeRef": {"name": name},
                         "initializer": {"dataset": {"storageUri": "hf://tj/tiny-data"},
                                         "model": {"storageUri": "hf://tj/tiny-model", "env": [
                                             {"name": "IGNORE_PATTERNS", "value": "*.bin"}]}},
                         "trainer": {"command": ["python", "train.py"], "resourcesPerNode": {"limits": {"cpu": 1}}}}}
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump_all([trainjob, rt]))
    job = load(tmp_path / "tj.yaml").job
    steps = {s.name: s.template.spec.containers[0] for s in job.spec.initializers or []}
    assert list(steps) == ["dataset-initializer", "model-initializer"]
    tag = trainer_objects.TRAINER_VERSION
    assert steps["dataset-initializer"].image == f"ghcr.io/kubeflow/trainer/dataset-initializer:{tag}"
    assert [(e.name, e.value) for e in steps["dataset-initializer"].env] == [("STORAGE_URI", "hf://tj/tiny-data")]
    assert [(e.name, e.value) for e in steps["model-initializer"].env] == [
        ("STORAGE_URI", "hf://tj/tiny-model"), ("IGNORE_PATTERNS", "*.bin")]
    assert [c.name for c in job.spec.volumeClaims or []] == ["initializer-tune"]
    node = job.spec.pytorchReplicaSpecs["Master"].template.spec.containers[0]
    assert node.command == ["python", "train.py"] and [m.mountPath for m in node.volumeMounts] == ["/workspace"]


def test_the_sdks_builtin_torchtune_trainer_is_refused_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    """BuiltinTrainer(TorchTuneConfig) sends `tune run` and its config as args, which Trainer's controller
    completes (recipe, config, the runtime's overrides); torchjob does not, and says so instead of running
    a command that cannot work."""
    (rt,) = [o for o in trainer_objects.trainer_api_objects("team") if o["metadata"]["name"] == "torchtune-llama3.2-1b"]
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tune"},
                "spec": {"runtimeRef": {"name": "torchtune-llama3.2-1b"},
                         "trainer": {"command": ["tune", "run"], "args": ["epochs=1"]}}}
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump_all([trainjob, rt]))
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "tj.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.trainer.command" and "BuiltinTrainer(TorchTuneConfig)" in p.message
    assert "CustomTrainer(func)" in (p.fix or "")


def test_a_storage_uri_without_a_scheme_is_refused_locally_as_trainers_crd_refuses_it(tmp_path: Path) -> None:
    (rt,) = [o for o in trainer_objects.trainer_api_objects("team") if o["metadata"]["name"] == "torchtune-llama3.2-1b"]
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tune"},
                "spec": {"runtimeRef": {"name": "torchtune-llama3.2-1b"},
                         "initializer": {"dataset": {"storageUri": "tatsu-lab/alpaca"}},
                         "trainer": {"command": ["python", "train.py"]}}}
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump_all([trainjob, rt]))
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "tj.yaml")
    (p,) = err.value.problems
    assert (p.path, p.message) == ("spec.initializer.dataset.storageUri",
                                   "'tatsu-lab/alpaca' is not a URI (scheme://...)")
