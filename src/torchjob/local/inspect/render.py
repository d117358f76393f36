"""The local dry run: every replica's resolved command, env, working directory, mounts and GPUs.

`render` is what `torchjob render` prints and what the supervisor starts, so the two never
disagree. Nothing is started here; missing mount points and configMap copies are prepared by
`volumes.prepare` just before the start.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from torchjob.api.errors import UserError
from torchjob.api.model import (
    CLUSTER_ONLY_CONTAINER_FIELDS,
    CLUSTER_ONLY_POD_FIELDS,
    Container,
    PodSpec,
    TorchJob,
)
from torchjob.api.spec_facts import ignored_nproc, is_torchrun
from torchjob.api.validate import config_key_problem, training_container
from torchjob.core.policies.spares import warm_workers
from torchjob.core.round.initializers import step
from torchjob.core.shape.expand import expand_argv, expand_env
from torchjob.core.shape.topology import (
    SHUTDOWN_TIMEOUT_ENV,
    Placement,
    ReplicaId,
    debug_command,
    is_shell,
    merge_env,
    nproc_per_node,
    replica_env,
    replica_total,
    replicas,
    shutdown_timeout,
    tags_ranks,
)
from torchjob.local import ranktag
from torchjob.local.start.launch import DEFAULT_GRACE_S, LaunchSpec, LocalOptions
from torchjob.local.start.volumes import mounts_for

GPU_RESOURCE = "nvidia.com/gpu"


def resolve_argv(argv: list[str], resolve_python: bool, path: str | None = None) -> list[str]:
    """`python`/`python3` run under torchjob's own interpreter (so the job sees the user's
    environment); `torchrun` (or `python -m torch.distributed.run`) becomes `<that python> -m
    torchjob.local.start.loopback_torchrun`: torchrun whose TCPStore listens on the loopback address only
    (torch's own listens on every interface). Any other command not found on `path` (the replica's
    PATH) that is a console script of torchjob's environment (`accelerate`, `deepspeed`, `tune`,
    `lightning`, installed beside torchjob) runs from there."""
    if not argv or not resolve_python:
        return list(argv)
    head = os.path.basename(argv[0])
    if head == "torchrun":
        return [sys.executable, "-m", "torchjob.local.start.loopback_torchrun", *argv[1:]]
    if head in ("python", "python3", f"python3.{sys.version_info.minor}"):
        if argv[1:3] == ["-m", "torch.distributed.run"]:  # torchrun by its module: the same
            return [sys.executable, "-m", "torchjob.local.start.loopback_torchrun", *argv[3:]]
        return [sys.executable, *argv[1:]]
    if "/" not in argv[0] and shutil.which(argv[0], path=path) is None:
        beside = environment_bin() / argv[0]
        if beside.is_file() and os.access(beside, os.X_OK):
            return [str(beside), *argv[1:]]
    return list(argv)


def environment_bin() -> Path:
    """The scripts folder of torchjob's environment (a virtual environment's bin), where pip puts
    the console scripts of what is installed beside torchjob."""
    return Path(sys.executable).parent


def threads_per_process(processes: int) -> int:
    """OMP_NUM_THREADS of each process of a local job of several (unless its env sets it): every
    process of the job shares this machine's cores, so each gets an equal share, at least 1.
    torchrun's own choice is 1, said in a banner; set deliberately, the banner never shows."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))


def local_processes(job: TorchJob, torchrun: bool) -> int | None:
    """How many processes the job runs on this machine: every replica's, each of nprocPerNode in
    torchrun mode, one in plain mode; None when torchrun decides (`auto`, `gpu`, `cpu`)."""
    per = nproc_per_node(job) if torchrun else "1"
    return int(per) * replica_total(job) if per.isdigit() else None


def gpu_count(c: Container) -> int:
    res = c.resources
    if res is None:
        return 0
    for group in (res.limits, res.requests):
        if group and GPU_RESOURCE in group:
            return int(str(group[GPU_RESOURCE]))
    return 0


