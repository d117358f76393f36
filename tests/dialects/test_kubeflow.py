"""Kubeflow `kubeflow.org/v1` `PyTorchJob` -> `TorchJob`: the spec carries over; Kubeflow's own rules."""

from __future__ import annotations

import pytest

from tests.dialects.util import doc, edit, line_of, only_problem, problem_at, problems, read
from torchjob.api.model import MASTER, WORKER
from torchjob.api.spec_facts import master_port
from torchjob.core.shape.topology import Placement, ReplicaId, elastic_bounds, nproc_per_node, replica_env

WHERE = Placement(master_addr="10.0.0.1", master_port=29500, rdzv_addr="10.0.0.1", rdzv_port=29400)

BASE = doc("""
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata:
      name: kj
      namespace: ml
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: pytorch
                  image: train:1
                  command: [python, train.py]
                  ports:
                    - name: pytorchjob-port
                      containerPort: 29500
        Worker:
          replicas: 2
          restartPolicy: ExitCode
          template:
            spec:
              containers:
                - name: pytorch
                  image: train:1
                  command: [python, train.py]
""")


def test_spec_carries_over() -> None:
    loaded = read(BASE)
    assert loaded.dialect == "kubeflow.org/v1 PyTorchJob"
    assert loaded.notes == []
    job = loaded.job
    assert (job.name, job.metadata.namespace) == ("kj", "ml")
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)
    assert (job.restart_policy(MASTER), job.restart_policy(WORKER)) == ("OnFailure", "ExitCode")
    assert master_port(job) == 29500
    c = job.spec.pytorchReplicaSpecs[WORKER].template.spec.containers[0]
    assert (c.name, c.image, c.command) == ("pytorch", "train:1", ["python", "train.py"])


def test_run_policy_elastic_policy_and_nproc() -> None:
    text = edit(BASE, "spec:\n  pytorchReplicaSpecs:", doc("""
        spec:
          runPolicy:
            cleanPodPolicy: All
            ttlSecondsAfterFinished: 60
            activeDeadlineSeconds: 3600
            backoffLimit: 4
            suspend: false
            schedulingPolicy:
              minAvailable: 3
              queue: q
              priorityClass: high
              scheduleTimeoutSeconds: 30
              minResources: {cpu: "4"}
          elasticPolicy:
            minReplicas: 1
            maxReplicas: 3
            rdzvBackend: c10d
            maxRestarts: 2
          nprocPerNode: "2"
          pytorchReplicaSpecs:""").rstrip("\n"))
    job = read(text).job
    rp = job.run_policy
    assert (rp.cleanPodPolicy, rp.ttlSecondsAfterFinished, rp.activeDeadlineSeconds, rp.backoffLimit, rp.suspend) == (
        "All", 60, 3600, 4, False)
    assert rp.schedulingPolicy is not None
    assert rp.schedulingPolicy.model_dump(exclude_none=True) == {
        "minAvailable": 3, "queue": "q", "priorityClass": "high", "scheduleTimeoutSeconds": 30,
        "minResources": {"cpu": "4"}}
    assert elastic_bounds(job) == (1, 3)
    assert nproc_per_node(job) == "2"
    env = replica_env(job, ReplicaId(WORKER, 0), ["torchrun", "train.py"], WHERE).env
    assert env["PET_NNODES"] == "1:3" and env["PET_NPROC_PER_NODE"] == "2" and env["PET_MAX_RESTARTS"] == "2"


def test_replica_keys_are_case_insensitive_and_master_replicas_may_be_left_out() -> None:
    text = edit(BASE, "    Master:\n      replicas: 1\n", "    master:\n")
    text = edit(text, "    Worker:", "    WORKER:")
    job = read(text).job
    assert list(job.spec.pytorchReplicaSpecs) == [MASTER, WORKER]
    assert job.replica_count(MASTER) == 1


def test_worker_only_job() -> None:
    text = BASE[: BASE.index("    Master:")] + BASE[BASE.index("    Worker:"):]
    job = read(text).job
    assert list(job.spec.pytorchReplicaSpecs) == [WORKER]


def test_sidecars_are_allowed_next_to_the_pytorch_container() -> None:
    text = edit(BASE, "          containers:\n            - name: pytorch\n              image: train:1\n"
                "              command: [python, train.py]\n              ports:",
                "          containers:\n            - name: logs\n              image: fluentbit\n"
                "            - name: pytorch\n              image: train:1\n"
                "              command: [python, train.py]\n              ports:")
    job = read(text).job
    assert [c.name for c in job.spec.pytorchReplicaSpecs[MASTER].template.spec.containers] == ["logs", "pytorch"]
    assert master_port(job) == 29500  # the pytorch container's port, not the first container's


# --- warnings --------------------------------------------------------------------------------------------


