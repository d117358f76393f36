"""What a job's spec says, read one way for every layer (dialects' writers, core, the runtimes):
the master's port, whether a command starts torchrun, a replica type's Volcano task name."""

from __future__ import annotations

import os
import re

from torchjob.api.model import DEFAULT_PORT, MASTER, PORT_NAME, WORKER, Container, TorchJob
from torchjob.api.pod import training_container


def container_port(c: Container) -> int | None:
    for p in c.ports or []:
        if p.name == PORT_NAME:
            return p.containerPort
    return None


def master_port(job: TorchJob) -> int:
    """The port from the document (`pytorchjob-port` on the master's container, 23456 unset)."""
    rtype = MASTER if MASTER in job.spec.pytorchReplicaSpecs else WORKER
    pod = job.spec.pytorchReplicaSpecs[rtype].template.spec
    return container_port(pod.containers[training_container(pod.containers)]) or DEFAULT_PORT



LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
SHELLS = ("sh", "bash", "dash", "zsh", "ash")
# A launcher started from a shell script: `torchrun ...` (or `.../bin/torchrun`) or `python -m
# torch.distributed.run|launch`.
_SCRIPT_LAUNCHER = re.compile(r"(^|[\s;&|(`'\"])(\S*/bin/)?torchrun([\s;&|)`'\"]|$)"
                              r"|-m\s+torch\.distributed\.(run|launch)\b")


def _python_module(args: list[str]) -> str | None:
    """The module `python [options] -m MODULE` runs, read as Python reads its options: `-u -m x`,
    `-um x`, `-mx`, `-W ignore -m x` (-W and -X take a value); None for a script or `-c`."""
    i = 0
    while i < len(args) and args[i].startswith("-") and not args[i].startswith("--") and args[i] != "-":
        flags, i = args[i][1:], i + 1
        for k, flag in enumerate(flags):
            if flag in "mcWX":
                inline = flags[k + 1:]
                value = inline or (args[i] if i < len(args) else "")
                if flag == "m":
                    return value
                if flag == "c":
                    return None
                if not inline:
                    i += 1
                break
    return None


def is_torchrun(argv: list[str]) -> bool:
    """Whether the command starts a torch launcher (torchrun mode): `torchrun`, `python -m
    torch.distributed.run` or `.launch` (the launcher torchrun replaced, which reads the same
    `PET_*` variables), or a `sh -c`/`bash -c` script that runs one of them."""
    if not argv:
        return False
    head = os.path.basename(argv[0])
    if head == "torchrun":
        return True
    if head.startswith("python"):
        return _python_module(argv[1:]) in LAUNCHER_MODULES
    if head in SHELLS:
        flags = [a for a in argv[1:] if a.startswith("-")]
        script = next((a for a in argv[1:] if not a.startswith("-")), "")
        return any("c" in f for f in flags) and bool(_SCRIPT_LAUNCHER.search(script))
    return False


# Launchers that start a replica's processes themselves, by their own flags and config (not torchrun's
# PET_* variables): (the command's head, its subcommand or None).
OWN_LAUNCHERS = (("accelerate", "launch"), ("deepspeed", None), ("tune", "run"), ("lightning", "run"),
                 ("composer", None))


def own_launcher(argv: list[str]) -> str | None:
    """The launcher a command starts that decides its own process count (`accelerate launch`,
    `deepspeed`, `tune run`), as its words; None for torchrun, python or another command."""
    if not argv:
        return None
    head = os.path.basename(argv[0])
    for name, sub in OWN_LAUNCHERS:
        if head == name and (sub is None or argv[1:2] == [sub]):
            return f"{name} {sub}" if sub else name
    return None


def _commands(job: TorchJob) -> list[list[str]]:
    out = []
    for s in job.spec.pytorchReplicaSpecs.values():
        cs = s.template.spec.containers
        if cs:
            c = cs[training_container(cs)]
            out.append([*(c.command or []), *(c.args or [])])
    return out


def ignored_nproc(job: TorchJob) -> str | None:
    """Why the job's processes per replica (spec.nprocPerNode, elasticPolicy.nProcPerNode) are not
    used: no replica's command starts torchrun, the one that reads them. None when they are used or
    not set."""
    ep = job.spec.elasticPolicy
    field, value = (("spec.nprocPerNode", job.spec.nprocPerNode) if job.spec.nprocPerNode is not None
                    else ("spec.elasticPolicy.nProcPerNode", ep.nProcPerNode if ep else None))
    if value is None or str(value) == "1":
        return None
    commands = _commands(job)
    if any(is_torchrun(argv) for argv in commands):
        return None
    launchers = sorted({x for x in map(own_launcher, commands) if x})
    who = (f"{launchers[0]} starts each replica's processes by its own flags (e.g. --num_processes)"
           if launchers else "each replica runs its command as one process")
    return (f"{field}: {value} is ignored: no replica's command starts torchrun, which is what runs "
            f"{value} processes per replica; {who}; fix: start the command with torchrun "
            f"(command: [torchrun, train.py]), or remove {field}")


def volcano_task(job: TorchJob, rtype: str) -> str:
    names = job.spec.volcano.taskNames if job.spec.volcano and job.spec.volcano.taskNames else {}
    return names.get(rtype, rtype.lower())


def processes(job: TorchJob) -> tuple[str, int | None]:
    """(processes per replica, world size) as the spec says them: in torchrun mode (a replica's
    command starts torchrun) `spec.nprocPerNode`, else elasticPolicy's, else `auto`; otherwise 1
    (one process a replica), or the launcher that decides it (`accelerate launch`). The world size
    is the replicas times that, None while it is a word (`auto`, `gpu`, `cpu`: the node decides;
    a launcher's name). An elastic job's is at its current replica count."""
    specs = job.spec.pytorchReplicaSpecs
    replicas = sum(job.replica_count(t) for t in specs)
    commands = _commands(job)
    torchrun = any(is_torchrun(argv) for argv in commands)
    launcher = next((x for x in map(own_launcher, commands) if x), None)
    if launcher is not None and not torchrun:  # e.g. `accelerate launch`: its flags decide
        return launcher, None
    ep = job.spec.elasticPolicy
    per = "1"
    if torchrun:
        per = job.spec.nprocPerNode or (str(ep.nProcPerNode) if ep and ep.nProcPerNode is not None else "auto")
    return per, replicas * int(per) if per.isdigit() else None
