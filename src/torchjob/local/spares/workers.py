"""Warm spares of torchrun's workers, inside a local replica's torchrun agent (loopback_torchrun).

torchrun restarts its workers itself (`--max-restarts`, and every membership change of an elastic
job): each restart is a new process per local rank, which imports torch again. With the replica's
warm spares on (runPolicy.warmSpares: the agent is started with WORKERS_ENV=1), the agent keeps one
spare per local rank (torchjob.local.spares.spare.Spare, the same launcher as a replica's), started
`SPARE_AFTER_S` after that rank's worker, with the agent's environment: when torchrun starts that
rank's worker again with the same command line, the spare becomes it (torchrun's own per-worker
variables, RANK, WORLD_SIZE, MASTER_PORT, TORCHELASTIC_RESTART_COUNT..., are what it is handed).
torchrun's handler keeps its own work: it signals the worker's process group, polls its exit code,
reads its error file. Only a worker that writes to the agent's own stdout and stderr (no torchrun
`--redirects`/`--tee` file) is started so.

A restarted replica's agent (its attempt after the first: WORKERS_AT_ONCE_ENV) starts a spare per local rank
at once, for the command line torchrun will give its first workers: they import torch while the agent
joins the rendezvous (an elastic job's other agents stopping and meeting again), instead of after it. A
job's first agents do not: their spares would import torch beside the cold workers on the same cores.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from torchjob.core.policies.spares import python_entry
from torchjob.local.spares.spare import ATTEMPT_ENV, SPARE_AFTER_S, WORKERS_AT_ONCE_ENV, Spare

WORKERS_ENV = "TORCHJOB_WARM_WORKERS"
# What torchrun sets for each worker (torch/distributed/elastic/agent/server/local_elastic_agent.py):
# only these may differ between a worker's spare and the worker it becomes.
TORCHRUN_WORKER_ENV = frozenset({
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE", "NCCL_ASYNC_ERROR_HANDLING",
    "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_CPP_LOG_LEVEL",
})


class WorkerSpares:
    """One spare per local rank, made after that rank's worker started."""

    def __init__(self, after_s: float = SPARE_AFTER_S) -> None:
        self.after_s = after_s
        self.spares: dict[int, Spare] = {}
        self.lock = threading.Lock()
        self.timers: dict[int, threading.Timer] = {}

    def take(self, local_rank: int, args: tuple[str, ...], env: dict[str, str]) -> Any:
        """The spare's process for this worker, or None (none warm for it, or another command line)."""
        with self.lock:
            spare = self.spares.pop(local_rank, None)
        if spare is None:
            return None
        entry = python_entry(list(args), args[0])
        if entry != spare.entry or args[0] != spare.python:
            spare.discard()
            return None
        return spare.take(env)

    def schedule(self, local_rank: int, args: tuple[str, ...]) -> None:
        """A spare for this rank's next worker, in the pool's `after_s`."""
        entry = python_entry(list(args), args[0])
        if entry is None:
            return
        with self.lock:
            old = self.timers.pop(local_rank, None)
            if old is not None:
                old.cancel()
            timer = threading.Timer(self.after_s, self._start, args=(local_rank, args[0], entry))
            timer.daemon = True
            self.timers[local_rank] = timer
        timer.start()

    def start_now(self, local_rank: int, args: tuple[str, ...]) -> None:
        """A spare for this rank's next worker, in the pool when this returns: the agent's first workers are
        started right after its rendezvous, which may be sooner than a timer's thread runs on a loaded machine."""
        entry = python_entry(list(args), args[0])
        if entry is not None:
            self._start(local_rank, args[0], entry)

    def _start(self, local_rank: int, python: str, entry: Any) -> None:
        spare = Spare(f"local rank {local_rank}", python, entry, {}, capture=False,
                      attempt_env=ATTEMPT_ENV | TORCHRUN_WORKER_ENV)
        try:
            spare.start()
        except OSError:
            return
        with self.lock:
            old = self.spares.pop(local_rank, None)
            self.spares[local_rank] = spare
        if old is not None:
            old.discard()


def install() -> None:
    """Start torchrun's workers from warm spares where one is ready (called by loopback_torchrun
    before torchrun runs, in the agent's process)."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as handler

    pool = WorkerSpares()
    original = handler.SubprocessHandler._popen

    def _popen(self: Any, args: tuple[str, ...], env: dict[str, str]) -> Any:
        inherits = self._stdout is None and self._stderr is None  # no torchrun --redirects file
        proc = pool.take(self.local_rank_id, args, env) if inherits else None
        if proc is None:
            proc = original(self, args, env)
        if inherits:
            pool.schedule(self.local_rank_id, args)
        return proc

    handler.SubprocessHandler._popen = _popen  # type: ignore[method-assign]
    os.environ.pop(WORKERS_ENV, None)  # the agent's switches, not the workers'
    if os.environ.pop(WORKERS_AT_ONCE_ENV, None) == "1":
        first_workers_ahead(pool)


def first_workers_ahead(pool: WorkerSpares) -> None:
    """A spare per local rank now, for the workers torchrun's arguments (this agent's) will start: torch's own
    reading of them, which also sets what it sets in the agent's environment first (OMP_NUM_THREADS), so that
    the spares' environment is the workers'. Arguments torchrun will refuse: no spares (it says why)."""
    from torch.distributed.run import config_from_args, parse_args

    try:
        config, cmd, cmd_args = config_from_args(parse_args(sys.argv[1:]))  # type: ignore[no-untyped-call]
    except (Exception, SystemExit):  # torchrun itself reads them next and says what is wrong
        return
    for local_rank in range(int(config.nproc_per_node)):
        pool.start_now(local_rank, (str(cmd), *cmd_args))
