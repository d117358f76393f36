"""Foreign documents run unchanged with `torchjob run FILE` (the user's script in place: here,
scripts written for these tests that do what the seeds' scripts do)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.local.conftest import PROGRAMS, Torchjob, job_processes, state_of

pytestmark = pytest.mark.e2e
SEEDS = Path(__file__).resolve().parents[1] / "dialects" / "seeds"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting at /workspace needs root (or user namespaces)")
def test_volcano_seed_with_configmap_script_runs(torchjob: Torchjob, tmp_path: Path) -> None:
    # Seed 001: a Volcano Job (pytorch plugin) whose script is a ConfigMap mounted at /workspace,
    # with TaskCompleted -> CompleteJob on the master task.
    script = tmp_path / "pytorch-demo.py"
    shutil.copy(PROGRAMS / "ddp_step.py", script)
    proc = torchjob("run", "--configmap", f"pytorch-demo-script={script}", str(SEEDS / "001-volcano-cm.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 6") == 3
    desc = torchjob.describe("pytorch-job-with-configmap")
    succeeded = next(c for c in desc["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "Completed"  # the policy, not the default rule
    assert job_processes(desc["job"]["metadata"]["uid"]) == []


def test_t9k_seed_runs_with_the_first_replica_as_master(torchjob: Torchjob, tmp_path: Path) -> None:
    # Seed 003: `type: worker, replicas: 4`, `command: [python, dist_mnist.py]` in the working dir.
    shutil.copy(PROGRAMS / "ddp_step.py", tmp_path / "dist_mnist.py")
    proc = torchjob("run", str(SEEDS / "003-t9k.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 10") == 4
    assert "[master-0] rank 0/4" in proc.stdout and "[worker-2] rank 3/4" in proc.stdout


T9K_TORCHRUN = """
apiVersion: batch.tensorstack.dev/v1beta1
kind: PyTorchTrainingJob
metadata:
  name: t9k-torchrun
spec:
  torchrunConfig:
    enable: true
    minNodes: 2
    maxRestarts: 0
    procPerNode: "2"
    rdzvBackend: c10d
    extraOptions: []
  replicaSpecs:
  - replicas: 2
    restartPolicy: Never
    template:
      spec:
        containers:
        - command: [python]
          args: [dist_mnist.py]
          image: pytorch/pytorch:2.0.0-cuda11.7-cudnn8-devel
          name: pytorch
    type: worker
"""


def test_t9k_torchrun_switch_with_two_processes_per_node(torchjob: Torchjob, tmp_path: Path) -> None:
    shutil.copy(PROGRAMS / "ddp_step.py", tmp_path / "dist_mnist.py")
    (tmp_path / "job.yaml").write_text(T9K_TORCHRUN)
    render = torchjob("render", "job.yaml", "-o", "json", cwd=tmp_path, check=True).stdout
    assert '"torchjob.local.start.loopback_torchrun"' in render and '"dist_mnist.py"' in render
    assert '"PET_NNODES": "2:2"' in render and '"PET_NPROC_PER_NODE": "2"' in render
    proc = torchjob("run", "job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 10") == 4  # 2 nodes x 2 processes


def test_kubeflow_document_runs(torchjob: Torchjob, tmp_path: Path) -> None:
    doc = (SEEDS / "004-kubeflow-simple.yaml").read_text().replace(
        '"/opt/pytorch-mnist/mnist.py"', f'"{PROGRAMS / "ddp_step.py"}"').replace('"--epochs=1"', '"--sleep=0"')
    (tmp_path / "kf.yaml").write_text(doc)
    proc = torchjob("run", str(tmp_path / "kf.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 6") == 3


@pytest.mark.parametrize("seed", ["000-volcano.yaml", "002-kubeflow-nccl.yaml"])
def test_seeds_whose_code_is_in_the_image_are_refused_clearly(torchjob: Torchjob, seed: str) -> None:
    assert torchjob("validate", str(SEEDS / seed)).returncode == 0  # fine on a cluster
    proc = torchjob("run", str(SEEDS / seed))
    assert proc.returncode == 2
    assert "has no command" in proc.stderr and "Traceback" not in proc.stderr


VOLCANO_ENV = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: vc-env
spec:
  minAvailable: 3
  plugins:
    pytorch: ["--master=chief", "--worker=trainer-pool"]
    env: []
  tasks:
    - name: chief
      replicas: 1
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: busybox
              command:
                - sh
                - -c
                - >-
                  echo "$RANK $WORLD_SIZE $VC_TASK_INDEX $VC_CHIEF_NUM $VC_TRAINER_POOL_NUM
                  $VC_TRAINER_POOL_HOSTS"; sleep 2
    - name: trainer-pool
      replicas: 2
      dependsOn: {name: [chief]}
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: busybox
              command: [sh, -c, 'echo "$RANK $WORLD_SIZE $VC_TASK_INDEX"; sleep 1']
"""