def available_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES entries (honouring the caller's own)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    import subprocess

    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(x for x in out.splitlines() if x.startswith("GPU "))]


def allocate_gpus(wants: dict[str, int], available: list[str]) -> dict[str, list[str]]:
    """Give each replica its own slice of the machine's GPUs, or refuse the whole job."""
    total = sum(wants.values())
    if total > len(available):
        detail = ", ".join(f"{name}: {n}" for name, n in wants.items() if n)
        raise UserError(
            f"the job asks for {total} GPUs ({detail}) but this machine has {len(available)}",
            fix=f"lower resources.limits[{GPU_RESOURCE!r}], or run it where there are enough GPUs",
        )
    out: dict[str, list[str]] = {}
    i = 0
    for name, n in wants.items():
        out[name] = available[i:i + n]
        i += n
    return out


def _env_value(job: TorchJob, rid: ReplicaId, c: Container, name: str, opts: LocalOptions) -> dict[str, str]:
    out: dict[str, str] = {}
    for env in c.env or []:
        if env.value is not None or env.valueFrom is None:
            out[env.name] = env.value or ""
            continue
        src = env.valueFrom
        if src.fieldRef is not None:
            fields = {
                "metadata.name": f"{job.name}-{rid.name}",
                "metadata.namespace": job.metadata.namespace or "default",
                "status.podIP": "127.0.0.1",
                "spec.nodeName": os.uname().nodename,
                "status.hostIP": "127.0.0.1",
            }
            if src.fieldRef.fieldPath not in fields:
                raise UserError(
                    f"{name}: env {env.name}: fieldRef {src.fieldRef.fieldPath!r} has no local value",
                    fix=f"use one of {sorted(fields)}, or a plain value",
                )
            out[env.name] = fields[src.fieldRef.fieldPath]
        elif src.configMapKeyRef is not None:
            ref = src.configMapKeyRef
            path = opts.configmaps.get(ref.name or "")
            # a key is a file name in the directory, never a path (validate() refuses one first)
            folder = Path(path) if path and Path(path).is_dir() else None
            file = folder / ref.key if folder is not None and config_key_problem(ref.key) is None else None
            if file is None or not file.is_file():
                raise UserError(
                    f"{name}: env {env.name}: configMap {ref.name!r} key {ref.key!r} is not available locally",
                    fix=f"pass --configmap {ref.name}=DIR where DIR holds a file named {ref.key}",
                )
            out[env.name] = file.read_text()
        else:
            raise UserError(
                f"{name}: env {env.name}: this kind of valueFrom has no local value",
                fix="use a plain value for local runs",
            )
    return out


def cluster_only_fields(pod: PodSpec) -> list[str]:
    names = [f for f in CLUSTER_ONLY_POD_FIELDS if getattr(pod, f) is not None]
    for c in pod.containers:
        names += [f"containers[{c.name}].{f}" for f in CLUSTER_ONLY_CONTAINER_FIELDS if getattr(c, f) is not None]
    return names


