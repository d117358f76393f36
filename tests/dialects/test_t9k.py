"""T9k `batch.tensorstack.dev/v1beta1` `PyTorchTrainingJob` -> `TorchJob`: replica types, torchrun, run policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dialects.util import doc, edit, line_of, only_problem, problem_at, problems, read
from torchjob.api.errors import InvalidJob
from torchjob.api.model import MASTER, WORKER, Container, TorchJob
from torchjob.api.spec_facts import is_torchrun
from torchjob.core.shape.topology import Placement, ReplicaId, elastic_bounds, nproc_per_node, replica_env, replicas

WHERE = Placement(master_addr="10.0.0.1", master_port=29500, rdzv_addr="10.0.0.2", rdzv_port=29400)

# torchrun mode, one replica type (worker x 4), the training container second.
TORCHRUN = doc("""
    apiVersion: batch.tensorstack.dev/v1beta1
    kind: PyTorchTrainingJob
    metadata:
      name: tj
    spec:
      torchrunConfig:
        enable: true
        maxRestarts: 3
        procPerNode: "2"
        rdzvBackend: c10d
        extraOptions: ["--log-dir", "/tmp/logs"]
      replicaSpecs:
        - type: worker
          replicas: 4
          restartPolicy: ExitCode
          template:
            spec:
              containers:
                - name: sidecar
                  image: busybox
                - name: python
                  image: pytorch:2
                  command: [python]
                  args: [dist_mnist.py]
""")

# plain mode, a master and a worker type.
PLAIN = doc("""
    apiVersion: batch.tensorstack.dev/v1beta1
    kind: PyTorchTrainingJob
    metadata:
      name: tp
    spec:
      replicaSpecs:
        - type: master
          replicas: 1
          restartPolicy: Never
          template:
            spec:
              containers:
                - name: pytorch
                  command: [python, train.py]
        - type: worker
          replicas: 2
          template:
            spec:
              containers:
                - name: pytorch
                  command: [python, train.py]
