"""The seed documents (real-world jobs in each dialect) load into exactly the expected native job."""

from __future__ import annotations

import pytest

from tests.core.invariants import check_all
from tests.core.sim import simulate
from tests.dialects.util import SEEDS, read_data
from torchjob.api.model import DEFAULT_PORT, MASTER, WORKER, LifecyclePolicy, TorchJob
from torchjob.api.spec_facts import master_port
from torchjob.api.validate import training_container
from torchjob.core.shape.advice import advise
from torchjob.core.shape.topology import Placement, ReplicaId, replica_env, replicas
from torchjob.dialects.convert import convert, explicit
from torchjob.dialects.load import load

SEED_FILES = {
    "000-volcano.yaml": "batch.volcano.sh/v1alpha1 Job",
    "001-volcano-cm.yaml": "batch.volcano.sh/v1alpha1 Job",
    "002-kubeflow-nccl.yaml": "kubeflow.org/v1 PyTorchJob",
    "003-t9k.yaml": "batch.tensorstack.dev/v1beta1 PyTorchTrainingJob",
    "004-kubeflow-simple.yaml": "kubeflow.org/v1 PyTorchJob",
}
COMPLETE_ON_MASTER = [LifecyclePolicy(event="TaskCompleted", action="CompleteJob")]
WHERE = Placement(master_addr="127.0.0.1", master_port=29500, rdzv_addr="127.0.0.1", rdzv_port=29400)


def seed(name: str) -> TorchJob:
    return load(SEEDS / name).job


def test_every_seed_is_here_and_nothing_else() -> None:
    assert sorted(p.name for p in SEEDS.glob("*.yaml")) == sorted(SEED_FILES)


@pytest.mark.parametrize(("name", "dialect"), sorted(SEED_FILES.items()))
def test_every_seed_loads_without_warnings(name: str, dialect: str) -> None:
    loaded = load(SEEDS / name)
    assert loaded.dialect == dialect
    assert loaded.notes == [] and advise(loaded.job, loaded.doc) == []
    assert loaded.job.apiVersion == "torchjob.dev/v1" and loaded.job.kind == "TorchJob"
    assert loaded.job.status is None


@pytest.mark.parametrize("name", sorted(SEED_FILES))
def test_every_seed_converts_to_native_and_back(name: str) -> None:
    job = seed(name)
    data, lost = convert(job, "torchjob")
    assert lost == []
    assert explicit(read_data(data).job) == explicit(job)


@pytest.mark.parametrize(("name", "target"), [("000-volcano.yaml", "volcano"), ("001-volcano-cm.yaml", "volcano"),
                                              ("002-kubeflow-nccl.yaml", "kubeflow"),
                                              ("004-kubeflow-simple.yaml", "kubeflow")])
def test_every_seed_survives_its_own_dialect(name: str, target: str) -> None:
    job = seed(name)
    data, lost = convert(job, target)
    assert lost == []
    again = read_data(data)
    assert again.notes == []
    assert explicit(again.job) == explicit(job)


# --- 000: Volcano, image entrypoint, TaskCompleted -> CompleteJob ---------------------------------


