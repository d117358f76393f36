"""Bad job documents: each gives exactly the expected problem, at the right field and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchjob.api.errors import InvalidJob, Problem, UserError
from torchjob.api.model import TorchJob
from torchjob.dialects import load as loading

BASE = """\
apiVersion: torchjob.dev/v1
kind: TorchJob
metadata:
  name: demo
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            command: [python, train.py]
            ports:
            - name: pytorchjob-port
              containerPort: 23456
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            command: [python, train.py]
            env:
            - name: LR
              value: "0.1"
"""
# line numbers of BASE, 1-based
L_NAME, L_MASTER_REPLICAS, L_MASTER_PORTS, L_MASTER_PORT = 4, 8, 15, 17
L_WORKER, L_WORKER_REPLICAS, L_WORKER_POLICY = 18, 19, 20
L_WORKER_CONTAINER, L_WORKER_COMMAND, L_ENV_NAME, L_ENV_VALUE = 24, 25, 27, 28

MASTER = "spec.pytorchReplicaSpecs.Master"
WORKER = "spec.pytorchReplicaSpecs.Worker"
WORKER_C0 = f"{WORKER}.template.spec.containers[0]"
MASTER_C0 = f"{MASTER}.template.spec.containers[0]"


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def at_line(line: int, new: str, text: str = BASE, *, keep: bool = False) -> str:
    """Replace line `line` (1-based) with `new` (lines; "" removes it); with `keep`, insert after it."""
    lines = text.splitlines(keepends=True)
    added = [new.rstrip("\n") + "\n"] if new else []
    lines[line - 1 : line] = ([lines[line - 1]] if keep else []) + added
    return "".join(lines)


def apply(old: str, new: str) -> str:
    """`old` is the text to replace, or a line number ("12"), or a line number to insert after ("12+")."""
    if old.rstrip("+").isdigit():
        return at_line(int(old.rstrip("+")), new, keep=old.endswith("+"))
    return edit(old, new)


def load(tmp_path: Path, text: str) -> TorchJob:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return loading.load(path).job


def problems_of(tmp_path: Path, text: str) -> list[Problem]:
    with pytest.raises(InvalidJob) as info:
        load(tmp_path, text)
    assert info.value.source == str(tmp_path / "job.yaml")
    assert info.value.exit_code == 2
    return info.value.problems


def test_line_constants_match_base() -> None:
    lines = BASE.splitlines()
    expected = {
        L_NAME: "name: demo", L_MASTER_REPLICAS: "replicas: 1", L_MASTER_PORTS: "ports:",
        L_MASTER_PORT: "containerPort: 23456", L_WORKER: "Worker:", L_WORKER_REPLICAS: "replicas: 2",
        L_WORKER_POLICY: "restartPolicy: OnFailure", L_WORKER_CONTAINER: "- name: pytorch",
        L_WORKER_COMMAND: "command: [python, train.py]", L_ENV_NAME: "- name: LR", L_ENV_VALUE: 'value: "0.1"',
    }
    assert {n: lines[n - 1].strip() for n in expected} == expected
    assert lines[4] == "spec:"


def test_base_document_is_valid(tmp_path: Path) -> None:
    job = load(tmp_path, BASE)
    assert job.name == "demo"
    assert job.replica_count("Master") == 1 and job.replica_count("Worker") == 2
    assert job.restart_policy("Worker") == "OnFailure"


# (id, old, new, expected path, expected line, a piece of the message); old and new: see apply()
CASES: list[tuple[str, str, str, str, int, str]] = [
    (
        "unknown-container-field",
        f"{L_WORKER_COMMAND}", "            comand: [python, train.py]",
        f"{WORKER_C0}.comand", L_WORKER_COMMAND, "unknown field 'comand'",
    ),
    (
        "unknown-metadata-field",
        "  name: demo\n",
        "  name: demo\n  nmae: demo\n",
        "metadata.nmae", L_NAME + 1, "unknown field 'nmae'",
    ),
    (
        "misindented-field",
        f"{L_WORKER_POLICY + 1}+", "        replicas: 2",
        f"{WORKER}.template.replicas", L_WORKER_POLICY + 2, "unknown field 'replicas'",
    ),
    (
        "master-replicas-2",
        "      replicas: 1\n", "      replicas: 2\n",
        f"{MASTER}.replicas", L_MASTER_REPLICAS, "exactly one master, got 2",
    ),
    (
        "master-replicas-0",
        "      replicas: 1\n", "      replicas: 0\n",
        f"{MASTER}.replicas", L_MASTER_REPLICAS, "exactly one master, got 0",
    ),
    (
        "worker-replicas-0",
        "      replicas: 2\n", "      replicas: 0\n",
        f"{WORKER}.replicas", L_WORKER_REPLICAS, "must be at least 1, got 0",
    ),
    (
        "worker-replicas-negative",
        "      replicas: 2\n", "      replicas: -3\n",
        f"{WORKER}.replicas", L_WORKER_REPLICAS, "must be at least 1, got -3",
    ),
    (
        "worker-replicas-not-a-number",
        "      replicas: 2\n", "      replicas: two\n",
        f"{WORKER}.replicas", L_WORKER_REPLICAS, "got 'two'",
    ),
    (
        "bad-restart-policy",
        f"{L_WORKER_POLICY}", "      restartPolicy: Sometimes",
        f"{WORKER}.restartPolicy", L_WORKER_POLICY, "'Sometimes' is not allowed",
    ),
    (
        "port-too-big",
        "containerPort: 23456", "containerPort: 70000",
        f"{MASTER_C0}.ports", L_MASTER_PORTS, "port 70000 is out of range",
    ),
    (
        "port-zero",
        "containerPort: 23456", "containerPort: 0",
        f"{MASTER_C0}.ports", L_MASTER_PORTS, "port 0 is out of range",
    ),
    (
        "name-upper-case-underscore",
        "  name: demo\n", "  name: My_Job\n",
        "metadata.name", L_NAME, "not a DNS-1035 label",
    ),
    (
        "name-starts-with-digit",
        "  name: demo\n", "  name: 1job\n",
        "metadata.name", L_NAME, "not a DNS-1035 label",
    ),
    (
        "name-ends-with-dash",
        "  name: demo\n", "  name: job-\n",
        "metadata.name", L_NAME, "not a DNS-1035 label",
    ),
    (
        "name-too-long",
        "  name: demo\n", f"  name: {'a' * 55}\n",
        "metadata.name", L_NAME, "would exceed 63",
    ),
    (
        "reserved-env-pet-node-rank",
        "            - name: LR\n", "            - name: PET_NODE_RANK\n",
        f"{WORKER_C0}.env[0].name", L_ENV_NAME, "PET_NODE_RANK is set by torchjob",
    ),
    (
        "reserved-env-pet-nnodes",
        "            - name: LR\n", "            - name: PET_NNODES\n",
        f"{WORKER_C0}.env[0].name", L_ENV_NAME, "PET_NNODES is set by torchjob",
    ),
    (
        "reserved-env-torchjob-prefix",
        "            - name: LR\n", "            - name: TORCHJOB_X\n",
        f"{WORKER_C0}.env[0].name", L_ENV_NAME, "TORCHJOB_X is set by torchjob",
    ),
    (
        "reserved-env-local-rank",
        "            - name: LR\n", "            - name: LOCAL_RANK\n",
        f"{WORKER_C0}.env[0].name", L_ENV_NAME, "LOCAL_RANK is set by torchjob",
    ),
    (
        "env-value-and-value-from",
        f"{L_ENV_VALUE}+", "              valueFrom:\n                fieldRef:\n                  fieldPath: x",
        f"{WORKER_C0}.env[0]", L_ENV_NAME, "both value and valueFrom",
    ),
    (
        "env-twice",
        f"{L_ENV_VALUE}+", '            - name: LR\n              value: "0.2"',
        f"{WORKER_C0}.env[1].name", L_ENV_VALUE + 1, "LR is set twice",
    ),
    (
        "volume-mount-without-volume",
        f"{L_ENV_VALUE}+", "            volumeMounts:\n            - name: data\n              mountPath: /data",
        f"{WORKER_C0}.volumeMounts[0].name", L_ENV_VALUE + 2, "no volume named 'data'",
    ),
    (
        "unknown-replica-type",
        "    Worker:\n", "    Chief:\n",
        "spec.pytorchReplicaSpecs.Chief", L_WORKER, "unknown replica type 'Chief'",
    ),
    (
        "negative-backoff-limit",
        "5+", "  runPolicy:\n    backoffLimit: -1",
        "spec.runPolicy.backoffLimit", 7, "must not be negative, got -1",
    ),
    (
        "zero-deadline",
        "5+", "  runPolicy:\n    activeDeadlineSeconds: 0",
        "spec.runPolicy.activeDeadlineSeconds", 7, "must be positive",
    ),
    (
        "bad-clean-pod-policy",
        "5+", "  runPolicy:\n    cleanPodPolicy: Some",
        "spec.runPolicy.cleanPodPolicy", 7, "'Some' is not allowed",
    ),
    (
        "bad-nproc-per-node",
        "5+", "  nprocPerNode: many",
        "spec.nprocPerNode", 6, "'many' is neither a positive integer",
    ),
    (
        "wrong-api-version",
        "apiVersion: torchjob.dev/v1\n", "apiVersion: torchjob.dev/v2\n",
        "apiVersion", 1, "unsupported document",
    ),
    (
        "missing-name",
        "  name: demo\n", "  labels: {}\n",
        "metadata.name", 3, "required field 'name' is missing",
    ),
]


@pytest.mark.parametrize(("old", "new", "path", "line", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_document(tmp_path: Path, old: str, new: str, path: str, line: int, message: str) -> None:
    (problem,) = problems_of(tmp_path, apply(old, new))
    assert (problem.path, problem.line) == (path, line), problem
    assert message in problem.message, problem


def test_elastic_min_above_max(tmp_path: Path) -> None:
    text = at_line(5, "  elasticPolicy:\n    minReplicas: 3\n    maxReplicas: 2", keep=True)
    (problem,) = problems_of(tmp_path, text)
    assert (problem.path, problem.line) == ("spec.elasticPolicy", 6)
    assert "minReplicas (3) is greater than maxReplicas (2)" in problem.message


def test_every_problem_is_reported(tmp_path: Path) -> None:
    text = edit("      replicas: 1\n", "      replicas: 2\n")
    text = edit("  name: demo\n", "  name: Demo\n", text)
    text = edit("            - name: LR\n", "            - name: PET_MASTER_ADDR\n", text)
    found = [(p.path, p.line) for p in problems_of(tmp_path, text)]
    assert found == [
        (f"{MASTER}.replicas", L_MASTER_REPLICAS),
        ("metadata.name", L_NAME),
        (f"{WORKER_C0}.env[0].name", L_ENV_NAME),
    ]


def test_problem_rendering_names_file_line_field_and_fix(tmp_path: Path) -> None:
    with pytest.raises(InvalidJob) as info:
        load(tmp_path, edit("      replicas: 1\n", "      replicas: 2\n"))
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'job.yaml'} is not a valid job (1 problem):")
    assert f"job.yaml:{L_MASTER_REPLICAS}: {MASTER}.replicas: a job has exactly one master, got 2" in text
    assert "\n    fix: set it to 1" in text


@pytest.mark.parametrize(("length", "workers", "ok"), [(54, 2, True), (55, 2, False), (53, 11, True), (54, 11, False)])
def test_name_length_limit_follows_the_longest_replica_name(tmp_path: Path, length: int, workers: int,
                                                            ok: bool) -> None:
    text = edit("  name: demo\n", f"  name: {'a' * length}\n")
    text = edit("      replicas: 2\n", f"      replicas: {workers}\n", text)
    if ok:
        assert len(load(tmp_path, text).name) == length
        assert len(f"{'a' * length}-worker-{workers - 1}") == 63
    else:
        (problem,) = problems_of(tmp_path, text)
        assert (problem.path, problem.line) == ("metadata.name", L_NAME)
        assert f"use at most {length - 1} characters" == problem.fix


# --- parse errors: a UserError naming the line, before any field is looked at ------------------


def user_error(tmp_path: Path, text: str) -> UserError:
    with pytest.raises(UserError) as info:
        load(tmp_path, text)
    assert not isinstance(info.value, InvalidJob)
    assert info.value.exit_code == 2
    return info.value


def test_duplicate_key(tmp_path: Path) -> None:
    err = user_error(tmp_path, edit("      replicas: 2\n", "      replicas: 2\n      replicas: 3\n"))
    assert f"line {L_WORKER_REPLICAS + 1}: the key 'replicas' appears twice" in err.message


def test_invalid_yaml(tmp_path: Path) -> None:
    err = user_error(tmp_path, edit("  name: demo\n", "  name: [demo\n"))
    assert err.message.startswith(f"{tmp_path / 'job.yaml'}:")
    assert "not valid YAML" in err.message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    err = user_error(tmp_path, "apiVersion: torchjob.dev/v1\nkind: TorchJob\n  metadata: x\n")
    assert f"{tmp_path / 'job.yaml'}:3: not valid YAML" in err.message


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("just text\n", "str"), ("42\n", "int")])
def test_non_mapping_document(tmp_path: Path, text: str, kind: str) -> None:
    err = user_error(tmp_path, text)
    assert f"a job document must be a mapping (apiVersion, kind, metadata, spec), got a {kind}" in err.message


def test_empty_file(tmp_path: Path) -> None:
    assert "holds no document" in user_error(tmp_path, "# nothing\n").message


def test_two_documents(tmp_path: Path) -> None:
    err = user_error(tmp_path, BASE + "---\n" + BASE)
    assert "holds 2 jobs; torchjob runs one job per file" in err.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        loading.load(tmp_path / "nope.yaml")


# --- leniencies ------------------------------------------------------------------------------


@pytest.mark.parametrize("master_key, worker_key", [("master", "worker"), ("MASTER", "WORKER"), ("mAsTeR", "Worker")])
def test_replica_keys_are_case_insensitive(tmp_path: Path, master_key: str, worker_key: str) -> None:
    text = edit("    Master:\n", f"    {master_key}:\n")
    text = edit("    Worker:\n", f"    {worker_key}:\n", text)
    job = load(tmp_path, text)
    assert set(job.spec.pytorchReplicaSpecs) == {"Master", "Worker"}
    assert job.replica_count("Worker") == 2


def test_problem_under_lower_case_key_still_has_its_line(tmp_path: Path) -> None:
    text = edit("    Worker:\n", "    worker:\n")
    text = edit("      replicas: 2\n", "      replicas: 0\n", text)
    (problem,) = problems_of(tmp_path, text)
    assert (problem.path, problem.line) == (f"{WORKER}.replicas", L_WORKER_REPLICAS)


@pytest.mark.parametrize(("yaml_value", "value"), [("1", "1"), ("0.5", "0.5"), ("true", "true"), ("false", "false"),
                                                   ("-3", "-3"), ('"0.1"', "0.1"), ("abc", "abc")])
def test_env_value_scalars_are_strings(tmp_path: Path, yaml_value: str, value: str) -> None:
    job = load(tmp_path, edit('              value: "0.1"\n', f"              value: {yaml_value}\n"))
    env = job.spec.pytorchReplicaSpecs["Worker"].template.spec.containers[0].env
    assert env is not None and env[0].value == value


@pytest.mark.parametrize("written", ["11.10", "0755", "12:30"])
def test_env_value_is_kept_as_written(tmp_path: Path, written: str) -> None:
    job = load(tmp_path, edit('              value: "0.1"\n', f"              value: {written}\n"))
    env = job.spec.pytorchReplicaSpecs["Worker"].template.spec.containers[0].env
    assert env is not None and env[0].value == written


def test_numeric_command_arguments_are_strings(tmp_path: Path) -> None:
    job = load(tmp_path, at_line(L_WORKER_COMMAND, "            command: [python, train.py, --epochs, 3]"))
    assert job.spec.pytorchReplicaSpecs["Worker"].template.spec.containers[0].command == [
        "python", "train.py", "--epochs", "3"]


def test_args_without_command_is_enough(tmp_path: Path) -> None:
    job = load(tmp_path, at_line(L_WORKER_COMMAND, "            args: [train.py]"))
    assert job.spec.pytorchReplicaSpecs["Worker"].template.spec.containers[0].args == ["train.py"]


def test_nproc_per_node_number_becomes_a_string(tmp_path: Path) -> None:
    job = load(tmp_path, at_line(5, "  nprocPerNode: 4", keep=True))
    assert job.spec.nprocPerNode == "4"


def test_json_document(tmp_path: Path) -> None:
    import json

    import yaml

    path = tmp_path / "job.json"
    path.write_text(json.dumps(yaml.safe_load(BASE)))
    assert loading.load(path).job.name == "demo"


def test_union_type_error_is_one_problem(tmp_path: Path) -> None:
    text = at_line(L_ENV_VALUE, "            resources:\n              limits:\n                cpu: [1]", keep=True)
    problems = problems_of(tmp_path, text)
    assert [(p.path, p.line) for p in problems] == [(f"{WORKER_C0}.resources.limits.cpu", L_ENV_VALUE + 3)]