""")


def containers(job: TorchJob, rtype: str) -> list[Container]:
    return job.spec.pytorchReplicaSpecs[rtype].template.spec.containers


# --- replica types ---------------------------------------------------------------------------------------


def test_master_and_worker_types() -> None:
    loaded = read(PLAIN)
    assert loaded.dialect == "batch.tensorstack.dev/v1beta1 PyTorchTrainingJob"
    assert loaded.notes == []
    job = loaded.job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)
    assert job.spec.pytorchReplicaSpecs[MASTER].restartPolicy == "Never"
    assert job.spec.pytorchReplicaSpecs[WORKER].restartPolicy is None  # unset: the native default
    assert job.restart_policy(WORKER) == "OnFailure"
    assert containers(job, MASTER)[0].command == ["python", "train.py"]
    assert job.spec.elasticPolicy is None and job.spec.nprocPerNode is None and job.spec.runPolicy is None


@pytest.mark.parametrize(("count", "workers"), [(1, 0), (2, 1), (4, 3), (9, 8)])
def test_one_type_its_first_replica_is_the_master(count: int, workers: int) -> None:
    text = edit(TORCHRUN, "replicas: 4", f"replicas: {count}")
    job = read(text).job
    assert job.replica_count(MASTER) == 1
    assert job.replica_count(WORKER) == workers
    assert (WORKER in job.spec.pytorchReplicaSpecs) == (workers > 0)
    if workers:
        assert job.spec.pytorchReplicaSpecs[MASTER].template == job.spec.pytorchReplicaSpecs[WORKER].template
        assert job.restart_policy(MASTER) == job.restart_policy(WORKER) == "ExitCode"


def test_types_are_case_insensitive() -> None:
    text = edit(PLAIN, "type: master", "type: Master")
    text = edit(text, "type: worker", "type: WORKER")
    job = read(text).job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)


def test_master_type_alone() -> None:
    text = PLAIN[: PLAIN.index("    - type: worker")]
    job = read(text).job
    assert list(job.spec.pytorchReplicaSpecs) == [MASTER]


# --- torchrun --------------------------------------------------------------------------------------------


def test_torchrun_command_args_and_container_order() -> None:
    job = read(TORCHRUN).job
    for rtype in (MASTER, WORKER):
        first, second = containers(job, rtype)
        # the container named python is T9k's training container: moved first, where torchjob looks
        assert (first.name, second.name) == ("python", "sidecar")
        assert first.command == ["torchrun", "--log-dir", "/tmp/logs"]
        assert first.args == ["dist_mnist.py"]
        assert first.image == "pytorch:2"
        assert second.command is None and second.image == "busybox"
    argv = [*(containers(job, WORKER)[0].command or []), *(containers(job, WORKER)[0].args or [])]
    assert argv == ["torchrun", "--log-dir", "/tmp/logs", "dist_mnist.py"]
    assert is_torchrun(argv)


def test_torchrun_module_args_are_kept() -> None:
    text = edit(TORCHRUN, "args: [dist_mnist.py]", "args: [-m, pkg.train, --epochs, 3]")
    c = containers(read(text).job, MASTER)[0]
    assert c.command == ["torchrun", "--log-dir", "/tmp/logs"]
    assert c.args == ["-m", "pkg.train", "--epochs", "3"]


def test_torchrun_without_extra_options() -> None:
    text = edit(TORCHRUN, '    extraOptions: ["--log-dir", "/tmp/logs"]\n', "")
    c = containers(read(text).job, MASTER)[0]
    assert c.command == ["torchrun"] and c.args == ["dist_mnist.py"]


def test_torchrun_first_container_when_none_is_named_python() -> None:
    text = edit(TORCHRUN, "- name: python", "- name: trainer")
    first, second = containers(read(text).job, MASTER)
    assert (first.name, first.command) == ("sidecar", ["torchrun", "--log-dir", "/tmp/logs"])
    assert (second.name, second.command) == ("trainer", ["python"])


@pytest.mark.parametrize(("per_node", "expected"), [('"2"', "2"), ("2", "2"), ("gpu", "gpu"), ("cpu", "cpu"),
                                                    ("auto", "auto")])
def test_proc_per_node(per_node: str, expected: str) -> None:
    text = edit(TORCHRUN, 'procPerNode: "2"', f"procPerNode: {per_node}")
    job = read(text).job
    assert job.spec.nprocPerNode == expected
    assert nproc_per_node(job) == expected


def test_proc_per_node_defaults_to_one() -> None:
    text = edit(TORCHRUN, '    procPerNode: "2"\n', "")
    assert read(text).job.spec.nprocPerNode == "1"


def test_elastic_policy_from_torchrun_config() -> None:
    job = read(TORCHRUN).job
    ep = job.spec.elasticPolicy
    assert ep is not None
    assert ep.model_dump(exclude_none=True) == {"minReplicas": 4, "maxReplicas": 4, "rdzvBackend": "c10d",
                                                "maxRestarts": 3}
    assert elastic_bounds(job) == (4, 4)


def test_elastic_min_nodes() -> None:
    text = edit(TORCHRUN, "    maxRestarts: 3\n    procPerNode", "    minNodes: 2\n    procPerNode")
    text = edit(text, "    rdzvBackend: c10d\n", "")
    job = read(text).job
    assert job.spec.elasticPolicy is not None
    assert job.spec.elasticPolicy.model_dump(exclude_none=True) == {"minReplicas": 2, "maxReplicas": 4}
    assert elastic_bounds(job) == (2, 4)


def test_torchrun_env() -> None:
    job = read(TORCHRUN).job
    c = containers(job, WORKER)[0]
    argv = [*(c.command or []), *(c.args or [])]
    env = replica_env(job, ReplicaId(WORKER, 2), argv, WHERE).env
    assert env["PET_NNODES"] == "4:4"
    assert env["PET_NPROC_PER_NODE"] == "2"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_RDZV_ENDPOINT"] == "10.0.0.2:29400"
    assert env["PET_MAX_RESTARTS"] == "3"
    assert "RANK" not in env and "WORLD_SIZE" not in env
    assert len(replicas(job)) == 4


def test_torchrun_with_a_single_replica_is_not_elastic() -> None:
    text = edit(TORCHRUN, "replicas: 4", "replicas: 1")
    job = read(text).job
    assert job.spec.elasticPolicy is None
    assert job.spec.nprocPerNode == "2"
    assert containers(job, MASTER)[0].command == ["torchrun", "--log-dir", "/tmp/logs"]


def test_torchrun_disabled_keeps_the_command() -> None:
    text = edit(TORCHRUN, "enable: true", "enable: false")
    job = read(text).job
    c = containers(job, MASTER)[0]
    assert (c.name, c.command, c.args) == ("python", ["python"], ["dist_mnist.py"])
    assert job.spec.elasticPolicy is None and job.spec.nprocPerNode is None


# --- run policy, scheduler, debug mode, tensorboard ------------------------------------------------------------


def test_run_policy_scheduler_debug_and_tensorboard() -> None:
    text = edit(PLAIN, "spec:\n  replicaSpecs:", doc("""
        spec:
          runPolicy:
            backoffLimit: 2
            activeDeadlineSeconds: 100
            cleanUpPolicy: Unfinished
          scheduler:
            t9kScheduler:
              queue: q1
              priority: 50
          runMode:
            debug:
              enable: true
              replicaSpecs:
                - type: worker
                  skipInitContainer: true
                  command: [sleep, inf]
          tensorboardSpec:
            image: tensorboard:2
            trainingLogFilesets: [t9k://pvc/p/logs]
          replicaSpecs:""").rstrip("\n"))
    loaded = read(text)
    assert loaded.notes == [f"job.yaml:{line_of(text, 'skipInitContainer')}: "
                            "spec.runMode.debug.replicaSpecs.0.skipInitContainer: "
                            "init containers are never run locally"]
    spec = loaded.job.spec
    assert spec.runPolicy is not None
    assert spec.runPolicy.model_dump(exclude_none=True) == {
        "cleanPodPolicy": "Unfinished", "activeDeadlineSeconds": 100, "backoffLimit": 2,
        "schedulingPolicy": {"queue": "q1", "priority": 50, "schedulerName": "t9k-scheduler"}}
    assert spec.runMode is not None and spec.runMode.debug is not None
    assert spec.runMode.debug.model_dump(exclude_none=True) == {
        "enabled": True, "replicaSpecs": [{"type": "worker", "skipInitContainer": True, "command": ["sleep", "inf"]}]}
    assert spec.tensorboard is not None
    assert spec.tensorboard.model_dump(exclude_none=True) == {"image": "tensorboard:2",
                                                              "logDirs": ["t9k://pvc/p/logs"]}


def test_bad_clean_up_policy_names_the_t9k_field() -> None:
    text = edit(PLAIN, "spec:\n  replicaSpecs:", "spec:\n  runPolicy:\n    cleanUpPolicy: Sometimes\n  replicaSpecs:")
    problem_at(text, "spec.runPolicy.cleanUpPolicy", "cleanUpPolicy")


def test_status_is_ignored_with_a_warning() -> None:
    text = PLAIN + "status:\n  phase: Running\n"
    assert read(text).notes == [f"job.yaml:{line_of(text, 'status:')}: status: a status is output, not input; ignored"]


# --- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("free", ["node", "ps", "launcher", "Chief"])
def test_a_type_is_a_free_name(free: str) -> None:
    """T9k's type is a free string: the first replica is the master, whatever its type is called."""
    text = edit(PLAIN, "type: worker", f"type: {free}")
    job = read(text).job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)


