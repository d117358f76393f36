"""Warm spares: which replica gets one, and what a spare can stand in for (pure decisions).

A warm spare is a process started ahead of need for a replica that can be restarted: its interpreter
up and `torch` imported, its environment the replica's except what only a new attempt knows. When
the replica's attempt ends and core restarts it, the spare becomes the new attempt instead of a new
process (local/spares/spare.py carries it out). A spare can only stand in for a command that Python runs
itself, `python SCRIPT ARGS...` or `python -m MODULE ARGS...` (torchrun, which the local runtime runs
as `python -m torchjob.local.start.loopback_torchrun`, is such a module: its agent is what the spare
shortens; the agent's own workers still start as new processes), with interpreter options that the
spare can be started with as well. On a cluster the same spare runs inside the pod and the pod's next
attempt starts in it, in place (`in_place_reason`; kube/inpod/torchjob_inplace.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is also imported by torchrun's agent (local/spares/workers.py): kept light
    from torchjob.api.model import TorchJob

# Interpreter options a spare is started with unchanged (they mean the same for the spare's
# interpreter); any other option (-c, -I, -E, -s, -S, -P, -i, -x, combined letters) means no spare.
FLAG_OPTIONS = frozenset({"-u", "-O", "-OO", "-B", "-b", "-bb", "-q", "-v", "-vv", "-d", "-R"})
VALUE_OPTIONS = frozenset({"-W", "-X"})


@dataclass(frozen=True)
class PythonEntry:
    """`python [options] SCRIPT args` or `python [options] -m MODULE args`, taken apart."""

    options: tuple[str, ...]
    script: str | None
    module: str | None
    args: tuple[str, ...]

    @property
    def target(self) -> tuple[str, ...]:
        """What follows the options: what a spare's own command line carries after its launcher."""
        head = ("-m", self.module) if self.module is not None else (str(self.script),)
        return (*head, *self.args)


def python_entry(argv: list[str], python: str) -> PythonEntry | None:
    """`argv` taken apart when its head is the interpreter `python` (the one spares run under) and
    the rest is a script or a module with options a spare can share; else None."""
    if len(argv) < 2 or argv[0] != python:
        return None
    options: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            if i + 1 >= len(argv) or not argv[i + 1]:
                return None
            return PythonEntry(tuple(options), None, argv[i + 1], tuple(argv[i + 2:]))
        if a.startswith("-m"):  # -mMODULE
            return PythonEntry(tuple(options), None, a[2:], tuple(argv[i + 1:]))
        if a in FLAG_OPTIONS:
            options.append(a)
        elif a in VALUE_OPTIONS:
            if i + 1 >= len(argv):
                return None
            options += [a, argv[i + 1]]
            i += 1
        elif a[:2] in VALUE_OPTIONS and len(a) > 2:
            options.append(a)
        elif a.startswith("-") or a.endswith(".pyc"):  # -c, -I, -, --, combined letters...: not one a spare shares
            return None
        else:
            return PythonEntry(tuple(options), a, None, tuple(argv[i + 1:]))
        i += 1
    return None


NOT_ASKED = "runPolicy.warmSpares is not set"


def never_restarted(job: TorchJob, rtype: str) -> str | None:
    """Why a replica of type `rtype` is never restarted, if it is not (None: it may be)."""
    if job.run_policy.backoffLimit == 0:
        return "runPolicy.backoffLimit is 0: no replica is ever restarted"
    if job.restart_policy(rtype) == "Never" and not _restarted_by_policy(job, rtype):
        return f"{rtype}'s restartPolicy is Never: it is never restarted"
    return None


def no_spare_reason(job: TorchJob, rtype: str, entry: PythonEntry | None) -> str | None:
    """Why a replica of type `rtype` gets no warm spare (None: it gets one)."""
    if not job.run_policy.warmSpares:
        return NOT_ASKED
    if (never := never_restarted(job, rtype)) is not None:
        return never
    if entry is None:
        return (f"{rtype}'s command is not `python SCRIPT` or `python -m MODULE` (nor torchrun): a spare can only "
                "stand in for a command Python runs itself")
    return None


