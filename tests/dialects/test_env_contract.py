"""What a replica is told, as Kubeflow tells it: launchers (case 2), `$(VAR)` in command and args
(case 3), and documents that set MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK themselves (case 4),
locally (`local.render`) and on Kubernetes (`kube.render`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dialects.util import doc, line_of, problem_at, problems, read
from torchjob.api.model import TorchJob
from torchjob.core.shape.topology import Placement, ReplicaId, replicas
from torchjob.kube.objects.front import stacks as pod_stacks
from torchjob.kube.objects.workload import pods as pod_objects
from torchjob.local.inspect.render import render
from torchjob.local.start.launch import LaunchSpec, LocalOptions

WHERE = Placement("127.0.0.1", 40001, "127.0.0.1", 40002)

KUBEFLOW = doc("""
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata:
      name: kfl
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          template:
            spec:
              containers:
                - name: pytorch
                  image: train:1
                  command: COMMAND
                  env: ENV
        Worker:
          replicas: 2
          template:
            spec:
              containers:
                - name: pytorch
                  image: train:1
                  command: COMMAND
                  env: ENV
""")


def kubeflow(command: list[str], env: list[dict[str, Any]] | None = None) -> str:
    import json

    return KUBEFLOW.replace("COMMAND", json.dumps(command)).replace("ENV", json.dumps(env or []))


def local(job: TorchJob, tmp_path: Path) -> dict[str, LaunchSpec]:
    specs = render(job, WHERE, LocalOptions(cwd=str(tmp_path), resolve_python=False), tmp_path, gpus_available=[])
    return {s.name: s for s in specs}


def pod_env(job: TorchJob, rid: ReplicaId) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = pod_objects.pod(job, rid, 0)["spec"]["containers"][0]["env"]
    return env


def values(env: list[dict[str, Any]]) -> dict[str, str]:
    out = {e["name"]: e.get("value", "") for e in env}
    assert len(out) == len(env), "an env name appears twice"
    return out


# --- case 2: launchers get torchrun's PET_* configuration ----------------------------------------------------

LAUNCHERS = [
    ["python", "-m", "torch.distributed.launch", "--use_env", "train.py"],
    ["python3", "-m", "torch.distributed.run", "train.py"],
    ["python", "-u", "-m", "torch.distributed.launch", "train.py"],  # interpreter options before -m
    ["/opt/conda/bin/python", "-W", "ignore", "-um", "torch.distributed.run", "train.py"],
    ["sh", "-c", "pip install -q -r requirements.txt && torchrun train.py"],
    ["bash", "-c", "cd /workspace; python -m torch.distributed.launch train.py"],
]


@pytest.mark.parametrize("command", LAUNCHERS)
def test_launchers_get_the_pet_values_kubeflow_gives(command: list[str], tmp_path: Path) -> None:
    job = read(kubeflow(command)).job
    specs = local(job, tmp_path)
    for rid in replicas(job):
        s = specs[rid.name]
        rank = 0 if rid.rtype == "Master" else rid.index + 1
        assert s.torchrun
        expected = {"PET_NNODES": "3", "PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": "127.0.0.1",
                    "PET_MASTER_PORT": "40001", "PET_NPROC_PER_NODE": "auto"}
        assert {k: s.env[k] for k in expected} == expected
        kube = values(pod_env(job, rid))
        assert {k: kube[k] for k in expected} == {**expected, "PET_MASTER_ADDR": "kfl-master-0.kfl",
                                                   "PET_MASTER_PORT": "23456"}
        assert "WORLD_SIZE" not in s.env and "LOCAL_RANK" not in s.env  # the launcher sets them per process


@pytest.mark.parametrize("command", [["python", "-u", "train.py"], ["python", "-c", "import torch.distributed.run"],
                                     ["python", "train.py", "-m", "torch.distributed.run"]])
def test_python_running_a_script_or_code_is_plain_mode(command: list[str], tmp_path: Path) -> None:
    assert not local(read(kubeflow(command)).job, tmp_path)["worker-0"].torchrun


def test_a_script_that_runs_python_is_plain_mode(tmp_path: Path) -> None:
    job = read(kubeflow(["sh", "-c", "python train.py --log /tmp/torchrun"])).job
    s = local(job, tmp_path)["worker-1"]
    assert not s.torchrun
    assert (s.env["RANK"], s.env["WORLD_SIZE"]) == ("2", "3")
    assert not any(k.startswith("PET_") for k in s.env)


def test_explicit_launcher_arguments_are_kept(tmp_path: Path) -> None:
    """--nnodes/--node_rank in the command win over PET_* (torchrun reads PET_* as its arguments'
    defaults only), so torchjob passes the command through unchanged."""
    command = ["python", "-m", "torch.distributed.launch", "--nnodes=2", "--node_rank=1", "--nproc_per_node=4",
               "train.py"]
    job = read(kubeflow(command)).job
    s = local(job, tmp_path)["worker-0"]
    assert s.argv == command and s.torchrun
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    # the command unchanged behind torchjob's stacks front (python -I -c BOOT, then the command as written)
    assert pod["spec"]["containers"][0]["command"] == ["python", "-I", "-c", pod_stacks.boot(), *command]


# --- case 3: $(VAR) in command and args ---------------------------------------------------------------------

RDZV = ["torchrun", "--nnodes=$(PET_NNODES)", "--rdzv_backend=c10d", "--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
        "--rdzv_id=$(JOB)-$$(ESCAPED)", "train.py", "--out=$(OUT)/$(UNKNOWN)"]


def test_command_and_args_are_expanded_locally_as_the_kubelet_does(tmp_path: Path) -> None:
    env = [{"name": "JOB", "value": "kfl"}, {"name": "OUT", "value": "/data/$(JOB)"}]
    job = read(kubeflow(RDZV, env)).job
    s = local(job, tmp_path)["worker-0"]
    assert s.argv == ["torchrun", "--nnodes=3", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:40001",
                      "--rdzv_id=kfl-$(ESCAPED)", "train.py", "--out=/data/kfl/$(UNKNOWN)"]
    assert s.env["OUT"] == "/data/kfl"
    # On Kubernetes the kubelet expands them: the pod carries them as written, with the values in its env.
    pod = pod_objects.pod(job, ReplicaId("Worker", 0), 0)
    assert pod["spec"]["containers"][0]["command"] == RDZV
    env_kube = values(pod["spec"]["containers"][0]["env"])
    assert (env_kube["MASTER_ADDR"], env_kube["MASTER_PORT"]) == ("kfl-master-0.kfl", "23456")
    assert env_kube["OUT"] == "/data/$(JOB)"


def test_env_values_see_only_earlier_entries(tmp_path: Path) -> None:
    env = [{"name": "A", "value": "$(B)-$(MASTER_PORT)"}, {"name": "B", "value": "b"},
           {"name": "C", "value": "$(A)+$(B)"}]
    loaded = read(kubeflow(["python", "train.py", "$(C)"], env))
    s = local(loaded.job, tmp_path)["master-0"]
    # MASTER_PORT is torchjob's, after the user's entries, as on Kubernetes: A cannot see it either
    assert (s.env["A"], s.env["C"]) == ("$(B)-$(MASTER_PORT)", "$(B)-$(MASTER_PORT)+b")
    assert s.argv == ["python", "train.py", "$(B)-$(MASTER_PORT)+b"]
    assert any("$(B) stays as written: no env entry before this one" in n for n in loaded.notes)


def test_unknown_references_are_named_in_a_warning() -> None:
    text = kubeflow(RDZV, [{"name": "JOB", "value": "kfl"}, {"name": "OUT", "value": "/o"}])
    notes = read(text).notes
    unknown = [n for n in notes if "$(UNKNOWN)" in n]
    assert len(unknown) == 2  # the master's command and the workers'
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command[6]: $(UNKNOWN) stays as written: " \
           "this container's env does not set it" in unknown[0]
    assert not [n for n in notes if "ESCAPED" in n or "MASTER_ADDR)" in n or "PET_NNODES" in n]


def test_world_size_in_a_launcher_command_says_what_to_use() -> None:
    notes = read(kubeflow(["torchrun", "--nnodes=$(WORLD_SIZE)", "train.py"])).notes
    assert any("$(WORLD_SIZE) stays as written" in n and "torchrun sets it for the processes it starts" in n
               for n in notes)


# --- case 4: a document that sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK ---------------------------------

SETS = [{"name": "MASTER_ADDR", "value": "localhost"}, {"name": "MASTER_PORT", "value": "29500"},
        {"name": "WORLD_SIZE", "value": "1"}, {"name": "RANK", "value": "0"}, {"name": "LR", "value": "$(RANK)"}]


def test_user_set_distributed_env_is_accepted_with_a_warning(tmp_path: Path) -> None:
    text = kubeflow(["python", "train.py"], SETS)
    loaded = read(text)
    line = line_of(text, "MASTER_ADDR", 1)  # the Worker's env line
    worker = [n for n in loaded.notes if "Worker" in n]
    assert worker == [
        f"job.yaml:{line}: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0].name: MASTER_ADDR is "
        "set by torchjob too (as by Kubeflow, whose entry comes after yours and wins); the replica gets torchjob's: "
        "the master's address (127.0.0.1 locally, kfl-master-0.kfl on Kubernetes)",
        f"job.yaml:{line}: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[1].name: MASTER_PORT is "
        "set by torchjob too (as by Kubeflow, whose entry comes after yours and wins); the replica gets torchjob's: "
        "the master's port (23456 on Kubernetes and with --document-ports, else a free port picked per local run)",
        f"job.yaml:{line}: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[2].name: WORLD_SIZE is "
        "set by torchjob too (as by Kubeflow, whose entry comes after yours and wins); the replica gets torchjob's: "
        "the job's 3 processes",
        f"job.yaml:{line}: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[3].name: RANK is "
        "set by torchjob too (as by Kubeflow, whose entry comes after yours and wins); the replica gets torchjob's: "
        "its rank (1..2)",
    ]
    job = loaded.job
    s = local(job, tmp_path)["worker-1"]
    assert (s.env["MASTER_ADDR"], s.env["MASTER_PORT"], s.env["WORLD_SIZE"], s.env["RANK"]) == \
        ("127.0.0.1", "40001", "3", "2")
    assert s.env["LR"] == "2"  # an entry after RANK sees the value the replica gets
    kube = pod_env(job, ReplicaId("Worker", 1))
    names = [e["name"] for e in kube]
    assert names[:5] == ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LR"]  # in the user's places
    assert values(kube)["RANK"] == "2" and values(kube)["MASTER_ADDR"] == "kfl-master-0.kfl"


def test_a_value_from_entry_of_a_name_torchjob_sets_leaves_no_second_entry() -> None:
    env = [{"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    job = read(kubeflow(["python", "train.py"], env)).job
    kube = pod_env(job, ReplicaId("Worker", 0))
    assert [e for e in kube if e["name"] == "MASTER_ADDR"] == [{"name": "MASTER_ADDR", "value": "kfl-master-0.kfl"}]


def test_in_torchrun_mode_world_size_stays_the_launchers() -> None:
    notes = read(kubeflow(["torchrun", "train.py"], [{"name": "WORLD_SIZE", "value": "8"}])).notes
    assert notes and all("the replica gets yours in the launcher's env only: torchrun sets it for every process "
                         "it starts" in n for n in notes)


@pytest.mark.parametrize("name", ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "LOCAL_RANK",
                                  "TORCHELASTIC_ERROR_FILE", "TORCHJOB_JOB_NAME"])
def test_what_would_silently_break_the_job_is_still_refused(name: str) -> None:
    text = kubeflow(["torchrun", "train.py"], [{"name": name, "value": "4"}])
    found = problems(text)  # one per replica type, the Master's first
    assert found[0].path == "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[0].name"
    assert found[0].message == f"{name} is set by torchjob and cannot be set by hand"


def test_volcano_documents_that_set_them_get_the_plugins_values(tmp_path: Path) -> None:
    text = doc("""
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vcj}
        spec:
          plugins: {pytorch: ["--master=master", "--worker=worker", "--port=23456"]}
          tasks:
            - name: master
              replicas: 1
              template:
                spec:
                  restartPolicy: OnFailure
                  containers:
                    - name: m
                      command: [python, train.py]
                      env: [{name: WORLD_SIZE, value: "64"}]
            - name: worker
              replicas: 1
              template:
                spec:
                  restartPolicy: OnFailure
                  containers: [{name: w, command: [python, train.py]}]
        """)
    loaded = read(text)
    assert [n.split(": ", 2)[1] for n in loaded.notes] == ["spec.tasks[0].template.spec.containers[0].env[0].name"]
    assert local(loaded.job, tmp_path)["master-0"].env["WORLD_SIZE"] == "2"


def test_problem_at_still_names_a_refused_name_in_a_t9k_document() -> None:
    text = doc("""
        apiVersion: batch.tensorstack.dev/v1beta1
        kind: PyTorchTrainingJob
        metadata: {name: t}
        spec:
          replicaSpecs:
            - type: worker
              replicas: 2
              template:
                spec:
                  containers:
                    - {name: pytorch, command: [python, t.py], env: [{name: PET_NODE_RANK, value: "0"}]}
        """)
    problem_at(text, "spec.replicaSpecs[0].template.spec.containers[0].env[0].name", "PET_NODE_RANK")


def test_a_hostname_or_subdomain_the_pods_do_not_keep_is_said(tmp_path: Path) -> None:
    from tests.dialects.cli import torchjob

    text = kubeflow(["python", "train.py"])
    text = text.replace("      template:\n        spec:\n",
                        "      template:\n        spec:\n          hostname: HOST\n          subdomain: SUB\n")
    text = text.replace("HOST", "kfl-master-0", 1).replace("SUB", "kfl", 1)  # the Master's: what its pod gets
    text = text.replace("HOST", "trainer").replace("SUB", "my-svc")
    loaded = read(text)
    assert loaded.notes == [
        f"job.yaml:{line_of(text, 'hostname: trainer')}: spec.pytorchReplicaSpecs.Worker.template.spec.hostname: "
        "'trainer' is replaced on Kubernetes: each pod's hostname is its own name (kfl-worker-0 .. kfl-worker-1), "
        "by which the replicas reach it through the job's headless Service (ignored locally)",
        f"job.yaml:{line_of(text, 'subdomain: my-svc')}: spec.pytorchReplicaSpecs.Worker.template.spec.subdomain: "
        "'my-svc' is replaced on Kubernetes by 'kfl', the job's headless Service, through which every replica's "
        "host name resolves (ignored locally)",
    ]
    spec = pod_objects.pod(loaded.job, ReplicaId("Worker", 1), 0)["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("kfl-worker-1", "kfl")  # what the warning says it gets
    (tmp_path / "job.yaml").write_text(text)
    for command in (["validate"], ["render", "--kube"]):
        r = torchjob(*command, str(tmp_path / "job.yaml"))
        assert r.code == 0, r.err
        assert r.err.count("is replaced on Kubernetes") == 2, r.err


# --- elastic jobs: the rendezvous store is made per round --------------------------------------------------------

def elastic(env: list[dict[str, Any]] | None = None) -> TorchJob:
    policy = "  elasticPolicy: {minReplicas: 1, maxReplicas: 3}\n"
    text = kubeflow(["torchrun", "train.py"], env).replace("spec:\n  pytorch", f"spec:\n{policy}  pytorch")
    job = read(text).job
    assert job.spec.elasticPolicy is not None
    return job


def test_a_torchrun_job_gets_a_rendezvous_store_per_round(tmp_path: Path) -> None:
    # torch >= 2.4 shares round 0's store with later rounds, and a pod that joins later hangs there
    # (seen on a real node: tests/e2e/test_real_pods.py, the elastic kill test); torchrun's own restart
    # of its worker group (--max-restarts) in a fixed world meets the same store (issue 22).
    fixed = read(kubeflow(["torchrun", "train.py"])).job
    for job in (elastic(), fixed):
        specs = local(job, tmp_path)
        for rid in replicas(job):
            assert specs[rid.name].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
            assert values(pod_env(job, rid))["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    plain = read(kubeflow(["python", "train.py"])).job  # no torchrun: no rendezvous store of torchrun's
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in values(pod_env(plain, ReplicaId("Worker", 0)))
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in local(plain, tmp_path)["worker-0"].env


def test_a_users_own_store_sharing_setting_wins_without_a_second_entry(tmp_path: Path) -> None:
    job = elastic([{"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "0"}])
    read_notes = read(kubeflow(["torchrun", "train.py"], [{"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
                                                           "value": "0"}])).notes
    assert not any("TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in n for n in read_notes)
    assert local(job, tmp_path)["worker-1"].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"
    assert values(pod_env(job, ReplicaId("Worker", 1)))["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


@pytest.mark.parametrize("nproc,wanted", [("2", True), ("4", True), ("1", False), ("gpu", False), ("auto", False)])
def test_omp_num_threads_is_set_deliberately_for_a_replica_of_several_processes(tmp_path: Path, nproc: str,
                                                                               wanted: bool) -> None:
    """torchrun's OMP_NUM_THREADS banner never shows (issue 31): a number of processes over one gets the
    threads set, locally the machine's cores shared by the job's processes, on a cluster torchrun's 1; a
    replica of one process, or one whose count is torchrun's word, is left alone; the user's value wins."""
    import os

    def with_nproc(text: str) -> TorchJob:
        return read(text.replace("spec:\n  pytorchReplicaSpecs:", f'spec:\n  nprocPerNode: "{nproc}"\n'
                                 "  pytorchReplicaSpecs:")).job

    job = with_nproc(kubeflow(["torchrun", "train.py"]))
    assert job.spec.nprocPerNode == nproc
    rid = ReplicaId("Worker", 0)
    specs, pod = local(job, tmp_path), values(pod_env(job, rid))
    shared = str(max(1, (os.cpu_count() or 1) // (int(nproc) * len(replicas(job))))) if nproc.isdigit() else None
    if not wanted:
        assert "OMP_NUM_THREADS" not in pod
        # locally one-process replicas share the cores too (issue 47: `-j 2x1`); a word's count is torchrun's
        assert specs["worker-0"].env.get("OMP_NUM_THREADS") == (shared if nproc == "1" else None)
        return
    assert specs["worker-0"].env["OMP_NUM_THREADS"] == shared
    assert pod["OMP_NUM_THREADS"] == "1"
    mine = with_nproc(kubeflow(["torchrun", "train.py"], [{"name": "OMP_NUM_THREADS", "value": "7"}]))
    assert local(mine, tmp_path)["worker-0"].env["OMP_NUM_THREADS"] == "7"
    assert values(pod_env(mine, rid))["OMP_NUM_THREADS"] == "7"


def test_plain_replicas_on_one_machine_share_its_cores(tmp_path: Path) -> None:
    """Issue 47: `python train.py` replicas (plain mode, one process each) on this machine divide its cores
    (transformers' Trainer in `-j 2x1` took 13 s against 0.6 s with them divided); the user's value wins."""
    import os

    job = read(kubeflow(["python", "train.py"])).job
    shared = str(max(1, (os.cpu_count() or 1) // len(replicas(job))))
    assert {name: spec.env.get("OMP_NUM_THREADS") for name, spec in local(job, tmp_path).items()} == {
        rid.name: shared for rid in replicas(job)}
    mine = read(kubeflow(["python", "train.py"], [{"name": "OMP_NUM_THREADS", "value": "3"}])).job
    assert local(mine, tmp_path)["worker-0"].env["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in values(pod_env(job, ReplicaId("Worker", 0)))  # a pod has its own cores
