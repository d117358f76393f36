"""`validate`, `render`, `render --kube` and `convert` (to every dialect) print no traceback for any
document: mutated documents of every dialect (a field removed, renamed, given a value of another
type), and a TrainJob with the runtime it names (two documents in one file, or `--runtime FILE`, both
mutated), are either read or refused with messages, and the exit code is 0 or 2. A fuzz, too (issue
19): the documents' text mutated byte by byte, and the command line's flags; each answered within
ANSWER_S, a refusal naming the field, and `run` of a refused document starting nothing. How many
inputs: tests/fuzz.py (TORCHJOB_FUZZ_EXAMPLES)."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dialects.cli import Result, torchjob
from tests.dialects.strategies import DOCUMENTS, WITH_RUNTIME
from tests.dialects.util import SEEDS
from tests.fuzz import ANSWER_S, examples

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.floats(allow_nan=False, width=16),
                 st.sampled_from(["", "x", "-1", "auto", "$(RANK)", "t9k://pvc/", "--port", "Master", "0"]),
                 st.just([]), st.just({}), st.just([None]), st.just({"x": None}), st.just([{"name": 3}]),
                 # what a fuzzer finds: digits that are not ASCII, huge numbers, paths out, shell
                 st.sampled_from(["²", "٣", "1e999", "../../x", "/etc/passwd", "$(touch x)", "a\x00b", "🙂" * 70]),
                 st.integers(-(2**70), 2**70), st.text(max_size=20))
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


FIELD = re.compile(r"(apiVersion|kind|metadata|spec|\bname\b|plugins|tasks|trainer|runtime|replica|template|"
                   r"container|command|env|port|policy|volume|line \d+|:\d+:|YAML|document|mapping)", re.I)


def answered(*args: str, usage: bool = False) -> Result:
    """`torchjob ARGS`, in process: an exit (no exception), within ANSWER_S; a refusal is torchjob's
    message (or, with `usage`, click's usage error)."""
    start = time.monotonic()
    result = torchjob(*args)  # an exception other than an exit would fail the test here
    took = time.monotonic() - start
    assert took < ANSWER_S, f"torchjob {' '.join(args)} took {took:.1f}s"
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err
    if result.code == 2:
        assert result.err.startswith("error: ") or (usage and "Usage: " in result.err), result.err
    return result


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow,
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
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True))
    result = answered(*args)
    if result.code == 2:
        assert FIELD.search(result.err), f"the refusal names no field: {result.err}"


@st.composite
def mangled(draw: st.DrawFn) -> str:
    """A document's text with bytes inserted, deleted or replaced (what a fuzzer of the reader does)."""
    docs = _tree(draw(st.one_of(DOCUMENTS, st.sampled_from(SEED_DOCS))))
    text = yaml.safe_dump(docs, sort_keys=False)
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(["", ":", "- ", "\n", "  ", "{", "[", "&a ", "*a", "!!python/object ", "'",
                                      '"', "\t", "#", "%YAML 1.1\n", "---\n", "?", "|", ">", "~", "²",
                                      "!!timestamp ", "2020-13-45", "!!binary ", "<<: ", "0x", ".inf"]))
        cut = draw(st.integers(0, 3))
        text = text[:i] + piece + text[i + cut:]
    return text


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(mangled(), st.sampled_from([["validate"], ["render"], ["convert", "--to", "kubeflow"]]))
def test_no_traceback_for_a_documents_text_mangled(tmp_path: Path, text: str, command: list[str]) -> None:
    (tmp_path / "job.yaml").write_text(text)
    answered(*command, str(tmp_path / "job.yaml"))


def test_the_field_check_is_not_vacuous() -> None:
    assert not FIELD.search("error: something went wrong")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
@given(mutated())
def test_run_of_a_refused_document_starts_nothing(tmp_path: Path, docs: list[dict[str, Any]]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(docs[:1], sort_keys=False, allow_unicode=True))
    if answered("validate", str(path)).code != 2:
        return  # a document that is read would run: not this test's
    home = Path(os.environ["TORCHJOB_HOME"])
    before = sorted(p.name for p in (home / "jobs").iterdir()) if (home / "jobs").exists() else []
    result = answered("run", str(path))
    assert result.code == 2
    after = sorted(p.name for p in (home / "jobs").iterdir()) if (home / "jobs").exists() else []
    assert after == before  # no job recorded, no directory, no process


