"""Ranks, world size, addresses and the env contract of every replica. Pure.

Plain mode (the script calls `init_process_group` itself): MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK (master 0, worker i -> i+1, as Kubeflow), LOCAL_RANK, LOCAL_WORLD_SIZE, PYTHONUNBUFFERED, and
torchrun's GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, TORCHELASTIC_RUN_ID
as they are true of a node of one process (frameworks detect torchrun by them).

torchrun mode (the command starts with `torchrun` or `python -m torch.distributed.run`): torchrun
is configured through `PET_*` variables (its arguments' env defaults) and assigns per-process
RANK/WORLD_SIZE itself, so torchjob does not set them.

A job in torchrun mode also gets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless its env sets it
(see `TORCHRUN_DEFAULTS`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torchjob.api.model import MASTER, REPLICA_TYPES, WORKER, TorchJob
from torchjob.api.spec_facts import SHELLS, is_torchrun, volcano_task
from torchjob.api.validate import digits


@dataclass(frozen=True, order=True)
class ReplicaId:
    rtype: str  # "Master" | "Worker"
    index: int

    @functools.cached_property
    def name(self) -> str:
        """`master-0`, `worker-1`: the replica's name inside its job (made once: a round of a job of
        thousands of replicas asks each for it a dozen times)."""
        return f"{self.rtype.lower()}-{self.index}"

    @staticmethod
    def parse(name: str) -> ReplicaId:
        rtype, _, index = name.rpartition("-")
        canonical = {t.lower(): t for t in REPLICA_TYPES}
        if rtype.lower() not in canonical or not digits(index):
            raise ValueError(f"{name!r} is not a replica name like master-0 or worker-1")
        return ReplicaId(canonical[rtype.lower()], int(index))


def replicas(job: TorchJob) -> list[ReplicaId]:
    """Every replica of the job in rank order: the master first, then workers by index."""
    return list(_replicas(tuple(job.replica_count(t) for t in REPLICA_TYPES)))


@functools.lru_cache(maxsize=256)
def _replicas(counts: tuple[int, ...]) -> tuple[ReplicaId, ...]:
    """The replicas of a job of these counts (one per type of REPLICA_TYPES), made once per shape: a
    round of a job of thousands of replicas lists them several times (ReplicaId is immutable)."""
    return tuple(ReplicaId(t, i) for t, n in zip(REPLICA_TYPES, counts, strict=True) for i in range(n))


def replica_named(job: TorchJob, name: str) -> ReplicaId | None:
    """The job's replica called `name` (`worker-1`, as `ReplicaId.name` spells it), if it has one."""
    try:
        rid = ReplicaId.parse(name)
    except ValueError:
        return None
    return rid if rid.name == name and rid.index < job.replica_count(rid.rtype) else None


def replica_total(job: TorchJob) -> int:
    """How many replicas the job has: len(replicas(job)) without listing them (a job of thousands
    of replicas asks this once per replica)."""
    return sum(job.replica_count(t) for t in REPLICA_TYPES)


def has_master(job: TorchJob) -> bool:
    return MASTER in job.spec.pytorchReplicaSpecs


def node_rank(job: TorchJob, rid: ReplicaId) -> int:
    if rid.rtype == MASTER:
        return 0
    return rid.index + (1 if has_master(job) else 0)


@dataclass(frozen=True)
class Placement:
    """Where the rendezvous lives; chosen by the runtime (loopback + free ports, or DNS)."""

    master_addr: str
    master_port: int
    rdzv_addr: str
    rdzv_port: int