def warnings(job: TorchJob) -> list[str]:
    """What a local run ignores: named, never silently dropped."""
    out: list[str] = []
    for rtype, spec in job.spec.pytorchReplicaSpecs.items():
        pod = spec.template.spec
        ci = training_container(pod.containers)
        others = [c.name for i, c in enumerate(pod.containers) if i != ci]
        if others:
            out.append(f"{rtype}: containers {others} are not run locally (only the training container is)")
        if pod.initContainers:
            out.append(f"{rtype}: initContainers {[c.name for c in pod.initContainers]} are not run locally")
        c = pod.containers[ci]
        if not c.command and debug_command(job, rtype) is None:
            out.append(f"{rtype}: container {c.name!r} has no command: a local run needs one (on a cluster "
                       "the image's entrypoint runs); set command, e.g. command: [python, train.py]")
        ignored = cluster_only_fields(pod)
        if ignored:
            out.append(f"{rtype}: ignored locally: {', '.join(ignored)}")
    for s in job.spec.initializers or []:
        pod = s.template.spec
        ignored = [*cluster_only_fields(pod), *(f"containers[{c.name}]" for c in pod.containers[1:])]
        if ignored:  # its first container runs (render: _initializers)
            out.append(f"initializer {s.name}: ignored locally: {', '.join(ignored)}")
    nproc = ignored_nproc(job)
    if nproc is not None:
        out.append(nproc)
    rp = job.run_policy
    if rp.schedulingPolicy is not None:
        out.append("runPolicy.schedulingPolicy is ignored locally (there is no scheduler)")
    if job.spec.tensorboard is not None and job.spec.tensorboard.resources is not None:
        out.append("tensorboard.resources is ignored locally (TensorBoard runs as a plain process)")
    return out


def _refuse_or_note(notes: list[str] | None, err: UserError) -> None:
    """A run refuses what it cannot do; a dry run (`notes` given) says so and goes on."""
    if notes is None:
        raise err
    note = err.render().replace("\n    fix:", "; fix:")
    if note not in notes:
        notes.append(note)


def _no_command(rid: ReplicaId, c: Container) -> UserError:
    image = f" ({c.image})" if c.image else ""
    return UserError(
        f"{rid.rtype}: container {c.name!r} has no command: on a cluster its image's entrypoint{image} "
        "would run, but a local run has no image",
        fix="set command (and args), e.g. command: [python, train.py]",
    )


def _resolved_env(job: TorchJob, rid: ReplicaId, c: Container, ours: dict[str, str], defaults: dict[str, str],
                  opts: LocalOptions, notes: list[str] | None) -> dict[str, str]:
    """The replica's env as the kubelet would make it: the user's entries in place, ours upserted,
    valueFrom resolved locally, `$(VAR)` in values expanded from the entries before them."""
    try:
        resolved = _env_value(job, rid, c, rid.name, opts)
    except UserError as e:
        _refuse_or_note(notes, e)
        resolved = {env.name: _env_value_or_hole(job, rid, c, env.name, opts) for env in c.env or []}
    user = [(env.name, env.value or "" if env.valueFrom is None else None) for env in c.env or []]
    entries = [(name, resolved[name] if value is None else value, expand) for name, value, expand
               in merge_env(user, ours, defaults)]
    return expand_env(entries)


def _env_value_or_hole(job: TorchJob, rid: ReplicaId, c: Container, name: str, opts: LocalOptions) -> str:
    one = c.model_copy(update={"env": [e for e in c.env or [] if e.name == name]})
    try:
        return _env_value(job, rid, one, rid.name, opts)[name]
    except UserError:
        return "<not available locally>"


