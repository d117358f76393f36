"""`validate`, `render`, `render --kube` and `convert` (to every dialect) print no traceback for any
document: mutated documents of every dialect (a field removed, renamed, given a value of another
type), and a TrainJob with the runtime it names (two documents in one file, or `--runtime FILE`, both
mutated), are either read or refused with messages, and the exit code is 0 or 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dialects.cli import torchjob
from tests.dialects.strategies import DOCUMENTS, WITH_RUNTIME
from tests.dialects.util import SEEDS

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.floats(allow_nan=False, width=16),
                 st.sampled_from(["", "x", "-1", "auto", "$(RANK)", "t9k://pvc/", "--port", "Master", "0"]),
                 st.just([]), st.just({}), st.just([None]), st.just({"x": None}), st.just([{"name": 3}]))
SEED_DOCS = [yaml.safe_load((SEEDS / name).read_text()) for name in sorted(p.name for p in SEEDS.glob("*.yaml"))]


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*here, i))
    return out


def _tree(data: Any) -> Any:
    """A copy that shares no node (YAML aliases and drawn constants would make mutations leak)."""
    return json.loads(json.dumps(data))


@st.composite
def mutated(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The documents of one job (a TrainJob may come with its runtime), mutated anywhere inside them."""
    single = st.one_of(DOCUMENTS, st.sampled_from(SEED_DOCS)).map(lambda d: [d])
    docs = _tree(draw(st.one_of(single, WITH_RUNTIME)))
    for _ in range(draw(st.integers(0, 3))):  # 0: an accepted document, rendered and converted
        paths = [p for p in _paths(docs) if len(p) > 1]  # inside a document
        path = draw(st.sampled_from(paths))
        parent = docs
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(["junk", "delete", "rename", "wrap"]))
        if action == "junk":
            parent[key] = _tree(draw(JUNK))
        elif action == "delete":
            del parent[key]
        elif action == "rename" and isinstance(parent, dict):
            parent[f"{key}x"] = parent.pop(key)
        else:
            parent[key] = [parent[key]]
    return docs


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


COMMANDS = [["validate"], ["render"], ["render", "--kube"], ["convert", "--to", "torchjob"],
            ["convert", "--to", "kubeflow"], ["convert", "--to", "volcano"], ["convert", "--to", "trainjob"]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(mutated(), st.sampled_from(COMMANDS), st.booleans())
def test_no_traceback_for_mutated_documents(tmp_path: Path, docs: list[dict[str, Any]], command: list[str],
                                            runtime_file: bool) -> None:
    path = tmp_path / "job.yaml"
    args = [*command, str(path)]
    if len(docs) > 1 and runtime_file:  # the runtime in a file of its own
        (tmp_path / "rt.yaml").write_text(yaml.safe_dump(docs[1], sort_keys=False))
        args += ["--runtime", str(tmp_path / "rt.yaml")]
        docs = docs[:1]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    result = torchjob(*args)  # an exception other than an exit would fail the test here
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err
    if result.code == 2:
        assert result.err.startswith("error: "), result.err


def test_the_mutations_find_documents_that_are_refused(tmp_path: Path) -> None:
    """The test above is not vacuous: refused documents exit 2 with a message naming a field."""
    data = copy.deepcopy(SEED_DOCS[3])  # the T9k seed
    data["spec"]["replicaSpecs"][0]["replicas"] = "four"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    result = torchjob("validate", str(tmp_path / "job.yaml"))
    assert result.code == 2 and "spec.replicaSpecs[0].replicas: must be an integer, got 'four'" in result.err


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WITH_RUNTIME, st.booleans())
def test_a_trainjob_with_its_runtime_is_read_in_one_file_or_with_runtime(tmp_path: Path, docs: list[dict[str, Any]],
                                                                        runtime_file: bool) -> None:
    """The two-document cases above start from documents that are read."""
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(docs[1]))
    args = ["--runtime", str(tmp_path / "rt.yaml")] if runtime_file else []
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all(docs[:1] if runtime_file else docs))
    result = torchjob("validate", str(tmp_path / "job.yaml"), *args)
    assert result.code == 0, result.err


def test_a_mutated_runtime_file_is_named_in_the_refusal(tmp_path: Path) -> None:
    runtime = yaml.safe_dump({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
                              "metadata": {"name": "team-rt"}, "spec": {"mlPolicy": {"torch": [], "numNodes": "2"}}})
    (tmp_path / "rt.yaml").write_text(runtime)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "j"},
        "spec": {"runtimeRef": {"name": "team-rt", "kind": "TrainingRuntime"}, "trainer": {"command": ["true"]}}}))
    result = torchjob("convert", "--to", "torchjob", str(tmp_path / "job.yaml"), "--runtime", str(tmp_path / "rt.yaml"))
    assert result.code == 2 and "Traceback" not in result.err
    assert f"{tmp_path / 'rt.yaml'}" in result.err and "spec.mlPolicy.torch: must be a mapping" in result.err


# --- digits that are not ASCII: str.isdigit() says yes to '²', int() refuses it -----------------

VOLCANO = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vc}
spec:
  plugins:
    pytorch: [--master=master, --worker=worker, PORT]
  tasks:
    - {name: master, replicas: 1, template: {spec: {restartPolicy: OnFailure, containers: [{name: c, image: x}]}}}
    - {name: worker, replicas: 1, template: {spec: {restartPolicy: OnFailure, containers: [{name: c, image: x}]}}}
"""
NATIVE = """apiVersion: torchjob.dev/v1
kind: TorchJob
metadata: {name: np}
spec:
  nprocPerNode: "²"
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: x, command: [python, t.py]}]}}}
"""
RUNTIME_NPROC = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj}
spec:
  runtimeRef: {name: rt, kind: TrainingRuntime}
  trainer: {image: x, command: [torchrun, t.py]}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy: {numNodes: 1, torch: {numProcPerNode: "²"}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
"""


@pytest.mark.parametrize("text,command,message", [
    (VOLCANO.replace("PORT", "--port=²"), ["validate"], "spec.plugins.pytorch: --port=² is not a port"),
    (VOLCANO.replace("PORT", "--port=23456, --wait-master-enabled, --wait-master-timeout=³"), ["validate"],
     "--wait-master-timeout=³ is not a positive number of seconds"),
    (NATIVE, ["validate"], "spec.nprocPerNode: '²' is neither a positive integer"),
    (NATIVE, ["convert", "--to", "trainjob"], "spec.nprocPerNode: '²' is neither a positive integer"),
    (RUNTIME_NPROC, ["validate"], "numProcPerNode: must be a positive integer"),
])
def test_a_number_in_digits_that_are_not_ascii_is_refused_naming_the_field(tmp_path: Path, text: str,
                                                                          command: list[str], message: str) -> None:
    (tmp_path / "job.yaml").write_text(text)
    result = torchjob(*command, str(tmp_path / "job.yaml"))
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert message in result.err