def is_shell(argv: list[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) in SHELLS


def nproc_per_node(job: TorchJob) -> str:
    if job.spec.nprocPerNode is not None:
        return job.spec.nprocPerNode
    ep = job.spec.elasticPolicy
    if ep is not None and ep.nProcPerNode is not None:
        return str(ep.nProcPerNode)
    return "auto"


def tags_ranks(job: TorchJob, torchrun: bool) -> bool:
    """Whether a replica's processes tag each line with their rank (`[rank3]: ...`): a replica that
    torchrun starts several processes in (a number over one, or torchrun's `auto`/`gpu`/`cpu`).
    Locally a start-up hook tags them (torchjob.local.ranktag); in a pod torchrun's own `--tee` with a
    `[rank${rank}]: ` prefix (kube/objects/workload/pods.py), where torchjob is not installed."""
    return torchrun and nproc_per_node(job) != "1"


def elastic_bounds(job: TorchJob) -> tuple[int, int] | None:
    """(min, max) nodes of an elastic job, defaulted the way Kubeflow does."""
    ep = job.spec.elasticPolicy
    if ep is None:
        return None
    workers = job.replica_count(WORKER)
    lo, hi = ep.minReplicas, ep.maxReplicas
    if lo is None and hi is None:
        lo = hi = workers
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    assert lo is not None and hi is not None
    return lo, hi


def world_size(job: TorchJob, nproc: int) -> int:
    """Processes in the job, what torch means by WORLD_SIZE."""
    return replica_total(job) * nproc


# Since torch 2.4 the c10d rendezvous shares one TCPStore, made by round 0's rank 0, with every later
# round, and a node that joins a later round waits for that store's address, which no agent publishes
# again: a pod made again after its node was lost hangs the rendezvous (60 s), and then every pod of
# the job is restarted. Seen on a real node with torch 2.15 (tests/e2e, the elastic kill test); with
# the store made per round, as before 2.4, the survivors and the new pod train on in the next round.
# See also pytorch/pytorch#135712 (the shared store and agent restarts). The same store bites torchrun's
# own restarts of its worker group inside a node (--max-restarts): `torchrun --standalone
# --nproc-per-node 3` whose worker was SIGKILLed failed or hung in 3 of 3 tries with it and recovered
# in 3 of 3 without it (issue 22), so every job in torchrun mode gets it. A user's own value wins.
TORCHRUN_DEFAULTS = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
ALWAYS_DEFAULTS = {"PYTHONUNBUFFERED": "1"}  # a replica's output reaches its log as it is printed
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"


def shutdown_timeout(grace_s: float) -> str:
    """torchrun's agent, told to stop (SIGTERM), gives its workers TORCH_ELASTIC_SHUTDOWN_TIMEOUT
    (30 s) before SIGKILL: the replica's grace instead, so that a worker saving a checkpoint on the
    notice has all of it (the kubelet's SIGKILL at its end bounds everything anyway)."""
    return str(max(1, math.ceil(grace_s)))


@dataclass(frozen=True)
class ReplicaEnv:
    env: dict[str, str]
    torchrun: bool
    # set unless the user's env sets them: PYTHONUNBUFFERED=1 always, TORCHRUN_DEFAULTS in torchrun mode
    defaults: dict[str, str] = field(default_factory=lambda: dict(ALWAYS_DEFAULTS))


HostOf = Callable[[ReplicaId], str]


def volcano_env(job: TorchJob, rid: ReplicaId, host_of: HostOf) -> dict[str, str]:
    """What Volcano's `env` plugin (task index) and `svc` plugin (hosts of every task) set."""
    vc = job.spec.volcano
    env: dict[str, str] = {}
    if vc is None:
        return env
    if vc.taskIndex:
        env["VC_TASK_INDEX"] = env["VK_TASK_INDEX"] = str(rid.index)
    if vc.hosts:
        for rtype in job.spec.pytorchReplicaSpecs:
            key = volcano_task(job, rtype).upper().replace("-", "_")
            n = job.replica_count(rtype)
            env[f"VC_{key}_HOSTS"] = ",".join(host_of(ReplicaId(rtype, i)) for i in range(n))
            env[f"VC_{key}_NUM"] = str(n)
    return env


def replica_env(
    job: TorchJob,
    rid: ReplicaId,
    argv: list[str],
    where: Placement,
    host_of: HostOf | None = None,
) -> ReplicaEnv:
    """The variables torchjob sets for one replica (the user's own env is merged by the caller).
    `host_of` gives a replica's host name (for Volcano's VC_<TASK>_HOSTS; default: the master's
    address). Asked only of a job that wants the hosts: each replica's own work stays O(1) in the
    size of the job otherwise."""
    env: dict[str, str] = {
        "TORCHJOB_JOB_NAME": job.name,
        "TORCHJOB_REPLICA_TYPE": rid.rtype.lower(),
        "TORCHJOB_REPLICA_INDEX": str(rid.index),
    }
    env.update(volcano_env(job, rid, host_of or (lambda _: where.master_addr)))
    nproc = nproc_per_node(job)
    rank = node_rank(job, rid)
    if is_torchrun(argv):
        # Kubeflow and T9k set these in torchrun mode too (`--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)`
        # in args needs them); torchrun replaces them for the processes it starts.
        env.update(PET_NPROC_PER_NODE=nproc, MASTER_ADDR=where.master_addr, MASTER_PORT=str(where.master_port))
        bounds = elastic_bounds(job)
        if bounds is None:
            env.update(
                PET_NNODES=str(replica_total(job)),
                PET_NODE_RANK=str(rank),
                PET_MASTER_ADDR=where.master_addr,
                PET_MASTER_PORT=str(where.master_port),
                RANK=str(rank),  # the node's, as Kubeflow sets it; torchrun gives each process its own
            )
        else:
            ep = job.spec.elasticPolicy
            assert ep is not None
            lo, hi = bounds
            env.update(
                PET_NNODES=f"{lo}:{hi}",
                PET_RDZV_BACKEND=ep.rdzvBackend or "c10d",
                PET_RDZV_ENDPOINT=f"{where.rdzv_addr}:{where.rdzv_port}",
                PET_RDZV_ID=ep.rdzvId or job.metadata.uid or job.name,
            )
            if ep.maxRestarts is not None:
                env["PET_MAX_RESTARTS"] = str(ep.maxRestarts)
            if ep.rdzvConf:
                env["PET_RDZV_CONF"] = ",".join(f"{c.key}={c.value}" for c in ep.rdzvConf)
            if ep.standalone:
                env["PET_STANDALONE"] = "1"
        defaults = {**ALWAYS_DEFAULTS, **TORCHRUN_DEFAULTS}
        if nproc.isdigit() and int(nproc) > 1:
            # torchrun sets 1 itself when it starts more than one process and says so in a four-line
            # banner; set here, deliberately, the banner never shows (locally the runtime divides the
            # machine's cores instead: local.render.threads_per_process). A user's own value wins. With
            # `auto`/`gpu`/`cpu` the count is torchrun's (one process on a one-GPU node keeps its threads).
            defaults["OMP_NUM_THREADS"] = "1"
        grace = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec.terminationGracePeriodSeconds
        if grace is not None:  # a user's own value wins (a default)
            defaults[SHUTDOWN_TIMEOUT_ENV] = shutdown_timeout(grace)
        return ReplicaEnv(env=env, torchrun=True, defaults=defaults)
    # Plain mode: one process per replica.
    world = str(world_size(job, 1))
    env.update(
        MASTER_ADDR=where.master_addr,
        MASTER_PORT=str(where.master_port),
        WORLD_SIZE=world,
        RANK=str(rank),
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        # What torchrun would tell this process, each true of it (a node of one process), so that a
        # framework that recognises torchrun's environment by them reads its rank from it: Lightning's
        # TorchElasticEnvironment (TORCHELASTIC_RUN_ID; GROUP_RANK its node rank), which otherwise
        # takes every replica for global rank 0. Not TORCHELASTIC_USE_AGENT_STORE: there is no agent. The run
        # id is the job's name, not its uid: what `render` shows is what a pod gets.
        GROUP_RANK=str(rank),
        GROUP_WORLD_SIZE=world,
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=world,
        ROLE_NAME="default",
        TORCHELASTIC_RUN_ID=job.name,
    )
    return ReplicaEnv(env=env, torchrun=False)


EnvEntry = tuple[str, str | None, bool]


def merge_env(user: list[tuple[str, str | None]], ours: Mapping[str, str],
              defaults: Mapping[str, str]) -> list[EnvEntry]:
    """The container's env as torchjob sets it, on Kubernetes and locally alike: the user's entries
    in their places, with ours replacing any of the same name (Kubeflow appends its own after the
    user's and the later entry wins: the same value, without a second entry), then the rest of ours.
    `defaults` (ReplicaEnv.defaults) unless the user set them. Each entry is (name, value, expanded by the kubelet):
    a value None is the user's valueFrom, resolved by the runtime."""
    out: list[EnvEntry] = []
    for name, value in user:
        out.append((name, ours[name], False) if name in ours else (name, value, value is not None))
    written = {name for name, _ in user}
    unset = {name: value for name, value in defaults.items() if name not in written}
    out += [(name, value, False) for name, value in {**unset, **ours}.items() if name not in written]
    return out


def debug_command(job: TorchJob, rtype: str) -> list[str] | None:
    """T9k's debug mode: the replica runs this instead of training (default `sleep inf`)."""
    debug = job.spec.runMode.debug if job.spec.runMode else None
    if debug is None or not debug.enabled:
        return None
    for d in debug.replicaSpecs or []:
        if d.type.lower() == rtype.lower() and d.command:
            return list(d.command)
    return ["sleep", "inf"]
