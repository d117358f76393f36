"""Volcano `batch.volcano.sh/v1alpha1` `Job` (pytorch plugin) -> `TorchJob`: fields, env, warnings, errors."""

from __future__ import annotations

import pytest

from tests.dialects.util import doc, edit, line_of, only_problem, problem_at, problems, read
from torchjob.api.defaults import INIT_IMAGE
from torchjob.api.model import MASTER, PORT_NAME, WORKER, DependsOn, LifecyclePolicy
from torchjob.api.spec_facts import master_port
from torchjob.core.shape.topology import Placement, ReplicaId, replica_env, volcano_env

WHERE = Placement(master_addr="10.0.0.1", master_port=29501, rdzv_addr="10.0.0.1", rdzv_port=29400)

# Every field torchjob maps, with custom task names.
FULL = doc("""
    apiVersion: batch.volcano.sh/v1alpha1
    kind: Job
    metadata:
      name: vj
      namespace: team
      labels: {app: train}
    spec:
      minAvailable: 4
      schedulerName: volcano
      queue: research
      priorityClassName: high
      maxRetry: 5
      ttlSecondsAfterFinished: 600
      minSuccess: 2
      policies:
        - event: PodEvicted
          action: RestartJob
      plugins:
        pytorch: ["--master=chief", "--worker=trainer-pool", "--port=29500"]
        env: []
        svc: []
      tasks:
        - name: chief
          replicas: 1
          maxRetry: 2
          policies:
            - event: TaskCompleted
              action: CompleteJob
            - exitCode: 3
              action: AbortJob
              timeout: 30s
          template:
            metadata:
              labels: {role: chief}
            spec:
              containers:
                - name: sidecar
                  image: busybox
                - name: pytorch
                  image: train:1
                  command: [python, train.py]
                  ports:
                    - name: metrics
                      containerPort: 9090
              restartPolicy: Never
        - name: trainer-pool
          replicas: 3
          dependsOn:
            name: [chief]
            iteration: any
          template:
            spec:
              containers:
                - name: pytorch
                  image: train:1
                  command: [python, train.py]
              restartPolicy: OnFailure
""")

# The smallest job: a master and two workers, default names, default port.
SMALL = doc("""
    apiVersion: batch.volcano.sh/v1alpha1
    kind: Job
    metadata:
      name: small
    spec:
      plugins:
        pytorch: ["--master=master", "--worker=worker", "--port=23456"]
      tasks:
        - name: master
          replicas: 1
          template:
            spec:
              containers:
                - name: pytorch
                  command: [python, train.py]
              restartPolicy: OnFailure
        - name: worker
          replicas: 2
          template:
            spec:
              containers:
                - name: pytorch
                  command: [python, train.py]
              restartPolicy: OnFailure
""")


# --- fields -------------------------------------------------------------------------------------------


def test_tasks_become_master_and_worker() -> None:
    loaded = read(FULL)
    assert loaded.dialect == "batch.volcano.sh/v1alpha1 Job"
    assert loaded.notes == []
    job = loaded.job
    assert job.metadata.model_dump(exclude_none=True) == {"name": "vj", "namespace": "team",
                                                          "labels": {"app": "train"}}
    master, worker = job.spec.pytorchReplicaSpecs[MASTER], job.spec.pytorchReplicaSpecs[WORKER]
    assert (master.replicas, worker.replicas) == (1, 3)
    # the pod's restartPolicy is the replica's; the template keeps everything else
    assert (master.restartPolicy, worker.restartPolicy) == ("Never", "OnFailure")
    assert master.template.spec.restartPolicy is None and worker.template.spec.restartPolicy is None
    assert master.template.metadata is not None and master.template.metadata.labels == {"role": "chief"}
    assert [c.name for c in master.template.spec.containers] == ["sidecar", "pytorch"]