def test_an_empty_or_missing_type_is_refused() -> None:
    p = problem_at(edit(PLAIN, "type: worker", "type: ''"), "spec.replicaSpecs[1].type", "type: ''")
    assert p.message == "replica type '' is not a name"
    text = edit(TORCHRUN, "    - type: worker\n      replicas: 4", "    - replicas: 4")
    found = problems(text)
    assert [(p.path, p.message) for p in found] == [
        ("spec.replicaSpecs[0].type", "replica type None is not a name"),
    ]  # not also "no replicas are defined": that would be the same problem twice


def test_duplicate_type() -> None:
    text = edit(PLAIN, "type: master", "type: worker")
    p = problem_at(text, "spec.replicaSpecs[1].type", "type: worker", 1)
    assert p.message == "type 'worker' appears twice"


def test_the_first_replica_spec_gives_the_master_whatever_its_count() -> None:
    """master x2 then worker x2 with one template: master-0 and three workers, as T9k counts them."""
    text = edit(PLAIN, "    - type: master\n      replicas: 1\n      restartPolicy: Never",
                "    - type: master\n      replicas: 2")
    job = read(text).job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 3)


@pytest.mark.parametrize("count", [0, -1])
def test_replicas_must_be_positive(count: int) -> None:
    text = edit(PLAIN, "    - type: master\n      replicas: 1", f"    - type: master\n      replicas: {count}")
    p = problem_at(text, "spec.replicaSpecs[0].replicas", f"replicas: {count}")
    assert p.message == f"must be at least 1, got {count}"


