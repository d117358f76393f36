"""Kubeflow Trainer v2 `TrainJob` (+ its runtime) -> `TorchJob`, and back (`convert --to trainjob`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dialects.util import SOURCE, doc, edit, line_of, problem_at, problems, read, read_data
from torchjob.api.errors import InvalidJob, UserError
from torchjob.api.model import MASTER, WORKER, TorchJob
from torchjob.core.shape.topology import Placement, ReplicaId, replica_env, replicas
from torchjob.dialects.convert import convert, explicit
from torchjob.dialects.load import load
from torchjob.dialects.trainjob import nproc
from torchjob.kube.objects.workload import pods as pod_objects

WHERE = Placement("127.0.0.1", 41000, "127.0.0.1", 41001)

TRAINJOB = doc("""
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata:
      name: fashion
      namespace: team
      labels: {kueue.x-k8s.io/queue-name: gpus}
    spec:
      runtimeRef:
        name: torch-distributed
      activeDeadlineSeconds: 3600
      trainer:
        image: registry.local/fashion:3
        numNodes: 3
        command: [bash, -c, "torchrun /workspace/train.py --epochs 2"]
        env:
          - name: NCCL_DEBUG
            value: INFO
        resourcesPerNode:
          requests: {cpu: "4", memory: 16Gi}
""")

# A platform team's runtime, as a second document or a --runtime file.
RUNTIME = doc("""
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainingRuntime
    metadata:
      name: torch-shared-fs
      namespace: team
    spec:
      mlPolicy:
        numNodes: 2
        torch: {}
      podGroupPolicy:
        coscheduling:
          scheduleTimeoutSeconds: 120
      template:
        spec:
          replicatedJobs:
            - name: trainer-node
              template:
                metadata:
                  labels:
                    trainer.kubeflow.org/trainjob-ancestor-step: trainer
                spec:
                  backoffLimit: 2
                  template:
                    spec:
                      schedulerName: scheduler-plugins-scheduler
                      volumes:
                        - name: shared
                          persistentVolumeClaim: {claimName: team-fs}
                      containers:
                        - name: metrics
                          image: exporter:1
                        - name: node
                          image: pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime
                          env:
                            - {name: NCCL_DEBUG, value: WARN}
                            - {name: HF_HOME, value: /shared/hf}
                          volumeMounts:
                            - {name: shared, mountPath: /shared}