def _restarted_by_policy(job: TorchJob, rtype: str) -> bool:
    """Whether a lifecycle policy of the job or of the replica type restarts something (RestartJob,
    RestartTask, RestartPod): a replica whose restartPolicy is Never is restarted then too."""
    own = job.spec.pytorchReplicaSpecs[rtype].policies or []
    return any(p.action in ("RestartJob", "RestartTask", "RestartPod") for p in [*(job.spec.policies or []), *own])


# A Python interpreter as a pod's command names it: `python`, `python3`, `/usr/bin/python3.11`.
PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
NO_ENDPOINT = ("the operator runs without its progress endpoint, the channel over which a pod's restart in place "
               "is reported and decided")


def in_pod_entry(argv: list[str]) -> PythonEntry | None:
    """A pod's command taken apart (python_entry) when its head names a Python interpreter."""
    if not argv or not PYTHON_NAME.match(argv[0].rsplit("/", 1)[-1]):
        return None
    return python_entry(argv, argv[0])


def in_place_reason(job: TorchJob, rtype: str, argv: list[str], torchrun: bool, endpoint: bool = True) -> str | None:
    """Why a replica's pods on a cluster restart as new pods, not in place with a warm spare (None: in
    place). In place, the pod's entry point (kube/inpod/torchjob_inplace.py) runs the command, keeps a
    spare, reports a failed attempt to the operator's endpoint (`endpoint`) and runs the next attempt
    in the same pod when the operator says so."""
    if torchrun:  # a command Python runs, but its agent's spare would shorten only the agent's own start
        return (NOT_ASKED if not job.run_policy.warmSpares else None) or never_restarted(job, rtype) or (
            f"{rtype} runs torchrun, which restarts its own workers (--max-restarts); its pod restarts as a new pod")
    reason = no_spare_reason(job, rtype, in_pod_entry(argv))
    if reason is not None:
        return reason
    if not endpoint:
        return NO_ENDPOINT
    return None


def on_a_cluster(job: TorchJob, endpoint: bool = True) -> str | None:
    """What a cluster does not do of what `job` asks of warm spares (None: every replica that can restart
    restarts in place): said, never refused (the same document keeps its spares locally)."""
    from torchjob.api.pod import training_container
    from torchjob.api.spec_facts import is_torchrun

    if not job.run_policy.warmSpares:
        return None
    told = []
    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        if never_restarted(job, rtype) is not None:
            continue  # never restarted: nothing to stand in for
        containers = rspec.template.spec.containers
        c = containers[training_container(containers)]
        argv = [*(c.command or []), *(c.args or [])]
        reason = in_place_reason(job, rtype, argv, is_torchrun(argv), endpoint)
        if reason is not None:
            told.append(f"{rtype}: {reason}")
    if not told:
        return None
    return ("runPolicy.warmSpares: on a cluster these replicas restart as new pods, not in place with a warm spare: "
            + "; ".join(told) + " (see docs/explanation/faults.md)")


def warm_workers(job: TorchJob, torchrun: bool) -> bool:
    """Whether a replica that runs torchrun has its agent keep a warm spare per local rank (torchrun
    restarts its workers itself: a spare of the replica shortens only the agent's own restart)."""
    return bool(job.run_policy.warmSpares) and torchrun


def spare_still_useful(job: TorchJob, restarting: bool = False) -> bool:
    """Whether spares are still worth keeping: a restart is under way (`restarting`: some replica has
    no running attempt; the restart that spent the last of backoffLimit is counted before its replicas
    start), or the job may restart a replica again (backoffLimit not spent)."""
    limit = job.run_policy.backoffLimit
    done = job.status.restartCount if job.status is not None else 0
    return restarting or limit is None or done < limit