def test_port_goes_on_the_masters_training_container() -> None:
    job = read(FULL).job
    sidecar, trainer = job.spec.pytorchReplicaSpecs[MASTER].template.spec.containers
    assert sidecar.ports is None
    assert [(p.name, p.containerPort) for p in trainer.ports or []] == [("metrics", 9090), (PORT_NAME, 29500)]
    assert job.spec.pytorchReplicaSpecs[WORKER].template.spec.containers[0].ports is None
    assert master_port(job) == 29500


def test_port_goes_on_the_first_container_without_one_named_pytorch() -> None:
    text = edit(SMALL, "--port=23456", "--port=29400").replace("- name: pytorch", "- name: main")
    job = read(text).job
    (c,) = job.spec.pytorchReplicaSpecs[MASTER].template.spec.containers
    assert c.name == "main"
    assert [(p.name, p.containerPort) for p in c.ports or []] == [(PORT_NAME, 29400)]


def test_default_port_adds_no_port() -> None:
    for flags in ('"--master=master", "--worker=worker", "--port=23456"', ""):
        text = SMALL.replace('"--master=master", "--worker=worker", "--port=23456"', flags)
        job = read(text).job
        assert job.spec.pytorchReplicaSpecs[MASTER].template.spec.containers[0].ports is None
        assert master_port(job) == 23456


def test_a_port_the_master_already_declares_is_kept() -> None:
    text = edit(SMALL, "--port=23456", "--port=29400")
    text = text.replace("              command: [python, train.py]\n",
                        "              command: [python, train.py]\n"
                        "              ports: [{name: pytorchjob-port, containerPort: 29400, protocol: TCP}]\n", 1)
    job = read(text).job
    ports = job.spec.pytorchReplicaSpecs[MASTER].template.spec.containers[0].ports or []
    assert [(p.name, p.containerPort, p.protocol) for p in ports] == [(PORT_NAME, 29400, "TCP")]


def test_policies_retries_and_dependencies() -> None:
    job = read(FULL).job
    master, worker = job.spec.pytorchReplicaSpecs[MASTER], job.spec.pytorchReplicaSpecs[WORKER]
    assert master.policies == [
        LifecyclePolicy(event="TaskCompleted", action="CompleteJob"),
        LifecyclePolicy(exitCode=3, action="AbortJob", timeout="30s"),
    ]
    assert worker.policies is None
    assert job.spec.policies == [LifecyclePolicy(event="PodEvicted", action="RestartJob")]
    assert (master.maxRestarts, worker.maxRestarts) == (2, None)
    # dependsOn names tasks; natively it names replica types
    assert worker.dependsOn == DependsOn(name=[MASTER], iteration="any")
    assert master.dependsOn is None
    assert job.spec.minSuccess == 2


def test_job_fields_go_to_run_policy() -> None:
    rp = read(FULL).job.run_policy
    assert rp.backoffLimit == 5
    assert rp.ttlSecondsAfterFinished == 600
    assert rp.schedulingPolicy is not None
    assert rp.schedulingPolicy.model_dump(exclude_none=True) == {
        "minAvailable": 4, "queue": "research", "priorityClass": "high", "schedulerName": "volcano"}
    assert (rp.activeDeadlineSeconds, rp.cleanPodPolicy, rp.suspend) == (None, None, None)


@pytest.mark.parametrize(("max_retry", "backoff"), [(None, 3), (0, 0), (1, 1), (7, 7)])
def test_max_retry_is_backoff_limit_default_3(max_retry: int | None, backoff: int) -> None:
    text = SMALL
    if max_retry is not None:
        text = edit(SMALL, "spec:\n  plugins:", f"spec:\n  maxRetry: {max_retry}\n  plugins:")
    job = read(text).job
    assert job.run_policy.backoffLimit == backoff
    assert job.run_policy.schedulingPolicy is None


