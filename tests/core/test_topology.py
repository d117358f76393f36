"""Replica names, ranks, ports and the env contract in plain and torchrun mode."""

from __future__ import annotations

from typing import Any

import pytest

from tests.jobs import make_job
from torchjob.api.model import DEFAULT_PORT, ContainerPort
from torchjob.api.spec_facts import is_torchrun, master_port
from torchjob.core.shape.topology import (
    ALWAYS_DEFAULTS,
    Placement,
    ReplicaId,
    elastic_bounds,
    has_master,
    merge_env,
    node_rank,
    nproc_per_node,
    replica_env,
    replica_named,
    replica_total,
    replicas,
    world_size,
)

WHERE = Placement(master_addr="10.0.0.1", master_port=29500, rdzv_addr="10.0.0.2", rdzv_port=29400)
PLAIN = ["python", "train.py"]
TORCHRUN = ["torchrun", "train.py"]

M0 = ReplicaId("Master", 0)
W0, W1, W2 = ReplicaId("Worker", 0), ReplicaId("Worker", 1), ReplicaId("Worker", 2)


# --- replicas and ranks ----------------------------------------------------------------------


def test_replicas_in_rank_order() -> None:
    assert replicas(make_job(workers=3)) == [M0, W0, W1, W2]
    assert replicas(make_job(workers=2, master=False)) == [W0, W1]
    assert replicas(make_job(workers=0)) == [M0]


def test_a_replica_is_found_by_its_name_without_listing_the_others() -> None:
    job = make_job(workers=3)
    assert replica_total(job) == len(replicas(job)) == 4
    assert [replica_named(job, n) for n in ("master-0", "worker-2")] == [M0, W2]
    # only as ReplicaId.name spells one the job has
    assert [replica_named(job, n) for n in ("worker-3", "master-1", "Worker-0", "worker-01", "worker-0.demo", "x")] \
        == [None] * 6


def test_replica_count_defaults_to_one() -> None:
    job = make_job(workers=1)
    worker = job.spec.pytorchReplicaSpecs["Worker"].model_copy(update={"replicas": None})
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"pytorchReplicaSpecs": {"Worker": worker}})})
    assert replicas(job) == [W0]


@pytest.mark.parametrize(("rid", "name"), [(M0, "master-0"), (W0, "worker-0"), (ReplicaId("Worker", 12), "worker-12")])
def test_replica_name_round_trip(rid: ReplicaId, name: str) -> None:
    assert rid.name == name
    assert ReplicaId.parse(name) == rid


def test_replica_parse_is_case_insensitive() -> None:
    assert ReplicaId.parse("Worker-3") == ReplicaId("Worker", 3)


@pytest.mark.parametrize("bad", ["", "worker", "worker-", "chief-0", "worker-x", "worker--1", "master0"])
def test_replica_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        ReplicaId.parse(bad)


def test_replica_ids_sort_master_first() -> None:
    assert sorted([W1, M0, W0]) == [M0, W0, W1]


@pytest.mark.parametrize(
    ("master", "rid", "rank"),
    [(True, M0, 0), (True, W0, 1), (True, W1, 2), (True, W2, 3), (False, W0, 0), (False, W1, 1), (False, W2, 2)],
)
def test_node_rank(master: bool, rid: ReplicaId, rank: int) -> None:
    job = make_job(workers=3, master=master)
    assert has_master(job) is master
    assert node_rank(job, rid) == rank


@pytest.mark.parametrize(
    ("kwargs", "port"),
    [
        ({}, DEFAULT_PORT),
        ({"master_port": 12345}, 12345),
        ({"master": False, "master_port": 2222}, 2222),
        ({"master": False}, DEFAULT_PORT),
    ],
)
def test_master_port(kwargs: dict[str, Any], port: int) -> None:
    assert master_port(make_job(**kwargs)) == port


def test_master_port_ignores_ports_with_other_names() -> None:
    job = make_job()
    master = job.spec.pytorchReplicaSpecs["Master"]
    container = master.template.spec.containers[0]
    container.ports = [ContainerPort(name="metrics", containerPort=9090)]
    assert master_port(job) == DEFAULT_PORT


