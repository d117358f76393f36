"""What a local start needs before its supervisor runs: the job's ports (loopback, free ones per
job, or the document's, or the plan's), its launch specs checked (GPUs, volumes, configMaps), and
its name claimed (a finished job's record gives way; a live one does not)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.api.spec_facts import master_port
from torchjob.core.shape.topology import Placement
from torchjob.local.inspect.render import render
from torchjob.local.start import tensorboard
from torchjob.local.start.launch import LaunchSpec, LocalOptions
from torchjob.local.start.ports import free_port
from torchjob.local.store.store import JobRecord, Store
from torchjob.local.supervisor import pids

LOOPBACK = "127.0.0.1"


def placement(job: TorchJob, opts: LocalOptions) -> Placement:
    """Loopback and a free port per job, so two local jobs never collide; or the document's; or
    the ports of the plan that `render` showed (`opts.ports`)."""
    if opts.ports is not None:
        return Placement(LOOPBACK, opts.ports[0], LOOPBACK, opts.ports[1])
    if opts.document_ports:
        port = master_port(job)
        ep = job.spec.elasticPolicy
        rdzv = (ep.rdzvPort if ep and ep.rdzvPort else port)
        return Placement(LOOPBACK, port, LOOPBACK, rdzv)
    return Placement(LOOPBACK, free_port(), LOOPBACK, free_port())


def now() -> datetime:
    return datetime.now(UTC)


def prepare_job(job: TorchJob, opts: LocalOptions, store: Store,
                notes: list[str] | None = None) -> tuple[TorchJob, list[LaunchSpec]]:
    """Check everything a local start needs (GPUs, volumes, configMaps) before anything starts.
    With `notes` (a dry run) what only a run would refuse is noted there instead."""
    # Always this run's own: the uid marks the run's processes for the kill sweep at its end, so a
    # document that copied another local job's uid would otherwise have that job's processes killed.
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": str(uuid.uuid4())})})
    specs = render(job, placement(job, opts), opts, store.job_dir(job.name), notes=notes)
    if job.spec.tensorboard is not None:
        try:
            tensorboard.log_dirs(job.spec.tensorboard, opts)
        except UserError as e:
            if notes is None:
                raise
            notes.append(e.render().replace("\n    fix:", "; fix:"))
    return job, specs


def claim_name(store: Store, name: str) -> None:
    """A finished job's record gives way to a new run of the same name; a live one does not."""
    old = store.get(name)
    if old is None:
        return
    if not old.status.finished and supervisor_alive(old):
        raise UserError(
            f"a job named {name!r} is {old.status.state.lower()} (supervisor pid {old.supervisor_pid})",
            fix=f"wait for it, delete it with `torchjob delete {name}`, or change metadata.name",
        )
    store.delete_job(name)


def supervisor_alive(rec: JobRecord | None) -> bool:
    """Whether the job's supervisor still runs: its pid and its start time, not the pid alone."""
    if rec is None or not rec.supervisor_pid:
        return False
    if rec.supervisor_start is None:  # recorded by a torchjob before the start time was: the pid alone
        try:
            os.kill(rec.supervisor_pid, 0)  # signal 0: nothing is sent
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return pids.alive(rec.supervisor_pid, rec.supervisor_start)