def test_plugins_give_the_volcano_env_flags() -> None:
    job = read(FULL).job
    assert job.spec.volcano is not None
    assert job.spec.volcano.model_dump() == {"taskNames": {MASTER: "chief", WORKER: "trainer-pool"},
                                             "taskIndex": True, "hosts": True}
    small = read(SMALL).job
    assert small.spec.volcano is not None
    assert small.spec.volcano.model_dump() == {"taskNames": None, "taskIndex": False, "hosts": True}
    no_hosts = edit(SMALL, "  tasks:", '    svc: ["--inject-hosts-env=false"]\n  tasks:')
    assert read(no_hosts).job.spec.volcano is None
    only_index = edit(no_hosts, "  tasks:", "    env: []\n  tasks:")
    vc = read(only_index).job.spec.volcano
    assert vc is not None and (vc.taskIndex, vc.hosts, vc.taskNames) == (True, False, None)


def test_master_only_job() -> None:
    text = SMALL[: SMALL.index("    - name: worker")]
    job = read(text).job
    assert list(job.spec.pytorchReplicaSpecs) == [MASTER]


def test_master_replicas_default_to_one() -> None:
    text = edit(SMALL, "    - name: master\n      replicas: 1\n", "    - name: master\n")
    assert read(text).job.replica_count(MASTER) == 1


# --- env -------------------------------------------------------------------------------------------


def test_replica_env_with_env_and_svc_plugins_and_custom_task_names() -> None:
    job = read(FULL).job
    hosts = {"master-0": "vj-chief-0", "worker-0": "vj-trainer-pool-0", "worker-1": "vj-trainer-pool-1",
             "worker-2": "vj-trainer-pool-2"}
    env = replica_env(job, ReplicaId(WORKER, 2), ["python", "train.py"], WHERE, lambda r: hosts[r.name]).env
    assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == "2"
    assert env["VC_CHIEF_HOSTS"] == "vj-chief-0" and env["VC_CHIEF_NUM"] == "1"
    assert env["VC_TRAINER_POOL_HOSTS"] == "vj-trainer-pool-0,vj-trainer-pool-1,vj-trainer-pool-2"
    assert env["VC_TRAINER_POOL_NUM"] == "3"
    assert "VC_MASTER_HOSTS" not in env and "VC_WORKER_HOSTS" not in env
    # the torch env is there too: the master is rank 0, worker i is rank i+1
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("3", "4", "10.0.0.1", "29501")
    master_env = replica_env(job, ReplicaId(MASTER, 0), ["python", "train.py"], WHERE, lambda r: hosts[r.name]).env
    assert master_env["VC_TASK_INDEX"] == master_env["VK_TASK_INDEX"] == "0"
    assert master_env["RANK"] == "0"


def test_replica_env_hosts_default_to_the_master_address() -> None:
    job = read(SMALL).job
    env = replica_env(job, ReplicaId(WORKER, 0), ["python", "train.py"], WHERE).env
    assert env["VC_MASTER_HOSTS"] == "10.0.0.1" and env["VC_MASTER_NUM"] == "1"
    assert env["VC_WORKER_HOSTS"] == "10.0.0.1,10.0.0.1" and env["VC_WORKER_NUM"] == "2"
    assert "VC_TASK_INDEX" not in env


def test_volcano_env_exactly() -> None:
    text = edit(SMALL, "--worker=worker", "--worker=gpu-workers")
    text = edit(text, "    - name: worker", "    - name: gpu-workers")
    text = edit(text, "  tasks:", "    env: []\n  tasks:")
    job = read(text).job
    hosts = {"master-0": "a", "worker-0": "b", "worker-1": "c"}
    assert volcano_env(job, ReplicaId(WORKER, 1), lambda r: hosts[r.name]) == {
        "VC_TASK_INDEX": "1", "VK_TASK_INDEX": "1",
        "VC_MASTER_HOSTS": "a", "VC_MASTER_NUM": "1",
        "VC_GPU_WORKERS_HOSTS": "b,c", "VC_GPU_WORKERS_NUM": "2",
    }