@pytest.mark.parametrize(
    ("argv", "torchrun"),
    [
        (["torchrun", "train.py"], True),
        (["/usr/local/bin/torchrun", "--nproc-per-node=2", "train.py"], True),
        (["python", "-m", "torch.distributed.run", "train.py"], True),
        (["python3.11", "-m", "torch.distributed.run", "train.py"], True),
        (["/usr/bin/python3", "-m", "torch.distributed.run"], True),
        (["python", "train.py"], False),
        # torchrun's predecessor reads the same PET_* variables (Kubeflow sets them for it too)
        (["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "train.py"], True),
        (["python3", "-m", "torch.distributed.launch"], True),
        (["python", "-m", "torch.distributed.elastic"], False),
        (["python", "-m"], False),
        # a shell script that starts a launcher
        (["bash", "-c", "torchrun train.py"], True),
        (["sh", "-c", "pip install -r req.txt && torchrun --nnodes=$(PET_NNODES) train.py"], True),
        (["/bin/bash", "-lc", "cd /w; python -m torch.distributed.run train.py"], True),
        (["sh", "-c", "python3 -m torch.distributed.launch --use_env train.py"], True),
        (["bash", "-c", "python train.py --out /tmp/torchrun_logs"], False),
        (["bash", "-c", "echo mytorchrun"], False),
        (["bash", "train_torchrun.sh"], False),  # a script file: its content is unknown
        (["bash", "-x", "torchrun"], False),  # no -c: the argument is a script file
        (["python", "-c", "import torchrun"], False),
        ([], False),
    ],
)
def test_is_torchrun(argv: list[str], torchrun: bool) -> None:
    assert is_torchrun(argv) is torchrun


@pytest.mark.parametrize(
    ("kwargs", "nproc"),
    [
        ({}, "auto"),
        ({"nproc_per_node": 4}, "4"),
        ({"nproc_per_node": "gpu"}, "gpu"),
        ({"master": False, "elastic": {"nProcPerNode": 3}}, "3"),
    ],
)
def test_nproc_per_node(kwargs: dict[str, Any], nproc: str) -> None:
    assert nproc_per_node(make_job(**kwargs)) == nproc


@pytest.mark.parametrize(
    ("elastic", "bounds"),
    [
        (None, None),
        ({}, (3, 3)),
        ({"minReplicas": 1}, (1, 1)),
        ({"maxReplicas": 5}, (5, 5)),
        ({"minReplicas": 2, "maxReplicas": 4}, (2, 4)),
    ],
)
def test_elastic_bounds(elastic: dict[str, Any] | None, bounds: tuple[int, int] | None) -> None:
    assert elastic_bounds(make_job(workers=3, master=False, elastic=elastic)) == bounds


@pytest.mark.parametrize(("workers", "master", "nproc", "size"), [(2, True, 1, 3), (3, False, 1, 3), (0, True, 4, 4),
                                                                 (2, True, 8, 24)])
def test_world_size(workers: int, master: bool, nproc: int, size: int) -> None:
    assert world_size(make_job(workers=workers, master=master), nproc) == size


# --- env: plain mode -------------------------------------------------------------------------


def plain(rid: ReplicaId, **kwargs: Any) -> dict[str, str]:
    env = replica_env(make_job("demo", **kwargs), rid, PLAIN, WHERE)
    assert not env.torchrun
    return env.env


@pytest.mark.parametrize(
    ("kwargs", "rid", "rank", "size"),
    [
        ({"workers": 2}, M0, 0, 3),
        ({"workers": 2}, W0, 1, 3),
        ({"workers": 2}, W1, 2, 3),
        ({"workers": 3, "master": False}, W0, 0, 3),
        ({"workers": 3, "master": False}, W2, 2, 3),
        ({"workers": 0}, M0, 0, 1),
    ],
)
def test_plain_env(kwargs: dict[str, Any], rid: ReplicaId, rank: int, size: int) -> None:
    assert plain(rid, **kwargs) == {
        "TORCHJOB_JOB_NAME": "demo",
        "TORCHJOB_REPLICA_TYPE": rid.rtype.lower(),
        "TORCHJOB_REPLICA_INDEX": str(rid.index),
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": str(size),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        # torchrun's variables as true of a node of one process (issue 47: Lightning detects torchrun by them)
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(size),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(size),
        "ROLE_NAME": "default",
        "TORCHELASTIC_RUN_ID": "demo",
    }


def test_plain_env_ranks_are_a_permutation() -> None:
    job = make_job(workers=4)
    ranks = sorted(int(replica_env(job, rid, PLAIN, WHERE).env["RANK"]) for rid in replicas(job))
    assert ranks == list(range(5))


def test_plain_env_ignores_nproc_per_node() -> None:
    """One process per replica in plain mode, whatever nprocPerNode says."""
    env = plain(W0, workers=1, nproc_per_node=4)
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "1")


# --- env: torchrun mode ----------------------------------------------------------------------

PLAIN_ONLY = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}