def test_workers_of_two_replica_specs_must_share_a_template() -> None:
    text = edit(PLAIN, "    - type: master\n      replicas: 1", "    - type: master\n      replicas: 2")
    p = problem_at(text, "spec.replicaSpecs[1]", "- type: worker")
    assert p.message == ("type 'worker' differs from replica spec 0: after the master, torchjob's workers share one "
                         "template and restart policy")


def test_a_master_type_after_the_first_spec_is_a_worker_with_a_warning() -> None:
    text = doc("""
        apiVersion: batch.tensorstack.dev/v1beta1
        kind: PyTorchTrainingJob
        metadata:
          name: order
        spec:
          replicaSpecs:
            - type: worker
              template: &pod
                spec:
                  containers:
                    - {name: pytorch, command: [python, train.py]}
            - type: master
              template: *pod
        """)
    loaded = read(text)
    assert (loaded.job.replica_count(MASTER), loaded.job.replica_count(WORKER)) == (1, 1)
    assert loaded.notes == [f"job.yaml:{line_of(text, 'type: master')}: spec.replicaSpecs.1.type: type 'master' is "
                            "not the first replica spec; T9k makes the first replica (type 'worker') the master, so "
                            "these replicas are workers"]


def test_unknown_torchrun_config_field() -> None:
    text = edit(TORCHRUN, "    maxRestarts: 3\n", "    maxRestarts: 3\n    nnodes: 4\n")
    p = problem_at(text, "spec.torchrunConfig.nnodes", "nnodes")
    assert p.message == "unknown field 'nnodes'"


def test_unknown_spec_and_replica_spec_fields() -> None:
    text = edit(PLAIN, "spec:\n  replicaSpecs:", "spec:\n  elastc: {enabled: true}\n  replicaSpecs:")
    text = edit(text, "    - type: worker\n", "    - type: worker\n      minAvailable: 1\n")
    found = problems(text)
    assert [(p.path, p.line) for p in found] == [
        ("spec.elastc", line_of(text, "elastc:")),
        ("spec.replicaSpecs[1].minAvailable", line_of(text, "minAvailable")),
    ]


def test_unknown_run_policy_field() -> None:
    text = edit(PLAIN, "spec:\n  replicaSpecs:", "spec:\n  runPolicy:\n    cleanPodPolicy: All\n  replicaSpecs:")
    problem_at(text, "spec.runPolicy.cleanPodPolicy", "cleanPodPolicy")


def test_bad_restart_policy_names_the_replica_spec() -> None:
    text = edit(PLAIN, "restartPolicy: Never", "restartPolicy: Sometimes")
    problem_at(text, "spec.replicaSpecs[0].restartPolicy", "Sometimes")