def test_without_plugins_env_no_volcano_env() -> None:
    text = edit(SMALL, "  tasks:", '    svc: ["--inject-hosts-env=false"]\n  tasks:')
    job = read(text).job
    env = replica_env(job, ReplicaId(WORKER, 0), ["python", "train.py"], WHERE).env
    assert not any(k.startswith(("VC_", "VK_")) for k in env)

    def unasked(rid: ReplicaId) -> str:
        raise AssertionError(f"the host of {rid.name} was asked for")

    # A job that wants no hosts never asks for them: a replica's env is not O(replicas) to make (the
    # render of a job of 4576 replicas took 30 s when every replica listed every host).
    assert replica_env(job, ReplicaId(WORKER, 0), ["python", "train.py"], WHERE, unasked).env == env


def test_user_env_that_the_plugins_set_is_refused() -> None:
    text = edit(SMALL, "  tasks:", "    env: []\n  tasks:")
    text = text.replace("command: [python, train.py]\n",
                        "command: [python, train.py]\n              env: [{name: VC_TASK_INDEX, value: '0'}]\n", 1)
    p = problem_at(text, "spec.tasks[0].template.spec.containers[0].env[0].name", "VC_TASK_INDEX")
    assert "VC_TASK_INDEX is set by torchjob" in p.message


# --- warnings ----------------------------------------------------------------------------------------


def test_warnings_name_what_is_ignored_with_its_line() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  runningEstimate: 1h\n  networkTopology: {mode: hard}\n  plugins:")
    text = edit(text, "  tasks:", "    ssh: []\n  tasks:")
    text = edit(text, "    - name: worker\n      replicas: 2\n",
                "    - name: worker\n      replicas: 2\n      minAvailable: 1\n      topologyPolicy: best-effort\n")
    text += "status:\n  state: {phase: Running}\n"
    notes = read(text).notes
    assert notes == [
        f"job.yaml:{line_of(text, 'status:')}: status: a status is output, not input; ignored",
        f"job.yaml:{line_of(text, 'runningEstimate')}: spec.runningEstimate: ignored by torchjob "
        "(no consumer in Volcano either)",
        f"job.yaml:{line_of(text, 'networkTopology')}: spec.networkTopology: ignored by torchjob "
        "(a scheduler placement hint)",
        f"job.yaml:{line_of(text, 'ssh:')}: spec.plugins.ssh: torchjob does not set up ssh between replicas; "
        "ignored",
        f"job.yaml:{line_of(text, 'minAvailable')}: spec.tasks.1.minAvailable: ignored by torchjob "
        "(a per-task gang size)",
        f"job.yaml:{line_of(text, 'topologyPolicy')}: spec.tasks.1.topologyPolicy: ignored by torchjob "
        "(a NUMA placement hint)",
    ]


def test_missing_restart_policy_is_on_failure_with_a_warning() -> None:
    text = SMALL.replace("          restartPolicy: OnFailure\n", "", 1)
    loaded = read(text)
    assert loaded.job.restart_policy(MASTER) == "OnFailure"
    assert loaded.notes == [f"job.yaml:{line_of(text, 'spec:', 1)}: spec.tasks.0.template.spec: no restartPolicy: "
                            "Kubernetes would use Always; torchjob uses OnFailure"]


# --- errors --------------------------------------------------------------------------------------------


def test_no_pytorch_plugin() -> None:
    text = edit(SMALL, '    pytorch: ["--master=master", "--worker=worker", "--port=23456"]', "    env: []")
    p = problem_at(text, "spec.plugins", "plugins:")
    assert "pytorch plugin" in p.message
    assert p.fix is not None and "--master=master" in p.fix