def test_volcano_plugin_env_and_depends_on(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "vc.yaml").write_text(VOLCANO_ENV)
    proc = torchjob("run", "--grace-period", "2", str(tmp_path / "vc.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "[master-0] 0 3 0 1 2 127.0.0.1,127.0.0.1" in proc.stdout
    assert "[worker-1] 2 3 1" in proc.stdout
    attempts = {a["replica"]: a for a in torchjob.describe("vc-env")["attempts"]}
    # dependsOn: the workers start once the master runs
    assert attempts["worker-0"]["started"] >= attempts["master-0"]["started"]


T9K_DEBUG = """
apiVersion: batch.tensorstack.dev/v1beta1
kind: PyTorchTrainingJob
metadata:
  name: t9k-debug
spec:
  runMode:
    debug:
      enable: true
      replicaSpecs:
        - type: worker
          command: [sleep, "300"]
  tensorboardSpec:
    image: t9kpublic/tensorboard:2.11.0
    trainingLogFilesets: [t9k://pvc/torch-tensorboard-pvc/log]
  replicaSpecs:
  - replicas: 2
    restartPolicy: OnFailure
    template:
      spec:
        containers:
        - command: [python, dist_mnist.py]
          image: pytorch/pytorch:2.0.0-cuda11.7-cudnn8-devel
          name: pytorch
    type: worker
"""


def test_t9k_debug_mode_starts_replicas_without_training(torchjob: Torchjob, tmp_path: Path) -> None:
    (tmp_path / "debug.yaml").write_text(T9K_DEBUG)
    logs = tmp_path / "tb"
    (logs / "log").mkdir(parents=True)
    render = torchjob("render", "--pvc", f"torch-tensorboard-pvc={logs}", str(tmp_path / "debug.yaml"), "-o",
                      "json", check=True).stdout
    assert '"sleep",\n        "300"' in render
    sub = torchjob("submit", "--grace-period", "2", "--pvc", f"torch-tensorboard-pvc={logs}",
                   str(tmp_path / "debug.yaml"), check=True)
    assert "submitted" in sub.stdout
    torchjob.wait_for("t9k-debug", lambda d: state_of(d) == "Running" and len(d["attempts"]) == 2)
    log = torchjob("logs", "t9k-debug").stdout
    assert "TensorBoard" in log or "tensorboard" in log
    torchjob("delete", "t9k-debug", check=True)


TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: tj-local
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 2
    numProcPerNode: 2
    command: [torchrun, dist_mnist.py]
"""


def test_trainjob_runs_locally_through_torchrun(torchjob: Torchjob, tmp_path: Path) -> None:
    """numNodes replicas, numProcPerNode processes each, with the PET_* values Trainer sets."""
    shutil.copy(PROGRAMS / "ddp_step.py", tmp_path / "dist_mnist.py")
    (tmp_path / "job.yaml").write_text(TRAINJOB)
    proc = torchjob("run", "job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 10") == 4  # 2 nodes x 2 processes: ranks 0..3 sum to 6, +4


KUBEFLOW_SHELL_LAUNCHER = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: kf-shell
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: train:1
              command: [sh, -c]
              args:
                - >-
                  torchrun --nnodes=$(PET_NNODES) --node_rank=$(RANK) --nproc_per_node=1
                  --master_addr=$(MASTER_ADDR) --master_port=$(MASTER_PORT) PROGRAM
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: train:1
              command: [sh, -c]
              args:
                - >-
                  torchrun --nnodes=$(PET_NNODES) --node_rank=$(RANK) --nproc_per_node=1
                  --master_addr=$(MASTER_ADDR) --master_port=$(MASTER_PORT) PROGRAM
"""


def test_a_shell_that_starts_torchrun_with_kubelet_references(torchjob: Torchjob, tmp_path: Path) -> None:
    """$(VAR) in args expanded as the kubelet would, torchrun found inside the shell script."""
    (tmp_path / "job.yaml").write_text(KUBEFLOW_SHELL_LAUNCHER.replace("PROGRAM", str(PROGRAMS / "ddp_step.py")))
    proc = torchjob("run", "job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("all-reduce ok: 3") == 2  # ranks 0 and 1: 0 + 1 + 2 processes