def test_native_problems_name_the_t9k_replica_spec() -> None:
    text = edit(PLAIN, "              command: [python, train.py]\n    - type: worker",
                "              command: [python, train.py]\n              workdir: /x\n    - type: worker")
    problem_at(text, "spec.replicaSpecs[0].template.spec.containers[0].workdir", "workdir")


# --- bugs --------------------------------------------------------------------------------------------------


def test_torchrun_with_the_script_in_command_is_not_silently_dropped() -> None:
    text = edit(TORCHRUN, "command: [python]\n", "command: [python, dist_mnist.py]\n")
    text = edit(text, "              args: [dist_mnist.py]\n", "")
    try:
        loaded = read(text)
    except InvalidJob as e:
        assert any("command" in p.path for p in e.problems)
        return
    c = containers(loaded.job, MASTER)[0]
    kept = "dist_mnist.py" in [*(c.command or []), *(c.args or [])]
    assert kept or any("command" in n for n in loaded.notes)


def test_problem_in_the_moved_container_names_it() -> None:
    text = edit(TORCHRUN, "              args: [dist_mnist.py]\n",
                "              args: [dist_mnist.py]\n              env: [{name: PET_NNODES, value: '1'}]\n")
    problem_at(text, "spec.replicaSpecs[0].template.spec.containers[1].env[0].name", "PET_NNODES")


@pytest.mark.parametrize(("old", "new", "field"), [
    ('procPerNode: "2"', 'procPerNode: "two"', "procPerNode"),
    ("maxRestarts: 3", "maxRestarts: -3", "maxRestarts"),
    ("rdzvBackend: c10d", "rdzvBackend: zookeeper", "rdzvBackend"),
])
def test_bad_torchrun_config_names_the_t9k_field(old: str, new: str, field: str) -> None:
    text = edit(TORCHRUN, old, new)
    problem_at(text, f"spec.torchrunConfig.{field}", new)