def test_deprecated_nproc_in_elastic_policy_warns() -> None:
    text = edit(BASE, "spec:\n  pytorchReplicaSpecs:", "spec:\n  elasticPolicy:\n    nProcPerNode: 4\n"
                "  pytorchReplicaSpecs:")
    loaded = read(text)
    assert loaded.notes == [f"job.yaml:{line_of(text, 'nProcPerNode')}: spec.elasticPolicy.nProcPerNode: deprecated "
                            "since Kubeflow v1.7; use spec.nprocPerNode"]
    assert nproc_per_node(loaded.job) == "4"


def test_status_is_ignored_with_a_warning() -> None:
    text = BASE + "status:\n  conditions: []\n"
    loaded = read(text)
    assert loaded.notes == [f"job.yaml:{line_of(text, 'status:')}: status: a status is output, not input; ignored"]
    assert loaded.job.status is None


# --- errors ----------------------------------------------------------------------------------------------


def test_no_container_named_pytorch() -> None:
    head, tail = BASE.split("    Worker:")
    text = head + "    Worker:" + tail.replace("- name: pytorch\n", "- name: trainer\n")  # only the worker's
    p = problem_at(text, "spec.pytorchReplicaSpecs.Worker.template.spec.containers", "containers:", 1)
    assert "no container is named 'pytorch'" in p.message
    assert p.fix == "name the training container pytorch"


def test_no_container_named_pytorch_in_either_replica() -> None:
    text = BASE.replace("- name: pytorch\n", "- name: main\n")
    found = problems(text)
    assert [(p.path, p.line) for p in found] == [
        ("spec.pytorchReplicaSpecs.Master.template.spec.containers", line_of(text, "containers:", 0)),
        ("spec.pytorchReplicaSpecs.Worker.template.spec.containers", line_of(text, "containers:", 1)),
    ]


@pytest.mark.parametrize(("where", "field"), [("spec", "pytorchReplicaSpec"), ("spec", "successPolicy"),
                                              ("spec", "policies"), ("spec", "minSuccess")])
def test_unknown_spec_field(where: str, field: str) -> None:
    """Native-only fields (policies, minSuccess) are not Kubeflow's: an error there too."""
    text = edit(BASE, "spec:\n  pytorchReplicaSpecs:", f"spec:\n  {field}: 1\n  pytorchReplicaSpecs:")
    p = problem_at(text, f"{where}.{field}", f"{field}: 1")
    assert p.message == f"unknown field {field!r}"


def test_unknown_top_level_field() -> None:
    text = edit(BASE, "kind: PyTorchJob\n", "kind: PyTorchJob\nspecs: {}\n")
    p = only_problem(text)
    assert (p.path, p.line) == ("specs", 3)


def test_no_spec() -> None:
    text = BASE[: BASE.index("spec:")]
    p = only_problem(text)
    assert p.path == "spec"
    assert "needs a spec with pytorchReplicaSpecs" in p.message


def test_unknown_container_field_names_the_kubeflow_path() -> None:
    text = edit(BASE, "              command: [python, train.py]\n              ports:",
                "              command: [python, train.py]\n              comand: [x]\n              ports:")
    problem_at(text, "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].comand", "comand")


def test_master_replicas_two() -> None:
    text = edit(BASE, "    Master:\n      replicas: 1", "    Master:\n      replicas: 2")
    problem_at(text, "spec.pytorchReplicaSpecs.Master.replicas", "replicas: 2")


def test_unknown_replica_type() -> None:
    text = edit(BASE, "    Worker:", "    Chief:")
    problem_at(text, "spec.pytorchReplicaSpecs.Chief", "Chief:")


def test_reserved_env() -> None:
    # MASTER_ADDR is accepted as Kubeflow accepts it, with a warning (tests/dialects/test_env_contract.py);
    # a PET_* variable would contradict the spec, and stays refused.
    text = BASE + "              env: [{name: MASTER_ADDR, value: x}]\n"
    assert "MASTER_ADDR is set by torchjob too" in read(text).notes[0]
    text = BASE + "              env: [{name: PET_NNODES, value: '9'}]\n"
    problem_at(text, "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0].name", "PET_NNODES")


def test_unsupported_kind() -> None:
    text = edit(BASE, "kind: PyTorchJob", "kind: TFJob")
    p = only_problem(text)
    assert (p.path, p.line) == ("apiVersion", 1)
    assert "unsupported document apiVersion='kubeflow.org/v1' kind='TFJob'" in p.message


MALFORMED = {
    "replica spec not a mapping": ("    Master:\n      replicas: 1\n",
                                   "    Master: 1\n    Chief:\n      replicas: 1\n"),
    "replica specs a list": ("  pytorchReplicaSpecs:\n", "  pytorchReplicaSpecs: [Master]\n  other:\n"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_shapes_are_problems_not_crashes(case: str) -> None:
    old, new = MALFORMED[case]
    assert problems(edit(BASE, old, new))
