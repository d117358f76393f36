"""Warnings about a valid job: what it asks that torchjob does differently, said before it runs. Pure.

- An env entry that sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK: Kubeflow accepts it (the
  operator's own entry comes after the user's, and the later entry wins) and so does torchjob; the
  warning says which value the replica gets.
- A `$(VAR)` in command, args or an env value that the container's env does not define (or defines
  only later): the kubelet leaves it as written, and so does torchjob.
- A pod template's `hostname` or `subdomain`: on Kubernetes every pod gets its own name as its
  hostname and the job's headless Service as its subdomain (the names the replicas are told resolve
  by), so what the user wrote is replaced; said, with what the pod gets.
- A template's label or annotation that torchjob sets itself (`torchjob.dev/*`,
  `training.kubeflow.org/*`: which job, replica and attempt a pod is), or a job's
  `torchjob.dev/served-as`: dropped, so that a job's pods never count as another job's; said.
"""

from __future__ import annotations

from torchjob.api.model import MASTER, TorchJob
from torchjob.api.source import Document
from torchjob.api.spec_facts import is_torchrun, master_port
from torchjob.api.validate import SERVED_AS, reserved_meta, training_container
from torchjob.core.shape.expand import references
from torchjob.core.shape.topology import (
    Placement,
    ReplicaId,
    elastic_bounds,
    node_rank,
    replica_env,
    replicas,
    world_size,
)

Path = list[str | int]
OVERRIDDEN = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
ALWAYS_SET = ("PYTHONUNBUFFERED", "TORCHJOB_JOB_UID", "TORCHELASTIC_ERROR_FILE")
KUBEFLOW_OPERATOR = "kubeflow.org/training-operator"  # Kubeflow's default: its own operator, here torchjob's


def _ranks(job: TorchJob, rtype: str) -> str:
    ranks = [node_rank(job, r) for r in replicas(job) if r.rtype == rtype]
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}..{ranks[-1]}"


def _what_it_gets(job: TorchJob, rtype: str, name: str, torchrun: bool) -> str:
    first = f"{job.name}-{'master' if MASTER in job.spec.pytorchReplicaSpecs else 'worker'}-0.{job.name}"
    if name == "MASTER_ADDR":
        return f"torchjob's: the master's address (127.0.0.1 locally, {first} on Kubernetes)"
    if name == "MASTER_PORT":
        return (f"torchjob's: the master's port ({master_port(job)} on Kubernetes and with --document-ports, "
                "else a free port picked per local run)")
    if torchrun and (name == "WORLD_SIZE" or elastic_bounds(job) is not None):
        return "yours in the launcher's env only: torchrun sets it for every process it starts"
    if name == "WORLD_SIZE":
        return f"torchjob's: the job's {world_size(job, 1)} processes"
    return f"torchjob's: its rank ({_ranks(job, rtype)})" + (", the node's; torchrun gives each process its own"
                                                              if torchrun else "")


def advisories(job: TorchJob) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    # Kubeflow fields torchjob accepts and does not act on, on any runtime: said, never dropped silently.
    if job.spec.elasticPolicy is not None and job.spec.elasticPolicy.metrics:
        out.append((["spec", "elasticPolicy", "metrics"],
                    "ignored: torchjob makes no HorizontalPodAutoscaler (a running job is not rescaled)"))
    if job.run_policy.managedBy not in (None, KUBEFLOW_OPERATOR):
        out.append((["spec", "runPolicy", "managedBy"], f"{job.run_policy.managedBy!r} is ignored: torchjob's "
                    "operator runs the job (it hands none to another controller)"))
    if SERVED_AS in (job.metadata.annotations or {}):
        out.append((["metadata", "annotations", SERVED_AS], "ignored: the operator sets it on the jobs of the "
                    "foreign kinds it serves; a TorchJob's pods are the TorchJob's"))
    where = Placement("127.0.0.1", master_port(job), "127.0.0.1", master_port(job))
    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        pod = rspec.template.spec
        out += _pod_names(job, rtype)
        tmeta = rspec.template.metadata
        for field_name in ("labels", "annotations"):
            for key in sorted(getattr(tmeta, field_name) or {}) if tmeta is not None else []:
                if reserved_meta(key):
                    out.append((["spec", "pytorchReplicaSpecs", rtype, "template", "metadata", field_name, key],
                                "dropped from the pods: torchjob sets its own labels and annotations there (which "
                                "job, replica and attempt a pod is), so that no job's pods count as another's"))
        if not pod.containers:
            continue
        ci = training_container(pod.containers)
        c = pod.containers[ci]
        base: Path = ["spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers", ci]
        argv = [*(c.command or []), *(c.args or [])]
        torchrun = is_torchrun(argv)
        ours = replica_env(job, ReplicaId(rtype, 0), argv, where).env
        defined: list[str] = []
        for ei, env in enumerate(c.env or []):
            if env.name in OVERRIDDEN:
                out.append(([*base, "env", ei, "name"],
                            f"{env.name} is set by torchjob too (as by Kubeflow, whose entry comes after yours and "
                            f"wins); the replica gets {_what_it_gets(job, rtype, env.name, torchrun)}"))
            for name in references(env.value or "") if env.valueFrom is None else []:
                if name not in defined:
                    out.append(([*base, "env", ei, "value"], _unexpanded(name, "no env entry before this one")))
            defined.append(env.name)
        known = {*defined, *ours, *ALWAYS_SET}
        for field in ("command", "args"):
            for ai, arg in enumerate(getattr(c, field) or []):
                for name in references(arg):
                    if name not in known:
                        hint = (" (torchrun sets it for the processes it starts; the launcher has PET_* instead)"
                                if torchrun and name in ("WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") else "")
                        why = f"this container's env does not set it{hint}"
                        out.append(([*base, field, ai], _unexpanded(name, why)))
    return out


def _pod_names(job: TorchJob, rtype: str) -> list[tuple[Path, str]]:
    """hostname/subdomain a user wrote, which the Kubernetes pods do not keep (kube.render sets them)."""
    pod = job.spec.pytorchReplicaSpecs[rtype].template.spec
    base: Path = ["spec", "pytorchReplicaSpecs", rtype, "template", "spec"]
    names = [f"{job.name}-{r.name}" for r in replicas(job) if r.rtype == rtype]
    out: list[tuple[Path, str]] = []
    if pod.hostname is not None and names and names != [pod.hostname]:
        gets = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        out.append(([*base, "hostname"], f"{pod.hostname!r} is replaced on Kubernetes: each pod's hostname is its "
                    f"own name ({gets}), by which the replicas reach it through the job's headless Service "
                    "(ignored locally)"))
    if pod.subdomain is not None and pod.subdomain != job.name:
        out.append(([*base, "subdomain"], f"{pod.subdomain!r} is replaced on Kubernetes by {job.name!r}, the job's "
                    "headless Service, through which every replica's host name resolves (ignored locally)"))
    return out


def _unexpanded(name: str, why: str) -> str:
    return f"$({name}) stays as written: {why} (the kubelet leaves such a reference as it is)"


def advise(job: TorchJob, doc: Document | None) -> list[str]:
    """What torchjob does differently from what the job asks, as notes that point at the lines of the
    document it was read from (where there is one)."""
    notes = []
    for path, message in advisories(job):
        own = doc.translate(list(path)) if doc else list(path)
        where = ".".join(f"[{p}]" if isinstance(p, int) else p for p in own).replace(".[", "[")
        line = doc.line_of(own) if doc else None
        notes.append(f"{doc.source}:{line}: {where}: {message}" if doc and line else f"{where}: {message}")
    return notes