def test_000_volcano() -> None:
    job = seed("000-volcano.yaml")
    assert job.name == "pytorch-job"
    assert job.metadata.namespace is None
    assert list(job.spec.pytorchReplicaSpecs) == [MASTER, WORKER]
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)
    master, worker = job.spec.pytorchReplicaSpecs[MASTER], job.spec.pytorchReplicaSpecs[WORKER]
    assert master.restartPolicy == worker.restartPolicy == "OnFailure"
    # The pod-level restartPolicy became the replica's: nothing is left in the pod template.
    assert master.template.spec.restartPolicy is None and worker.template.spec.restartPolicy is None
    (mc,) = master.template.spec.containers
    (wc,) = worker.template.spec.containers
    assert (mc.name, wc.name) == ("master", "worker")
    assert mc.image == wc.image == "gcr.io/kubeflow-ci/pytorch-dist-sendrecv-test:1.0"
    assert mc.imagePullPolicy == wc.imagePullPolicy == "IfNotPresent"
    # No command: the image's entrypoint runs. That is valid here; the local runtime refuses it at run time.
    assert mc.command is None and mc.args is None and wc.command is None and wc.args is None
    assert mc.workingDir is None and wc.workingDir == "/home"
    assert mc.ports is None and mc.env is None and master.template.spec.volumes is None
    assert master_port(job) == DEFAULT_PORT  # --port=23456, the default: no port is added
    # Task policies stay on the task; the workers have none; no job-level ones.
    assert master.policies == COMPLETE_ON_MASTER
    assert worker.policies is None and job.spec.policies is None
    assert master.maxRestarts is None and worker.maxRestarts is None
    assert master.dependsOn is None and worker.dependsOn is None
    assert job.spec.minSuccess is None
    # maxRetry unset: Volcano's default of 3, read as retries.
    rp = job.run_policy
    assert rp.backoffLimit == 3
    assert rp.schedulingPolicy is not None
    assert rp.schedulingPolicy.model_dump(exclude_none=True) == {"minAvailable": 1, "schedulerName": "volcano"}
    assert (rp.cleanPodPolicy, rp.ttlSecondsAfterFinished, rp.activeDeadlineSeconds) == (None, None, None)
    # The pytorch plugin forces svc (hosts env); no env plugin (task index); the default task names.
    assert job.spec.volcano is not None
    assert job.spec.volcano.model_dump() == {"taskNames": None, "taskIndex": False, "hosts": True}
    assert job.spec.elasticPolicy is None and job.spec.nprocPerNode is None


@pytest.mark.parametrize("name", ["000-volcano.yaml", "001-volcano-cm.yaml"])
def test_volcano_seeds_complete_when_the_master_does(name: str) -> None:
    """Their `TaskCompleted -> CompleteJob`: done when the master is, the workers stopped at once."""
    result = simulate(seed(name), {"master-0": [(5.0, 0)]}, check=check_all)
    assert result.final_reason() == "Completed"
    assert result.stopped == [(5.0, "worker-0", 0, "the job has finished"),
                              (5.0, "worker-1", 0, "the job has finished")]


def test_000_volcano_env() -> None:
    job = seed("000-volcano.yaml")
    hosts = {"master-0": "h-m0", "worker-0": "h-w0", "worker-1": "h-w1"}
    env = replica_env(job, ReplicaId(WORKER, 1), [], WHERE, lambda r: hosts[r.name]).env
    assert env["VC_MASTER_HOSTS"] == "h-m0" and env["VC_MASTER_NUM"] == "1"
    assert env["VC_WORKER_HOSTS"] == "h-w0,h-w1" and env["VC_WORKER_NUM"] == "2"
    assert "VC_TASK_INDEX" not in env and "VK_TASK_INDEX" not in env
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("2", "3", "29500")


# --- 001: Volcano with a ConfigMap-mounted script -----------------------------------------------


def test_001_volcano_configmap() -> None:
    job = seed("001-volcano-cm.yaml")
    assert job.name == "pytorch-job-with-configmap"
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)
    for rtype, cname in ((MASTER, "master"), (WORKER, "worker")):
        rspec = job.spec.pytorchReplicaSpecs[rtype]
        assert rspec.restartPolicy == "OnFailure"
        pod = rspec.template.spec
        assert pod.restartPolicy is None
        (c,) = pod.containers
        assert c.name == cname
        assert c.image == "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
        assert c.imagePullPolicy == "IfNotPresent"
        assert c.command == ["python", "/workspace/pytorch-demo.py"] and c.args is None
        assert [(e.name, e.value) for e in c.env or []] == [("PYTHONUNBUFFERED", "1")]
        assert [(m.name, m.mountPath, m.readOnly) for m in c.volumeMounts or []] == [
            ("training-script", "/workspace", None)
        ]
        assert c.resources is not None
        assert c.resources.requests == c.resources.limits == {"cpu": "1", "memory": "2Gi"}
        (vol,) = pod.volumes or []
        assert vol.name == "training-script" and vol.source_kind() == "configMap"
        assert vol.configMap is not None and vol.configMap.name == "pytorch-demo-script"
        assert c.ports is None
    assert job.spec.pytorchReplicaSpecs[MASTER].policies == COMPLETE_ON_MASTER
    assert job.spec.pytorchReplicaSpecs[WORKER].policies is None
    rp = job.run_policy
    assert rp.backoffLimit == 3
    assert rp.schedulingPolicy is not None
    assert rp.schedulingPolicy.model_dump(exclude_none=True) == {"minAvailable": 3, "schedulerName": "volcano"}
    assert job.spec.volcano is not None and (job.spec.volcano.hosts, job.spec.volcano.taskIndex) == (True, False)