# --- the command line's flags ------------------------------------------------------------------

FLAG_VALUES = st.one_of(st.text(max_size=12), st.sampled_from(["", "=", "a=", "=b", "a=b=c", "-1", "nan", "1e999",
                                                               "²", "../..", "/nonexistent", "--", "-o"]))
FLAGS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["--grace-period", "--pvc", "--configmap", "--runtime", "-o", "--output", "--to",
                               "-n", "--namespace", "--context", "--unknown", "-j"]), FLAG_VALUES).map(list),
    st.sampled_from([["--document-ports"], ["--no-resolve-python"], ["--kube"], ["-q"], ["--help"], ["--version"],
                     ["--"], ["-"]]).map(list)), max_size=4).map(lambda groups: [a for g in groups for a in g])
VERBS = st.sampled_from([["validate"], ["render"], ["convert"], ["describe"], ["logs"], ["delete"], ["list"],
                         ["suspend"], ["resume"], []])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(VERBS, FLAGS, st.sampled_from(["job.yaml", "missing.yaml", "", "no-such-job", "-"]))
def test_no_traceback_for_any_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: list[str],
                                    flags: list[str], target: str) -> None:
    """Every command with flags drawn from all of them, values of any kind: an answer or a usage error
    (exit 0 or 2), never a traceback; nothing reaches a cluster (no kubeconfig) and nothing runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(SEED_DOCS[0], sort_keys=False))
    if "--kube" in flags and verb in (["delete"], ["suspend"], ["resume"], ["logs"], ["describe"], ["list"]):
        flags = [f for f in flags if f != "--kube"]  # (these would ask a cluster: their refusal is kube's)
    args = [*verb, *flags, *([target] if target else [])]
    answered(*args, usage=True)


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


# --- a replica whose template has no container (issue 43, item 7) ---------------------------------

NO_CONTAINER = {
    "torchjob": ("apiVersion: torchjob.dev/v1\nkind: TorchJob\nmetadata: {name: e}\nspec:\n  pytorchReplicaSpecs:\n"
                 "    Master: {replicas: 1, template: {spec: {containers: []}}}\n",
                 "spec.pytorchReplicaSpecs.Master.template.spec.containers"),
    "kubeflow": ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: kf}\nspec:\n  pytorchReplicaSpecs:\n"
                 "    Master: {replicas: 1, restartPolicy: OnFailure, template: {spec: {containers: []}}}\n",
                 "spec.pytorchReplicaSpecs.Master.template.spec.containers"),
    "volcano": (VOLCANO.replace("PORT", "--port=23456").replace("containers: [{name: c, image: x}]", "containers: []",
                                                                  1), "spec.tasks[0].template.spec.containers"),
    "t9k": ("apiVersion: batch.tensorstack.dev/v1beta1\nkind: PyTorchTrainingJob\nmetadata: {name: t9}\nspec:\n"
            "  replicaSpecs:\n    - {type: master, replicas: 1, template: {spec: {containers: []}}}\n",
            "spec.replicaSpecs[0].template.spec.containers"),
    "trainjob runtime": (RUNTIME_NPROC.replace('"²"', "1").replace("[{name: node, image: x}]", "[]"),
                         "replicatedJobs[-1].template.spec.template.spec.containers"),
}


@pytest.mark.parametrize("dialect", sorted(NO_CONTAINER))
def test_a_replica_with_no_container_is_refused_naming_the_field_and_run_starts_nothing(
        tmp_path: Path, dialect: str) -> None:
    """`containers: []` was an IndexError traceback from `validate` and `run` (a check read the
    training container of every replica): now a refusal with the field, the reason and the fix."""
    text, field = NO_CONTAINER[dialect]
    (tmp_path / "job.yaml").write_text(text)
    for command in (["validate"], ["render", "--kube"], ["convert", "--to", "kubeflow"], ["run"]):
        result = answered(*command, str(tmp_path / "job.yaml"))
        assert result.code == 2 and field in result.err, (command, result.err)
        assert "fix:" in result.err, result.err
    assert not (Path(os.environ["TORCHJOB_HOME"]) / "jobs").exists() or not any(
        (Path(os.environ["TORCHJOB_HOME"]) / "jobs").iterdir())  # `run` started nothing
