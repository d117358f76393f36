"""torchjob's own TrainJob annotations (Trainer has neither): `torchjob.dev/nodes: MIN:MAX` makes an
elastic job of every node a worker with a c10d rendezvous (Trainer's elastic TrainJob is its open
KEP-2903), and `torchjob.dev/progress-deadline-seconds` fails a job whose ranks stop reporting."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob.api.errors import InvalidJob
from torchjob.api.model import WORKER, TorchJob
from torchjob.api.source import Document
from torchjob.core.shape.topology import elastic_bounds, replicas
from torchjob.dialects import trainjob


def read(annotations: dict[str, str], nodes: int = 2) -> TorchJob:
    data: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "el", "annotations": annotations},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": nodes, "command": ["torchrun", "train.py"]}}}
    return trainjob.read(Document(data, "trainjob.yaml")).job


def test_min_max_nodes_make_an_elastic_job_of_workers() -> None:
    job = read({trainjob.NODES_ANNOTATION: "1:4"}, nodes=2)
    assert elastic_bounds(job) == (1, 4)
    assert [r.name for r in replicas(job)] == ["worker-0", "worker-1"]
    assert job.spec.elasticPolicy is not None and job.spec.elasticPolicy.rdzvBackend == "c10d"
    assert list(job.spec.pytorchReplicaSpecs) == [WORKER]


def test_a_progress_deadline() -> None:
    job = read({trainjob.PROGRESS_DEADLINE_ANNOTATION: "600"})
    assert job.spec.runPolicy.progressDeadlineSeconds == 600
    assert job.spec.elasticPolicy is None


@pytest.mark.parametrize(("annotations", "nodes", "says"), [
    ({trainjob.NODES_ANNOTATION: "4:1"}, 2, "MIN:MAX"),
    ({trainjob.NODES_ANNOTATION: "two"}, 2, "MIN:MAX"),
    ({trainjob.NODES_ANNOTATION: "3:4"}, 2, "set numNodes between 3 and 4"),
    ({trainjob.PROGRESS_DEADLINE_ANNOTATION: "0"}, 2, "positive number of seconds"),
])
def test_bad_annotations_name_the_fix(annotations: dict[str, str], nodes: int, says: str) -> None:
    with pytest.raises(InvalidJob) as err:
        read(annotations, nodes)
    assert says in str(err.value)