def render(
    job: TorchJob,
    where: Placement,
    opts: LocalOptions,
    job_dir: Path,
    gpus_available: list[str] | None = None,
    notes: list[str] | None = None,
) -> list[LaunchSpec]:
    """Every replica's launch. `notes` makes it a dry run: what only a run would refuse (no command,
    too few GPUs, a configMap or claim not given) is noted there instead."""
    rids = replicas(job)
    containers: dict[str, Container] = {}
    for rid in rids:
        pod = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec
        c = containers[rid.name] = pod.containers[training_container(pod.containers)]
        if not c.command and debug_command(job, rid.rtype) is None and notes is None:
            raise _no_command(rid, c)  # a dry run has it among `warnings`
    wants = {name: gpu_count(c) for name, c in containers.items()}
    uses_gpus = any(wants.values())
    slices: dict[str, list[str]] = {}
    if uses_gpus:
        try:
            slices = allocate_gpus(wants, available_gpus() if gpus_available is None else gpus_available)
        except UserError as e:
            _refuse_or_note(notes, e)

    specs: list[LaunchSpec] = []
    for rid in rids:
        pod = job.spec.pytorchReplicaSpecs[rid.rtype].template.spec
        c = containers[rid.name]
        # A dry run shows where the image's entrypoint would go (a run refused it above).
        head = c.command or [f"<the entrypoint of {c.image or 'the image'}>"]
        argv = [*head, *(c.args or [])]
        debug = debug_command(job, rid.rtype)
        renv = replica_env(job, rid, argv, where)
        ours = renv.env
        if debug is not None:
            argv = debug
        ours["TORCHJOB_JOB_UID"] = job.metadata.uid or ""
        defaults = dict(renv.defaults)
        if renv.torchrun and opts.grace_period_s is not None:  # --grace-period is the grace here
            defaults[SHUTDOWN_TIMEOUT_ENV] = shutdown_timeout(opts.grace_period_s)
        processes = local_processes(job, renv.torchrun)
        if processes is not None and processes > 1:
            # all of them share this machine's cores (also one-process replicas: `-j 2x1`, plain mode)
            defaults["OMP_NUM_THREADS"] = str(threads_per_process(processes))
        env = _resolved_env(job, rid, c, ours, defaults, opts, notes)
        if tags_ranks(job, renv.torchrun):
            env.update(ranktag.env(env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")))
        if warm_workers(job, renv.torchrun):  # its agent keeps a warm spare per worker (local/spares/workers.py)
            env["TORCHJOB_WARM_WORKERS"] = "1"
        argv = expand_argv(argv, env)  # what the kubelet does with $(VAR) in command and args
        if uses_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(slices.get(rid.name, []))
        if opts.resolve_python and is_shell(argv) and "PATH" not in env:
            # `python`/`torchrun` inside a shell script find torchjob's interpreter first, as at a
            # command's head.
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        cwd = c.workingDir or opts.cwd
        grace = opts.grace_period_s
        if grace is None:
            grace = float(pod.terminationGracePeriodSeconds) if pod.terminationGracePeriodSeconds is not None \
                else DEFAULT_GRACE_S
        try:
            mounts = mounts_for(job, rid, pod, c, opts, job_dir)
        except UserError as e:
            _refuse_or_note(notes, e)
            mounts = []
        specs.append(
            LaunchSpec(
                replica=rid,
                argv=resolve_argv(argv, opts.resolve_python, env.get("PATH", os.environ.get("PATH"))),
                env=env,
                cwd=cwd,
                mounts=mounts,
                gpus=slices.get(rid.name, []) if uses_gpus else None,
                grace_period_s=grace,
                torchrun=is_torchrun(argv),
            )
        )
    return [*_initializers(job, opts, job_dir, notes), *specs]


def _initializers(job: TorchJob, opts: LocalOptions, job_dir: Path, notes: list[str] | None) -> list[LaunchSpec]:
    """Each initializer step's launch (core/round/initializers.py), run before the replicas: its first
    container as one process (its command: the image is not used here), with its env as written
    (STORAGE_URI, ...) and its volumes mounted where it mounts them (the workspace: a directory)."""
    out = []
    for s in job.spec.initializers or []:
        rid, pod = step(s.name), s.template.spec
        c = pod.containers[0]
        if not c.command:
            _refuse_or_note(notes, _no_command(rid, c))
        argv = [*(c.command or [f"<the entrypoint of {c.image or 'the image'}>"]), *(c.args or [])]
        env = _resolved_env(job, rid, c, {}, {"PYTHONUNBUFFERED": "1"}, opts, notes)
        try:
            mounts = mounts_for(job, rid, pod, c, opts, job_dir)
        except UserError as e:
            _refuse_or_note(notes, e)
            mounts = []
        argv = resolve_argv(expand_argv(argv, env), opts.resolve_python, env.get("PATH", os.environ.get("PATH")))
        out.append(LaunchSpec(replica=rid, argv=argv, env=env, cwd=c.workingDir or opts.cwd, mounts=mounts))
    return out