MALFORMED = {
    "torchrunConfig not a mapping": ("  torchrunConfig:\n    enable: true\n", "  torchrunConfig: true\n  x:\n"),
    "replica spec not a mapping": ("  replicaSpecs:\n", "  replicaSpecs:\n    - worker\n"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_shapes_are_problems_not_crashes(case: str) -> None:
    old, new = MALFORMED[case]
    assert problems(edit(TORCHRUN, old, new))


# --- as T9k's API reference writes it ----------------------------------------------------------------------------

REFERENCE = doc("""
    apiVersion: batch.tensorstack.dev/v1beta1
    kind: PyTorchTrainingJob
    metadata:
      name: ref
    spec:
      torchrunConfig:
        enabled: true
        maxRestarts: 2
        procPerNode: "1"
        rdzvBackend: c10d
        extraOptions: []
      elastic:
        enabled: true
        minReplicas: 2
        maxReplicas: 6
        expectedReplicas: 4
      runMode:
        debug:
          enabled: true
          replicaSpecs:
            - type: node
              command: [sleep, "3600"]
      tensorboardSpec:
        image: t9kpublic/tensorboard:2.11.0
        logDir:
          pvc:
            - name: logs-pvc
              subPath: [runs/a, /runs/b/, ./log, runs/./c//d/.]
            - name: other
          s3:
            secretRef: {name: s3-creds}
            uri: ["s3://bucket/tb"]
      replicaSpecs:
        - type: node
          replicas: 3
          scalingWeight: 1
          template:
            spec:
              containers:
                - name: python
                  command: [python]
                  args: [train.py]
""")


def test_the_reference_spelling_turns_modes_on() -> None:
    loaded = read(REFERENCE)
    job = loaded.job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 3)  # elastic.expectedReplicas: 4
    c = containers(job, WORKER)[0]
    assert (c.command, c.args) == (["torchrun"], ["train.py"])
    assert job.spec.elasticPolicy is not None
    assert job.spec.elasticPolicy.model_dump(exclude_none=True) == {"minReplicas": 2, "maxReplicas": 6,
                                                                     "maxRestarts": 2, "rdzvBackend": "c10d"}
    debug = job.spec.runMode.debug if job.spec.runMode else None
    assert debug is not None and debug.enabled
    # the debug spec names T9k's type; `node` became the master and the workers, so it reaches both
    assert [(d.type, d.command) for d in debug.replicaSpecs or []] == [("master", ["sleep", "3600"]),
                                                                       ("worker", ["sleep", "3600"])]
    assert job.spec.tensorboard is not None
    assert job.spec.tensorboard.logDirs == ["t9k://pvc/logs-pvc/runs/a", "t9k://pvc/logs-pvc/runs/b",
                                            "t9k://pvc/logs-pvc/log", "t9k://pvc/logs-pvc/runs/c/d",
                                            "t9k://pvc/other", "s3://bucket/tb"]
    assert sorted(n.split(": ", 2)[1] for n in loaded.notes) == [
        "spec.replicaSpecs.0.scalingWeight", "spec.tensorboardSpec.logDir.s3.secretRef"]


@pytest.mark.parametrize("sub", ["../other", "runs/../../x"])
def test_a_tensorboard_sub_path_that_leaves_the_claim_is_refused(sub: str) -> None:
    text = edit(REFERENCE, "subPath: [runs/a, /runs/b/, ./log, runs/./c//d/.]", f"subPath: {sub}")
    p = problem_at(text, "spec.tensorboardSpec.logDir.pvc[0].subPath", "subPath:")
    assert p.message == f"{sub!r} leaves the claim ('..')"


@pytest.mark.parametrize("section", ["torchrunConfig", "runMode.debug"])
def test_both_spellings_are_read_and_must_agree(section: str) -> None:
    key = section.split(".")[-1]
    text = edit(REFERENCE, f"{key}:\n{'      ' if '.' in section else '    '}enabled: true",
                f"{key}:\n{'      ' if '.' in section else '    '}enable: true")
    assert read(text).job.spec.elasticPolicy is not None or section != "torchrunConfig"
    both = edit(REFERENCE, f"{key}:\n{'      ' if '.' in section else '    '}enabled: true",
                f"{key}:\n{'      ' if '.' in section else '    '}enabled: true\n"
                f"{'      ' if '.' in section else '    '}enable: false")
    p = only_problem(both)
    assert (p.path, p.message) == (f"spec.{section}", "enabled and enable disagree")


def test_a_mode_without_enabled_is_off_with_a_warning() -> None:
    text = edit(REFERENCE, "    enabled: true\n    maxRestarts: 2", "    maxRestarts: 2")
    loaded = read(text)
    assert containers(loaded.job, MASTER)[0].command == ["python"]  # torchrun off, as T9k's default
    assert any("spec.torchrunConfig: has no enabled: true, so it is off and its other fields are unused" in n
               for n in loaded.notes)


@pytest.mark.parametrize("key", ["enabled", "enable"])
def test_an_empty_enabled_is_off_with_a_warning(key: str) -> None:
    text = edit(REFERENCE, "    enabled: true\n    maxRestarts: 2", f"    {key}:\n    maxRestarts: 2")
    loaded = read(text)
    assert containers(loaded.job, MASTER)[0].command == ["python"]
    assert f"job.yaml:{line_of(text, key + ':')}: spec.torchrunConfig.{key}: has no value, so it is off (write " \
        "enabled: true to turn it on)" in loaded.notes
    debug = edit(REFERENCE, "      enabled: true\n      replicaSpecs:\n        - type: node",
                 "      enabled:\n      replicaSpecs:\n        - type: node")
    assert any("spec.runMode.debug.enabled: has no value, so it is off" in n for n in read(debug).notes)


def test_pause_is_a_suspend_and_resume_specs_are_refused() -> None:
    text = edit(PLAIN, "spec:\n  replicaSpecs:", "spec:\n  runMode:\n    pause:\n      enabled: true\n  replicaSpecs:")
    job = read(text).job
    assert job.run_policy.suspend is True
    bad = edit(text, "      enabled: true\n",
               "      enabled: true\n      resumeSpecs: [{type: worker, command: [x]}]\n")
    p = problem_at(bad, "spec.runMode.pause.resumeSpecs", "resumeSpecs")
    assert "resume with other commands" in p.message


def test_a_debug_spec_of_an_unknown_type_is_refused() -> None:
    text = edit(REFERENCE, "        - type: node\n          command", "        - type: chief\n          command")
    p = problem_at(text, "spec.runMode.debug.replicaSpecs[0].type", "type: chief")
    assert p.message == "'chief' is not a replica type of this job"


def test_expected_replicas_outside_the_elastic_range_is_refused() -> None:
    p = problem_at(edit(REFERENCE, "expectedReplicas: 4", "expectedReplicas: 9"), "spec.elastic", "elastic:")
    assert p.message == "the job starts 9 replicas, outside minReplicas..maxReplicas 2..6"


def test_wrong_types_are_problems_not_crashes() -> None:
    for old, new, path in [("replicas: 3", "replicas: three", "spec.replicaSpecs[0].replicas"),
                           ("    enabled: true\n    maxRestarts", "    enabled: 'yes'\n    maxRestarts",
                            "spec.torchrunConfig.enabled"),
                           ("extraOptions: []", "extraOptions: [{a: 1}]", "spec.torchrunConfig.extraOptions[0]")]:
        assert [p.path for p in problems(edit(REFERENCE, old, new))] == [path]


# T9k's user manual, "parallel training" (get-started/parallel-training.md, its job.yaml), as written there:
# tensorboardSpec.resources (which T9k's TensorBoardSpec has) and the guide's `subpath` spelling.
MANUAL = Path(__file__).resolve().parents[2] / "examples" / "t9k" / "parallel-training.yaml"


def test_the_manuals_parallel_training_job_is_read() -> None:
    from torchjob.kube.objects.workload import tensorboard

    loaded = read(MANUAL.read_text())
    job = loaded.job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 0)
    assert job.spec.nprocPerNode == "4"
    tb = job.spec.tensorboard
    assert tb is not None and tb.logDirs == ["t9k://pvc/mnist/log"] and tb.image == "tensorflow/tensorflow:2.14.0"
    assert tb.resources is not None and tb.resources.limits == {"cpu": 1, "memory": "1Gi"}
    # on Kubernetes the TensorBoard container gets those resources
    _, deployment = tensorboard.objects(job, {"kind": "TorchJob"})
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"limits": {"cpu": 1, "memory": "1Gi"}}
    assert any("spec.tensorboardSpec.logDir.pvc.0.subpath: read as subPath" in n for n in loaded.notes)