@pytest.mark.parametrize("argv", [TORCHRUN, ["python", "-m", "torch.distributed.run", "train.py"]])
@pytest.mark.parametrize(("rid", "rank"), [(M0, 0), (W0, 1), (W1, 2)])
def test_torchrun_env(argv: list[str], rid: ReplicaId, rank: int) -> None:
    env = replica_env(make_job("demo", workers=2, nproc_per_node=2), rid, argv, WHERE)
    assert env.torchrun
    assert env.env == {
        "TORCHJOB_JOB_NAME": "demo",
        "TORCHJOB_REPLICA_TYPE": rid.rtype.lower(),
        "TORCHJOB_REPLICA_INDEX": str(rid.index),
        "PET_NPROC_PER_NODE": "2",
        "PET_NNODES": "3",
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29500",
        # as Kubeflow and T9k set them in torchrun mode too (args may say $(MASTER_ADDR)); RANK is the
        # node's, as Kubeflow's; torchrun gives every process it starts its own
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "RANK": str(rank),
    }
    assert not {"WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} & set(env.env)


def test_torchrun_env_worker_only_ranks() -> None:
    job = make_job(workers=3, master=False)
    ranks = [replica_env(job, rid, TORCHRUN, WHERE).env["PET_NODE_RANK"] for rid in replicas(job)]
    assert ranks == ["0", "1", "2"]
    assert replica_env(job, W0, TORCHRUN, WHERE).env["PET_NPROC_PER_NODE"] == "auto"


def test_torchrun_elastic_env_defaults() -> None:
    job = make_job("demo", workers=3, master=False, elastic={"minReplicas": 1, "maxReplicas": 4})
    env = replica_env(job, W1, TORCHRUN, WHERE)
    assert env.torchrun
    assert env.env == {
        "TORCHJOB_JOB_NAME": "demo",
        "TORCHJOB_REPLICA_TYPE": "worker",
        "TORCHJOB_REPLICA_INDEX": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": "1:4",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "10.0.0.2:29400",
        "PET_RDZV_ID": "demo",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    assert not {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} & set(env.env)
    assert "PET_NODE_RANK" not in env.env and "PET_MASTER_ADDR" not in env.env  # the rendezvous ranks the nodes


def test_torchrun_elastic_env_everything_set() -> None:
    elastic = {
        "minReplicas": 2,
        "maxReplicas": 3,
        "rdzvBackend": "etcd",
        "rdzvId": "run-7",
        "maxRestarts": 5,
        "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "read_timeout", "value": "60"}],
        "standalone": True,
        "nProcPerNode": 8,
    }
    env = replica_env(make_job(workers=3, master=False, elastic=elastic, uid="u-1"), W0, TORCHRUN, WHERE).env
    assert env["PET_NNODES"] == "2:3"
    assert env["PET_RDZV_BACKEND"] == "etcd"
    assert env["PET_RDZV_ID"] == "run-7"
    assert env["PET_MAX_RESTARTS"] == "5"
    assert env["PET_RDZV_CONF"] == "timeout=900,read_timeout=60"
    assert env["PET_STANDALONE"] == "1"
    assert env["PET_NPROC_PER_NODE"] == "8"


def test_torchrun_elastic_rdzv_id_defaults_to_uid() -> None:
    env = replica_env(make_job(workers=2, master=False, elastic={}, uid="u-42"), W0, TORCHRUN, WHERE).env
    assert env["PET_RDZV_ID"] == "u-42"
    assert env["PET_NNODES"] == "2:2"


def test_elastic_is_ignored_in_plain_mode() -> None:
    env = plain(W1, workers=3, master=False, elastic={"minReplicas": 1, "maxReplicas": 3})
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3"
    assert not any(k.startswith("PET_") for k in env)


# --- merge ---------------------------------------------------------------------------------


def test_merge_env() -> None:
    assert merge_env([("A", "$(B)")], {"RANK": "0"}, ALWAYS_DEFAULTS) == [
        ("A", "$(B)", True), ("PYTHONUNBUFFERED", "1", False), ("RANK", "0", False)]
    assert merge_env([("PYTHONUNBUFFERED", "0")], {}, ALWAYS_DEFAULTS) == [("PYTHONUNBUFFERED", "0", True)]


def test_merge_env_upserts_ours_in_the_users_place() -> None:
    """Kubeflow appends its entry after the user's and the later one wins; torchjob gives the same
    value in the user's place, so there is never a second entry (and $(RANK) after it sees ours)."""
    merged = merge_env([("A", "1"), ("RANK", "9"), ("SECRET", None), ("B", "$(RANK)")], {"RANK": "0", "X": "x"},
                       ALWAYS_DEFAULTS)
    assert merged == [("A", "1", True), ("RANK", "0", False), ("SECRET", None, False), ("B", "$(RANK)", True),
                      ("PYTHONUNBUFFERED", "1", False), ("X", "x", False)]
    names = [name for name, _, _ in merged]
    assert len(names) == len(set(names))


def test_torchrun_gives_its_workers_the_replicas_grace() -> None:
    """torchrun's agent SIGKILLs its workers TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s) after the notice:
    a template's terminationGracePeriodSeconds is that timeout (a default: the user's wins), so a
    worker saving on notice has the whole grace; nothing where the template sets no grace, nor in
    plain mode."""
    job = make_job(workers=1, command=TORCHRUN)
    for spec in job.spec.pytorchReplicaSpecs.values():
        spec.template.spec.terminationGracePeriodSeconds = 120
    assert replica_env(job, W0, TORCHRUN, WHERE).defaults["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "120"
    plain = make_job(workers=1, command=PLAIN)
    for spec in plain.spec.pytorchReplicaSpecs.values():
        spec.template.spec.terminationGracePeriodSeconds = 120
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in replica_env(plain, W0, PLAIN, WHERE).defaults
    bare = make_job(workers=1, command=TORCHRUN)
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in replica_env(bare, W0, TORCHRUN, WHERE).defaults
    env = dict((n, v) for n, v, _ in merge_env([("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "5")], {},
                                               replica_env(job, W0, TORCHRUN, WHERE).defaults))
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "5"