def test_no_plugins_at_all() -> None:
    text = edit(SMALL, '  plugins:\n    pytorch: ["--master=master", "--worker=worker", "--port=23456"]\n', "")
    problem_at(text, "spec.plugins", "spec:")  # the nearest field the user wrote


def test_missing_master_task() -> None:
    text = SMALL[: SMALL.index("    - name: master")] + SMALL[SMALL.index("    - name: worker"):]
    p = problem_at(text, "spec.tasks", "tasks:")
    assert "no task is named 'master'" in p.message


def test_master_named_by_the_plugin_is_missing() -> None:
    text = edit(SMALL, "--master=master", "--master=chief")
    found = problems(text)
    assert [(p.path, p.line) for p in found] == [
        ("spec.tasks[0].name", line_of(text, "- name: master")),
        ("spec.tasks", line_of(text, "tasks:")),
    ]
    assert "neither the master task ('chief') nor the worker task ('worker')" in found[0].message
    assert "no task is named 'chief'" in found[1].message


@pytest.mark.parametrize("replicas", [0, 2, 5])
def test_master_task_replicas_must_be_one(replicas: int) -> None:
    text = edit(SMALL, "    - name: master\n      replicas: 1", f"    - name: master\n      replicas: {replicas}")
    p = problem_at(text, "spec.tasks[0].replicas", f"replicas: {replicas}")
    assert f"the master task has {replicas} replicas; a job has exactly one master" in p.message


def test_extra_task() -> None:
    text = SMALL + (
        "    - name: ps\n"
        "      replicas: 1\n"
        "      template: {spec: {containers: [{name: pytorch, command: [python, ps.py]}]}}\n"
    )
    p = problem_at(text, "spec.tasks[2].name", "name: ps")
    assert "task 'ps' is neither the master task" in p.message


def test_unknown_plugin() -> None:
    text = edit(SMALL, "  tasks:", "    mpi: []\n  tasks:")
    p = problem_at(text, "spec.plugins.mpi", "mpi:")
    assert p.message == "plugin 'mpi' is not supported"


def test_unknown_pytorch_flag() -> None:
    text = edit(SMALL, '"--port=23456"', '"--port=23456", "--rank=0"')
    p = problem_at(text, "spec.plugins.pytorch", "pytorch:")
    assert p.message == "unknown flag --rank"


def test_wait_master_flags_are_known() -> None:
    text = edit(SMALL, '"--port=23456"', '"--port=23456", "--wait-master-enabled=true"')
    assert read(text).notes == []


@pytest.mark.parametrize("port", ["abc", "0", "65536", "-1", ""])
def test_bad_port(port: str) -> None:
    text = edit(SMALL, "--port=23456", f"--port={port}")
    if port == "":
        # `--port=` means the default
        assert master_port(read(text).job) == 23456
        return
    p = problem_at(text, "spec.plugins.pytorch", "pytorch:")
    assert p.message == f"--port={port} is not a port"


def test_job_level_volumes() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  volumes:\n    - mountPath: /data\n      volumeClaimName: pvc\n"
                "  plugins:")
    p = problem_at(text, "spec.volumes", "volumes:")
    assert "job-level volumes" in p.message
    assert p.fix == "declare the volumes in the task templates instead"


def test_unknown_task_field() -> None:
    text = edit(SMALL, "    - name: worker\n", "    - name: worker\n      replica: 2\n")
    p = problem_at(text, "spec.tasks[1].replica", "replica: 2")
    assert p.message == "unknown field 'replica'"


def test_unknown_job_field() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  maxRetries: 3\n  plugins:")
    problem_at(text, "spec.maxRetries", "maxRetries")


def test_unknown_top_level_field() -> None:
    p = only_problem(SMALL + "extra: 1\n")
    assert (p.path, p.message) == ("extra", "unknown field 'extra'")