def test_tensorboard_resources_are_checked_at_their_line() -> None:
    text = edit(MANUAL.read_text(), "        memory: 1Gi\n", "        memory: 1Gi\n      limitz: {cpu: 1}\n")
    p = problem_at(text, "spec.tensorboardSpec.resources.limitz", "limitz:")
    assert "unknown field" in p.message


def test_tensorboard_scheduler_is_warned_and_subpath_beside_sub_path_refused() -> None:
    text = edit(MANUAL.read_text(), "    image: tensorflow/tensorflow:2.14.0\n",
                "    image: tensorflow/tensorflow:2.14.0\n    scheduler: {t9kScheduler: {queue: default}}\n")
    assert any("spec.tensorboardSpec.scheduler: ignored" in n for n in read(text).notes)
    both = edit(MANUAL.read_text(), "        subpath: \n", "        subPath: [a]\n        subpath: \n")
    p = problem_at(both, "spec.tensorboardSpec.logDir.pvc[0].subpath", "subpath:")
    assert p.message == "is given beside subPath"


def test_without_tensorboard_resources_the_container_gets_the_default() -> None:
    from torchjob.api.defaults import TENSORBOARD_RESOURCES
    from torchjob.kube.objects.workload import tensorboard

    job = read(REFERENCE).job
    _, deployment = tensorboard.objects(job, {"kind": "TorchJob"})
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"] == TENSORBOARD_RESOURCES