""")

CUSTOM = edit(TRAINJOB, "    name: torch-distributed\n", "    name: torch-shared-fs\n    kind: TrainingRuntime\n")


def node(job: TorchJob, rtype: str = MASTER) -> Any:
    return job.spec.pytorchReplicaSpecs[rtype].template.spec.containers[0]


def test_the_upstream_runtime_is_known() -> None:
    loaded = read(TRAINJOB)
    assert loaded.dialect == "trainer.kubeflow.org/v1alpha1 TrainJob"
    assert loaded.notes == []
    job = loaded.job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)  # numNodes 3: node 0 is the master
    c = node(job, WORKER)
    assert (c.name, c.image, c.command) == ("node", "registry.local/fashion:3",
                                            ["bash", "-c", "torchrun /workspace/train.py --epochs 2"])
    assert [(e.name, e.value) for e in c.env or []] == [("NCCL_DEBUG", "INFO")]
    assert c.resources is not None and c.resources.requests == {"cpu": "4", "memory": "16Gi"}
    assert [(p.name, p.containerPort) for p in c.ports or []] == [("pytorchjob-port", 29500)]
    assert job.spec.nprocPerNode == "4"  # no GPU: the CPUs requested, as Trainer decides
    rp = job.run_policy
    assert (rp.activeDeadlineSeconds, rp.backoffLimit, rp.suspend) == (3600, 6, None)
    assert job.restart_policy(WORKER) == "OnFailure"
    assert job.metadata.labels == {"kueue.x-k8s.io/queue-name": "gpus"}


def test_the_env_is_trainers_torch_contract() -> None:
    job = read(TRAINJOB).job
    argv = [*(node(job).command or [])]
    ranks = []
    for rid in replicas(job):
        env = replica_env(job, rid, argv, WHERE).env
        assert {k: env[k] for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT")} == {
            "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "41000"}
        ranks.append(env["PET_NODE_RANK"])
    assert ranks == ["0", "1", "2"]
    pod = pod_objects.pod(job, ReplicaId(WORKER, 1), 0)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"], env["PET_NODE_RANK"]) == ("fashion-master-0.fashion",
                                                                                     "29500", "2")


@pytest.mark.parametrize(("resources", "given", "expected"), [
    ({}, None, "1"),
    ({"requests": {"cpu": "500m"}}, None, "1"),
    ({"requests": {"cpu": "2500m"}}, None, "3"),
    ({"limits": {"cpu": 8}}, None, "8"),
    ({"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "16"}}, None, "auto"),
    ({"requests": {"amd.com/gpu": 2}}, None, "auto"),
    ({"requests": {"cpu": "16"}}, 2, "2"),
    ({"requests": {"nvidia.com/gpu": 0, "cpu": "2"}}, None, "2"),  # no GPU counted: the CPUs
    # Trainer v2.0/v2.1's strings: cpu is the CPUs even with GPUs; gpu stays gpu for torchrun
    ({"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "16"}}, "cpu", "16"),
    ({"limits": {"nvidia.com/gpu": 4}}, "cpu", "1"),
    ({"requests": {"cpu": "16"}}, "gpu", "gpu"),
    ({"requests": {"cpu": "16"}}, "auto", "16"),
])
def test_num_proc_per_node_as_trainer_decides(resources: dict[str, Any], given: int | None, expected: str) -> None:
    assert nproc(resources, given) == expected


def test_num_proc_per_node_comes_from_a_trainer_v2_1_runtime(tmp_path: Path) -> None:
    """Trainer v2.0/v2.1: the runtime's mlPolicy.torch.numProcPerNode is the default, the TrainJob's wins."""
    v21 = edit(RUNTIME, "    torch: {}\n", "    torch: {numProcPerNode: 3}\n")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + v21)
    loaded = load(tmp_path / "job.yaml")
    assert loaded.job.spec.nprocPerNode == "3" and loaded.notes == []
    gpu = edit(CUSTOM, "    numNodes: 3\n", "    numNodes: 3\n    numProcPerNode: gpu\n")
    cpu = edit(RUNTIME, "    torch: {}\n", "    torch: {numProcPerNode: cpu}\n")
    (tmp_path / "job.yaml").write_text(gpu + "---\n" + cpu)
    assert load(tmp_path / "job.yaml").job.spec.nprocPerNode == "gpu"
    # the upstream torch-distributed runtime of v2.0/v2.1 says auto: no GPU here, so the CPUs requested
    upstream = edit(RUNTIME, "    torch: {}\n", "    torch: {numProcPerNode: auto}\n")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + upstream)
    job = load(tmp_path / "job.yaml").job
    assert job.spec.nprocPerNode == "4"
    env = replica_env(job, ReplicaId(WORKER, 0), ["torchrun", "train.py"], WHERE).env
    assert env["PET_NPROC_PER_NODE"] == "4"


@pytest.mark.parametrize(("value", "expected"), [("auto", "4"), ("cpu", "4"), ("gpu", "gpu"), (2, "2")])
def test_a_trainer_v2_1_num_proc_per_node_string(value: object, expected: str) -> None:
    text = edit(TRAINJOB, "    numNodes: 3\n", f"    numNodes: 3\n    numProcPerNode: {value}\n")
    loaded = read(text)
    assert loaded.job.spec.nprocPerNode == expected and loaded.notes == []


@pytest.mark.parametrize(("value", "fix"), [('"4"', "write it unquoted: numProcPerNode: 4"),
                                            ("all", "a number of processes per node, e.g. numProcPerNode: 4"),
                                            ("0", "a number of processes per node, e.g. numProcPerNode: 4")])
def test_a_bad_num_proc_per_node_names_trainers_values(value: str, fix: str) -> None:
    text = edit(TRAINJOB, "    numNodes: 3\n", f"    numNodes: 3\n    numProcPerNode: {value}\n")
    p = problem_at(text, "spec.trainer.numProcPerNode", "numProcPerNode")
    assert p.message.startswith("must be a positive integer, or auto, cpu or gpu as Trainer v2.0/v2.1 took it")
    assert p.fix == fix


def test_a_trainer_v2_1_elastic_policy_is_warned_and_runs_as_trainer_ran_it(tmp_path: Path) -> None:
    elastic = edit(RUNTIME, "    numNodes: 2\n    torch: {}\n",
                   "    torch:\n      elasticPolicy: {minNodes: 1, maxNodes: 4, maxRestarts: 3}\n")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + elastic)
    loaded = load(tmp_path / "job.yaml")
    assert (loaded.job.replica_count(MASTER), loaded.job.replica_count(WORKER)) == (1, 2)  # numNodes 3, fixed
    assert loaded.job.spec.elasticPolicy is None
    (note,) = loaded.notes
    assert note.startswith(f"{tmp_path / 'job.yaml'}:{line_of(CUSTOM + '---' + chr(10) + elastic, 'elasticPolicy')}: "
                           "spec.mlPolicy.torch.elasticPolicy: not honoured: Trainer v2.0/v2.1 accepted it but never")
    assert "v2.2 removed it (kubeflow/trainer #3235)" in note and "spec.elasticPolicy" in note
    both = edit(RUNTIME, "    torch: {}\n", "    torch:\n      elasticPolicy: {maxNodes: 4}\n")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + both)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.mlPolicy.torch.elasticPolicy" and "Trainer v2.0/v2.1's API server refuses" in p.message


def test_a_runtime_in_the_same_file(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + RUNTIME)
    loaded = load(tmp_path / "job.yaml")
    job = loaded.job
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)  # the TrainJob's numNodes wins
    pod = job.spec.pytorchReplicaSpecs[WORKER].template.spec
    assert [c.name for c in pod.containers] == ["node", "metrics"]  # the node container is the training one
    c = pod.containers[0]
    # the trainer's env is upserted into the runtime's: NCCL_DEBUG replaced in place, HF_HOME kept
    assert [(e.name, e.value) for e in c.env or []] == [("NCCL_DEBUG", "INFO"), ("HF_HOME", "/shared/hf")]
    assert c.image == "registry.local/fashion:3"
    assert [m.mountPath for m in c.volumeMounts or []] == ["/shared"]
    assert job.run_policy.backoffLimit == 2
    sp = job.run_policy.schedulingPolicy
    assert sp is not None and (sp.schedulerName, sp.scheduleTimeoutSeconds) == ("scheduler-plugins-scheduler", 120)


def test_a_runtime_file(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(CUSTOM)
    (tmp_path / "rt.yaml").write_text(RUNTIME)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.runtimeRef.name" and "TrainingRuntime 'torch-shared-fs' is not known here" in p.message
    assert p.fix is not None and "--runtime FILE" in p.fix
    assert load(tmp_path / "job.yaml", [tmp_path / "rt.yaml"]).job.run_policy.backoffLimit == 2
    with pytest.raises(UserError, match="holds a 'TrainJob', not a training runtime"):
        load(tmp_path / "job.yaml", [tmp_path / "job.yaml"])


def test_a_runtime_of_another_namespace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + edit(RUNTIME, "namespace: team", "namespace: other"))
    with pytest.raises(InvalidJob, match="is in namespace 'other', the TrainJob in 'team'"):
        load(tmp_path / "job.yaml")


def test_runtime_problems_name_the_runtimes_own_fields(tmp_path: Path) -> None:
    bad = edit(RUNTIME, "    torch: {}\n", "    mpi: {numProcPerNode: 1}\n")
    (tmp_path / "rt.yaml").write_text(bad)
    (tmp_path / "job.yaml").write_text(CUSTOM)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml", [tmp_path / "rt.yaml"])
    assert err.value.source == str(tmp_path / "rt.yaml")
    (p,) = err.value.problems
    assert (p.path, p.line) == ("spec.mlPolicy.mpi", line_of(bad, "mpi:"))


def test_a_runtime_pod_spec_that_is_not_a_mapping_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # found by the mutation test: the gang policy read the pod's schedulerName from `spec: true`
    data = yaml.safe_load(RUNTIME)
    data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] = True
    bad = yaml.safe_dump(data, sort_keys=False)
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + bad)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    assert [p.path for p in err.value.problems] == ["spec.template.spec.replicatedJobs[0].template.spec.template.spec"]


INITIALIZER_JOBS = textwrap.indent(doc("""
    - name: dataset-initializer
      template:
        metadata:
          labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}
        spec:
          backoffLimit: 1
          template:
            spec:
              containers:
                - name: dataset-initializer
                  image: ghcr.io/kubeflow/trainer/dataset-initializer
                  env: [{name: STORAGE_URI, value: hf://tatsu-lab/alpaca}, {name: HF_HOME, value: /tmp}]
                  volumeMounts: [{name: shared, mountPath: /workspace}]
              volumes: [{name: shared, persistentVolumeClaim: {claimName: team-fs}}]
    - name: model-initializer
      template:
        metadata:
          labels: {trainer.kubeflow.org/trainjob-ancestor-step: model-initializer}
        spec:
          template:
            spec:
              containers: [{name: model-initializer, image: ghcr.io/kubeflow/trainer/model-initializer}]
    - name: trainer-node
    """), "        ")
WITH_INITIALIZERS = edit(RUNTIME, "        - name: trainer-node\n", INITIALIZER_JOBS)


def test_a_runtimes_initializer_jobs_run_first_filled_from_spec_initializer_as_trainer_fills_them(
        tmp_path: Path) -> None:
    text = edit(CUSTOM, "  runtimeRef:\n", textwrap.indent(doc("""
        initializer:
          dataset:
            storageUri: hf://org/data
            env: [{name: HF_HOME, value: /cache}, {name: IGNORE_PATTERNS, value: "*.bin"}]
            secretRef: {name: hub-token}
          model: {storageUri: hf://org/model}
        """), "  ") + "  runtimeRef:\n")
    (tmp_path / "job.yaml").write_text(text + "---\n" + WITH_INITIALIZERS)
    job = load(tmp_path / "job.yaml").job
    steps = job.spec.initializers or []
    assert [(s.name, s.backoffLimit) for s in steps] == [("dataset-initializer", 1), ("model-initializer", 6)]
    data = steps[0].template.spec.containers[0]
    # STORAGE_URI and the env upserted in place, the secret's keys as env (Trainer's builder.go Initializer)
    assert [(e.name, e.value) for e in data.env or []] == [
        ("STORAGE_URI", "hf://org/data"), ("HF_HOME", "/cache"), ("IGNORE_PATTERNS", "*.bin")]
    assert data.envFrom == [{"secretRef": {"name": "hub-token"}}]
    assert [(m.name, m.mountPath) for m in data.volumeMounts or []] == [("shared", "/workspace")]
    model = steps[1].template.spec.containers[0]
    assert [(e.name, e.value) for e in model.env or []] == [("STORAGE_URI", "hf://org/model")]
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)  # the trainer as before


def test_an_initializer_the_runtime_cannot_run_and_other_jobs_are_refused(tmp_path: Path) -> None:
    text = edit(CUSTOM, "  runtimeRef:\n", "  initializer:\n    model: {storageUri: hf://org/model}\n  runtimeRef:\n")
    (tmp_path / "job.yaml").write_text(text + "---\n" + RUNTIME)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.initializer.model"
    assert p.message == "runtime 'torch-shared-fs' has no model-initializer job to run it (Trainer refuses it too)"
    launcher = edit(RUNTIME, "        - name: trainer-node\n", textwrap.indent(doc("""
        - name: launcher
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: launcher}}
            spec: {template: {spec: {containers: [{name: launcher, image: mpi:1}]}}}
        - name: trainer-node
        """), "        "))
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + launcher)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.template.spec.replicatedJobs[0]"
    assert "replicated job 'launcher' is neither the trainer nor a dataset or model initializer" in p.message


def test_a_replicated_job_name_over_20_characters_is_refused_as_trainer_v2_4_refuses_it(tmp_path: Path) -> None:
    long_name = edit(RUNTIME, "- name: trainer-node", "- name: trainer-node-of-the-team")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + long_name)
    with pytest.raises(InvalidJob) as err:
        load(tmp_path / "job.yaml")
    (p,) = err.value.problems
    assert p.path == "spec.template.spec.replicatedJobs[0].name"
    assert "Kubeflow Trainer v2.4 allows at most 20" in p.message


def test_unknown_runtime_and_trainer_fields() -> None:
    text = edit(TRAINJOB, "    numNodes: 3\n", "    numNodes: 3\n    numGPUs: 2\n")
    problem_at(text, "spec.trainer.numGPUs", "numGPUs")
    text = edit(TRAINJOB, "    name: torch-distributed\n", "    name: mlx-distributed\n")
    p = problem_at(text, "spec.runtimeRef.name", "name: mlx")
    assert "'mlx-distributed' is not known here" in p.message


@pytest.mark.parametrize("field", ["podTemplateOverrides: [{targetJobs: [{name: node}]}]", "labels: {a: b}",
                                   "annotations: {a: b}"])
def test_trainer_v2_1_fields_that_runtime_patches_replaced_name_the_version_and_the_fix(field: str) -> None:
    text = edit(TRAINJOB, "  activeDeadlineSeconds: 3600\n", f"  activeDeadlineSeconds: 3600\n  {field}\n")
    key = field.split(":")[0]
    p = problem_at(text, f"spec.{key}", f"  {key}:", nth=1 if key == "labels" else 0)  # metadata has labels too
    assert p.message == ("is Trainer v2.0/v2.1's; v2.2 replaced it with runtimePatches (kubeflow/trainer #3309), "
                         "which torchjob reads")
    assert p.fix is not None and p.fix.startswith("write it as a spec.runtimePatches entry on the node job")


def test_reserved_env_names_the_trainer_field() -> None:
    text = edit(TRAINJOB, "      - name: NCCL_DEBUG\n", "      - name: PET_NNODES\n")
    found = problems(text)
    assert {(p.path, p.line) for p in found} == {("spec.trainer.env[0].name", line_of(text, "PET_NNODES"))}


@pytest.mark.parametrize("name", ["[NCCL_DEBUG]", "{a: 1}"])
def test_an_env_name_that_is_not_a_string_is_a_problem_not_a_crash(name: str, tmp_path: Path) -> None:
    text = edit(TRAINJOB, "      - name: NCCL_DEBUG\n", f"      - name: {name}\n")
    assert [p.path for p in problems(text)] == ["spec.trainer.env[0].name"]
    bad_runtime = edit(RUNTIME, "{name: HF_HOME, value: /shared/hf}", f"{{name: {name}, value: /shared/hf}}")
    (tmp_path / "job.yaml").write_text(CUSTOM + "---\n" + bad_runtime)
    with pytest.raises(InvalidJob):
        load(tmp_path / "job.yaml")


def test_suspend_managed_by_and_a_volcano_queue() -> None:
    text = edit(TRAINJOB, "  activeDeadlineSeconds: 3600\n",
                "  activeDeadlineSeconds: 3600\n  suspend: true\n  managedBy: kueue.x-k8s.io/multikueue\n")
    loaded = read(text)
    assert loaded.job.run_policy.suspend is True
    assert loaded.notes == [f"{SOURCE}:{line_of(text, 'managedBy')}: spec.managedBy: ignored: torchjob's operator runs "
                            "the TorchJob this becomes"]


RUNTIME_PATCHES = textwrap.indent(doc("""
      runtimePatches:
        - manager: kueue.x-k8s.io/manager
          trainingRuntimeSpec:
            template:
              spec:
                replicatedJobs:
                  - name: node
                    template:
                      spec:
                        template:
                          metadata:
                            labels: {team: vision}
                          spec:
                            nodeSelector: {gpu: a100}
                            tolerations: [{key: gpu, operator: Exists}]
                            volumes: [{name: data, persistentVolumeClaim: {claimName: fashion-data}}]
                            containers:
                              - name: node
                                volumeMounts: [{name: data, mountPath: /data}]
"""), "  ")


def test_runtime_patches_reach_the_pods() -> None:
    text = edit(TRAINJOB, "  activeDeadlineSeconds: 3600\n", "  activeDeadlineSeconds: 3600\n" + RUNTIME_PATCHES)
    job = read(text).job
    tpl = job.spec.pytorchReplicaSpecs[WORKER].template
    assert tpl.metadata is not None and tpl.metadata.labels == {"team": "vision"}
    assert tpl.spec.nodeSelector == {"gpu": "a100"} and tpl.spec.tolerations == [{"key": "gpu", "operator": "Exists"}]
    assert [v.name for v in tpl.spec.volumes or []] == ["data"]
    assert [m.mountPath for m in tpl.spec.containers[0].volumeMounts or []] == ["/data"]


def test_runtime_patches_follow_trainers_rules() -> None:
    text = edit(TRAINJOB, "  activeDeadlineSeconds: 3600\n", "  activeDeadlineSeconds: 3600\n" + RUNTIME_PATCHES)
    bad = edit(text, "volumeMounts: [{name: data, mountPath: /data}]", "env: [{name: A, value: b}]")
    p = problem_at(bad, "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec."
                   "template.spec.containers[0].env", "name: A")
    assert p.fix == "move these entries to spec.trainer.env"
    missing = edit(text, "\n" + " " * 26 + "- name: node\n", "\n" + " " * 26 + "- name: side\n")
    p = problem_at(missing, "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template."
                   "spec.template.spec.containers[0].name", "name: side")
    assert p.message == "the runtime's pod has no container 'side'"


KUBEFLOW = doc("""
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {name: kf-conv}
    spec:
      nprocPerNode: "2"
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          template: &pod
            metadata: {annotations: {sidecar.istio.io/inject: "false"}}
            spec:
              nodeSelector: {pool: gpu}
              volumes: [{name: data, persistentVolumeClaim: {claimName: d}}]
              containers:
                - name: pytorch
                  image: train:2
                  command: [torchrun, train.py]
                  env: [{name: LR, value: "0.1"}]
                  resources: {limits: {nvidia.com/gpu: 2}}
                  volumeMounts: [{name: data, mountPath: /data}]
        Worker:
          replicas: 3
          template: *pod
""")


def test_convert_to_a_trainjob_and_read_it_back() -> None:
    job = read(KUBEFLOW).job
    data, lost = convert(job, "trainjob")
    assert data["spec"]["trainer"] == {"numNodes": 4, "image": "train:2", "command": ["torchrun", "train.py"],
                                       "env": [{"name": "LR", "value": "0.1"}],
                                       "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}, "numProcPerNode": 2}
    assert lost == ["the master port 23456: Trainer's is 29500"]
    back = read_data(data).job
    assert (back.replica_count(MASTER), back.replica_count(WORKER)) == (1, 3)
    for rtype in (MASTER, WORKER):
        before, after = job.spec.pytorchReplicaSpecs[rtype].template, back.spec.pytorchReplicaSpecs[rtype].template
        assert after.spec.nodeSelector == before.spec.nodeSelector and after.spec.volumes == before.spec.volumes
        assert after.metadata == before.metadata
        b, a = before.spec.containers[0], after.spec.containers[0]
        assert (a.command, a.env, a.resources, a.volumeMounts, a.image) == (b.command, b.env, b.resources,
                                                                            b.volumeMounts, b.image)
    assert back.spec.nprocPerNode == "2"
    assert explicit(read_data(convert(back, "trainjob")[0]).job)["spec"] == explicit(back)["spec"]


def test_convert_names_what_a_trainjob_cannot_hold() -> None:
    text = edit(KUBEFLOW, "  nprocPerNode: \"2\"\n", "  nprocPerNode: gpu\n  runPolicy: {backoffLimit: 2}\n")
    text = edit(text, "      replicas: 3\n      template: *pod",
                "      replicas: 3\n      template:\n        spec:\n          containers:\n"
                "            - {name: pytorch, image: train:2, command: [python, train.py]}")
    _, lost = convert(read(text).job, "trainjob")
    assert "Worker's template differs from the Master's: a TrainJob's nodes share one; the Master's is written" in lost
    assert "nprocPerNode gpu is written as Trainer's auto (GPUs, else the CPUs requested)" in lost
    assert "runPolicy.backoffLimit has no TrainJob field" in lost


def test_a_trainjob_written_by_convert_is_valid_yaml_for_the_cli(tmp_path: Path) -> None:
    data, _ = convert(read(KUBEFLOW).job, "trainjob")
    (tmp_path / "tj.yaml").write_text(yaml.safe_dump(data))
    assert load(tmp_path / "tj.yaml").job.name == "kf-conv"


def test_a_static_trainjob_succeeds_once_every_node_has() -> None:
    """Trainer's JobSet is Complete when every node's Job is, not when node 0 is: node 0 (the TorchJob's
    master) succeeding alone leaves the job running, so the SDK reads every step Succeeded at Complete.
    Failures are as before: one node failing past its restarts fails the job."""
    from tests.core.sim import ended, running, up, world

    job = read(TRAINJOB).job
    m0, w0, w1 = ReplicaId(MASTER, 0), ReplicaId(WORKER, 0), ReplicaId(WORKER, 1)
    d, _ = running(job)
    plan = d(world(ended(m0, 0, 1.0), up(w0), ended(w1, 0, 1.5)), 2)
    assert plan.status.state == "Running" and plan.actions == [], "node 0 alone is not the TrainJob's success"
    plan = d(world(ended(m0, 0, 1.0), ended(w0, 0, 2.5), ended(w1, 0, 1.5)), 3)
    assert plan.status.state == "Succeeded"
    assert job.spec.minSuccess == 3  # what the TorchJob it becomes says (torchjob run --kube --dry-run shows it)
    elastic = read(edit(TRAINJOB, "  labels:", "  annotations: {torchjob.dev/nodes: \"2:3\"}\n  labels:")).job
    assert elastic.spec.minSuccess is None  # an elastic job: a node's agent exiting 0 (the agents end together)


def test_a_node_failing_after_node_0_succeeded_still_fails_the_trainjob() -> None:
    from tests.core.sim import ended, running, up, world

    job = read(edit(TRAINJOB, "    numNodes: 3", "    numNodes: 2")).job
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"runPolicy": job.spec.runPolicy.model_copy(
        update={"backoffLimit": 0})})})
    m0, w0 = ReplicaId(MASTER, 0), ReplicaId(WORKER, 0)
    d, _ = running(job)
    d(world(ended(m0, 0, 1.0), up(w0)), 1)
    plan = d(world(ended(m0, 0, 1.0), ended(w0, 1, 2.0)), 2)
    assert plan.status.state == "Failed"