def test_native_problems_name_the_volcano_path() -> None:
    """Problems found in the converted job name the task the user wrote, at its line."""
    text = edit(SMALL, "    - name: worker\n      replicas: 2\n      template:\n        spec:\n          containers:\n"
                "            - name: pytorch\n",
                "    - name: worker\n      replicas: 2\n      template:\n        spec:\n          containers:\n"
                "            - name: pytorch\n              imagePull: Always\n")
    problem_at(text, "spec.tasks[1].template.spec.containers[0].imagePull", "imagePull")


def test_bad_policy_names_the_task() -> None:
    text = edit(SMALL, "    - name: worker\n      replicas: 2\n",
                "    - name: worker\n      replicas: 2\n      policies:\n        - event: PodFailed\n"
                "          action: Explode\n")
    problem_at(text, "spec.tasks[1].policies[0].action", "Explode")


def test_bad_job_policy() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  policies:\n    - event: PodFailed\n      exitCode: 3\n"
                "      action: RestartJob\n  plugins:")
    p = problem_at(text, "spec.policies[0]", "event: PodFailed")
    assert p.message == "has both an event and an exitCode"


def test_depends_on_an_unknown_task() -> None:
    text = edit(SMALL, "    - name: worker\n      replicas: 2\n",
                "    - name: worker\n      replicas: 2\n      dependsOn:\n        name: [ps]\n")
    p = problem_at(text, "spec.tasks[1].dependsOn.name", "name: [ps]")
    assert "'ps' is not another replica type" in p.message


def test_min_success_above_the_replicas() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  minSuccess: 4\n  plugins:")
    problem_at(text, "spec.minSuccess", "minSuccess")


# --- bugs -----------------------------------------------------------------------------------------------


def test_duplicate_task_names() -> None:
    text = edit(SMALL, "    - name: worker\n      replicas: 2", "    - name: master\n      replicas: 1")
    problem_at(text, "spec.tasks[1].name", "- name: master", 1)


def test_master_and_worker_flags_name_the_same_task() -> None:
    text = edit(SMALL, "--worker=worker", "--worker=master")
    text = text[: text.index("    - name: worker")]
    p = only_problem(text)
    assert p.path == "spec.plugins.pytorch"


def test_bad_restart_policy_names_the_pod_field() -> None:
    text = SMALL.replace("restartPolicy: OnFailure", "restartPolicy: Sometimes", 1)
    problem_at(text, "spec.tasks[0].template.spec.restartPolicy", "Sometimes")


def test_bad_max_retry_names_max_retry() -> None:
    text = edit(SMALL, "spec:\n  plugins:", "spec:\n  maxRetry: -1\n  plugins:")
    text = edit(text, "    - name: worker\n      replicas: 2\n", "    - name: worker\n      replicas: 2\n"
                "      maxRetry: -2\n")
    found = problems(text)
    assert sorted((p.path, p.line) for p in found) == sorted([
        ("spec.maxRetry", line_of(text, "maxRetry: -1")),
        ("spec.tasks[1].maxRetry", line_of(text, "maxRetry: -2")),
    ])