# --- 002: Kubeflow, NCCL, image entrypoint with args -----------------------------------------------


def test_002_kubeflow_nccl() -> None:
    job = seed("002-kubeflow-nccl.yaml")
    assert job.name == "pytorch-dist-mnist-nccl"
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 1)
    for rtype in (MASTER, WORKER):
        rspec = job.spec.pytorchReplicaSpecs[rtype]
        assert rspec.restartPolicy == "OnFailure"
        assert rspec.template.metadata is not None
        assert rspec.template.metadata.annotations == {"sidecar.istio.io/inject": "false"}
        (c,) = rspec.template.spec.containers
        assert c.name == "pytorch"
        assert c.image == "<训练镜像>"
        assert c.command is None  # the image's entrypoint
        assert c.args == ["--backend", "nccl"]
        assert c.resources is not None and c.resources.limits == {"nvidia.com/gpu": 1}
        assert c.env is None and c.ports is None
        assert rspec.policies is None
    assert job.spec.runPolicy is None
    assert job.spec.volcano is None and job.spec.policies is None
    assert master_port(job) == DEFAULT_PORT


# --- 003: T9k, worker x4 -> Master 1 + Worker 3 ----------------------------------------------------


def test_003_t9k_first_worker_is_the_master() -> None:
    job = seed("003-t9k.yaml")
    assert job.name == "pytorch-example"
    assert list(job.spec.pytorchReplicaSpecs) == [MASTER, WORKER]
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 3)
    assert len(replicas(job)) == 4
    master, worker = job.spec.pytorchReplicaSpecs[MASTER], job.spec.pytorchReplicaSpecs[WORKER]
    assert master.template == worker.template  # the same template for both
    assert master.restartPolicy == worker.restartPolicy == "OnFailure"
    (c,) = master.template.spec.containers
    assert c.name == "pytorch"
    assert c.image == "pytorch/pytorch:2.0.0-cuda11.7-cudnn8-devel"
    assert c.command == ["python", "dist_mnist.py"] and c.args is None
    # no torchrunConfig: plain mode, no elastic policy, no nprocPerNode
    assert job.spec.elasticPolicy is None and job.spec.nprocPerNode is None
    assert job.spec.runPolicy is None


def test_003_t9k_env() -> None:
    job = seed("003-t9k.yaml")
    argv = ["python", "dist_mnist.py"]
    ranks = [replica_env(job, rid, argv, WHERE).env["RANK"] for rid in replicas(job)]
    assert ranks == ["0", "1", "2", "3"]
    env = replica_env(job, ReplicaId(WORKER, 2), argv, WHERE).env
    assert env["WORLD_SIZE"] == "4" and env["MASTER_ADDR"] == "127.0.0.1"
    assert not any(k.startswith(("VC_", "VK_")) for k in env)


# --- 004: Kubeflow, simple ---------------------------------------------------------------------------


def test_004_kubeflow_simple() -> None:
    job = seed("004-kubeflow-simple.yaml")
    assert job.name == "pytorch-simple-001"
    assert job.metadata.namespace == "kubeflow"
    assert (job.replica_count(MASTER), job.replica_count(WORKER)) == (1, 2)
    for rtype in (MASTER, WORKER):
        rspec = job.spec.pytorchReplicaSpecs[rtype]
        assert rspec.restartPolicy == "OnFailure"
        assert rspec.template.metadata is None
        containers = rspec.template.spec.containers
        assert training_container(containers) == 0
        (c,) = containers
        assert c.name == "pytorch"
        assert c.image == "kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
        assert c.imagePullPolicy == "Always"
        assert c.command == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
        assert c.args is None and c.env is None
    assert job.spec.runPolicy is None and job.spec.elasticPolicy is None


def test_seed_files_are_the_project_seed_documents() -> None:
    """The seeds are kept byte for byte as published (comments and odd spacing included)."""
    text = (SEEDS / "001-volcano-cm.yaml").read_text(encoding="utf-8")
    assert "# 启用PyTorch Plugin" in text
    assert (SEEDS / "000-volcano.yaml").read_text(encoding="utf-8").count("# PyTorch 插件注册") == 1