MALFORMED = {
    "plugins a list": ("  plugins:\n    pytorch: [\"--master=master\", \"--worker=worker\", \"--port=23456\"]",
                       "  plugins: [pytorch]"),
    "task not a mapping": ("  tasks:\n", "  tasks:\n    - master\n"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_shapes_are_problems_not_crashes(case: str) -> None:
    old, new = MALFORMED[case]
    assert problems(edit(SMALL, old, new))


def test_master_replicas_of_the_wrong_type() -> None:
    text = edit(SMALL, "    - name: master\n      replicas: 1", '    - name: master\n      replicas: "1"')
    p = only_problem(text)
    assert "integer" in p.message


# --- the pytorch plugin's flags as Go's flag package reads them; wait-for-master ----------------------------


def _plugin(flags: str) -> str:
    return edit(SMALL, '["--master=master", "--worker=worker", "--port=23456"]', flags)


def test_wait_master_flags_give_the_init_containers_image_and_timeout() -> None:
    from torchjob.kube.objects.workload import pods as pod_objects
    from torchjob.kube.objects.workload.init_container import WAIT_CONTAINER

    job = read(_plugin('["--port", "29500", "--wait-master-enabled", "--wait-master-timeout=600", '
                       '"--wait-master-image", "alpine:3.20"]')).job
    assert job.spec.waitForMaster is not None
    assert job.spec.waitForMaster.model_dump() == {"enabled": True, "image": "alpine:3.20", "timeoutSeconds": 600}
    assert master_port(job) == 29500
    init = pod_objects.pod(job, ReplicaId(WORKER, 0), 0)["spec"]["initContainers"][0]
    assert (init["name"], init["image"]) == (WAIT_CONTAINER, "alpine:3.20")
    script = init["command"][2]  # (what it says when it gives up: tests/kube/test_wait_script.py runs it)
    assert script.startswith("host=small-master-0.small port=29500\n") and "\ntimeout=600\n" in script
    assert "initContainers" not in pod_objects.pod(job, ReplicaId(MASTER, 0), 0)["spec"]  # workers only, as Volcano


def test_wait_master_defaults_are_volcanos() -> None:
    job = read(_plugin('["--wait-master-enabled=true"]')).job
    assert job.spec.waitForMaster is not None
    assert (job.spec.waitForMaster.image, job.spec.waitForMaster.timeoutSeconds) == ("busybox:1.36.1", 300)


def test_without_wait_master_enabled_the_operators_default_applies() -> None:
    from torchjob.kube.objects.workload import pods as pod_objects

    text = _plugin('["--wait-master-timeout=60"]')
    loaded = read(text)
    assert loaded.job.spec.waitForMaster is None
    assert loaded.notes == [f"job.yaml:{line_of(text, 'pytorch:')}: spec.plugins.pytorch: "
                            "--wait-master-timeout is ignored without --wait-master-enabled (as Volcano ignores it)"]
    pod = pod_objects.pod(loaded.job, ReplicaId(WORKER, 0), 0, init_image=INIT_IMAGE)
    assert pod["spec"]["initContainers"][0]["image"] == INIT_IMAGE  # the operator's --init-image, no limit
    assert "gave up" not in pod["spec"]["initContainers"][0]["command"][2]
    off = read(_plugin('["--wait-master-enabled=false"]')).job
    assert "initContainers" not in pod_objects.pod(off, ReplicaId(WORKER, 0), 0)["spec"]


@pytest.mark.parametrize(("flags", "message"), [
    ('["--wait-master-enabled=yes"]', "--wait-master-enabled=yes is not a boolean"),
    ('["--wait-master-enabled", "--wait-master-timeout=0"]', "--wait-master-timeout=0 is not a positive number"),
    ('["--port"]', "--port needs a value"),
    ('["master"]', "'master' is not a flag (Volcano would ignore it and every argument after it)"),
])
def test_bad_plugin_flags(flags: str, message: str) -> None:
    p = only_problem(_plugin(flags))
    assert p.path == "spec.plugins.pytorch" and message in p.message


def test_flags_after_a_double_dash_are_not_read() -> None:
    job = read(_plugin('["--port=29501", "--", "--port=1"]')).job
    assert master_port(job) == 29501


def test_convert_writes_the_wait_flags_back() -> None:
    from torchjob.dialects.convert import convert

    job = read(_plugin('["--wait-master-enabled", "--wait-master-timeout=45"]')).job
    data, _ = convert(job, "volcano")
    assert data["spec"]["plugins"]["pytorch"][-3:] == ["--wait-master-enabled=true", "--wait-master-timeout=45",
                                                       "--wait-master-image=busybox:1.36.1"]
    assert read(yaml_text(data)).job.spec.waitForMaster == job.spec.waitForMaster


def yaml_text(data: object) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
