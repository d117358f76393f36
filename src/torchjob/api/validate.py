"""Checks a schema cannot express: counts, names, ports, reserved env vars, commands."""

from __future__ import annotations

import re
from collections.abc import Callable

from torchjob.api.duration import parse_duration
from torchjob.api.errors import Problem
from torchjob.api.model import (
    MASTER,
    PORT_NAME,
    REPLICA_TYPES,
    WORKER,
    LifecyclePolicy,
    TorchJob,
)
from torchjob.api.pod import training_container as training_container  # its home is api/pod.py
from torchjob.api.source import Document, problem_at
from torchjob.api.spec_facts import is_torchrun

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_LABEL = 63
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # a ConfigMap's or Secret's key (IsConfigMapKey)

# Set by torchjob for every replica; a user value would be silently wrong, so it is refused.
# (MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK are accepted, as Kubeflow accepts them, with a
# warning that says which value the replica gets: core.advice.)
RESERVED_ENV: dict[str, str] = {
    "LOCAL_RANK": "torchjob (or torchrun) assigns it",
    "LOCAL_WORLD_SIZE": "set spec.nprocPerNode instead",
    "PET_NNODES": "it follows from the replica counts and spec.elasticPolicy",
    "PET_NPROC_PER_NODE": "set spec.nprocPerNode instead",
    "PET_NODE_RANK": "it follows from the replica's type and index",
    "PET_MASTER_ADDR": "torchjob sets it to the master's address",
    "PET_MASTER_PORT": f"set the master container's port named {PORT_NAME} instead",
    "PET_RDZV_BACKEND": "set spec.elasticPolicy.rdzvBackend instead",
    "PET_RDZV_ENDPOINT": "set spec.elasticPolicy.rdzvHost and rdzvPort instead",
    "PET_RDZV_ID": "set spec.elasticPolicy.rdzvId instead",
    "PET_RDZV_CONF": "set spec.elasticPolicy.rdzvConf instead",
    "PET_MAX_RESTARTS": "set spec.elasticPolicy.maxRestarts instead",
    "PET_STANDALONE": "set spec.elasticPolicy.standalone instead",
    "TORCHELASTIC_ERROR_FILE": "torchjob points it at the replica's error file",
}
# Set only when spec.volcano asks for them (Volcano's env and svc plugins).
VOLCANO_ENV = ("VC_TASK_INDEX", "VK_TASK_INDEX")
RESERVED_PREFIX = "TORCHJOB_"

NPROC_WORDS = ("auto", "cpu", "gpu")

# Labels and annotations torchjob sets on a job's pods and reads back (which job, replica and attempt
# a pod is; which kind owns it; Kubeflow's labels, by which the PyTorchJob controller selects its
# pods; JobSet's, by which a TrainJob's are told): a template's own are dropped from its pods (as
# Kubeflow overrides them; core.advice says so), or a job's pods could count as another job's. A
# template may set the ones in USER_META (they are settings, not identities).
RESERVED_META_PREFIXES = ("torchjob.dev/", "training.kubeflow.org/", "jobset.sigs.k8s.io/")
USER_META = frozenset({"torchjob.dev/wait-for-master"})
SERVED_AS = "torchjob.dev/served-as"  # on a job: the foreign kind the operator read it from (never stored)


def reserved_meta(key: str) -> bool:
    """Whether a label or annotation of a pod template is torchjob's to set."""
    return key.startswith(RESERVED_META_PREFIXES) and key not in USER_META


def digits(text: str) -> bool:
    """Whether a text is a decimal number as Go's strconv and Kubernetes read one: ASCII digits only
    (`str.isdigit` also says yes to '²', which `int` then refuses)."""
    return text.isascii() and text.isdigit()


def config_key_problem(key: str) -> str | None:
    """What is wrong with a ConfigMap key, as the API server says it (validation.IsConfigMapKey):
    a file name, never a path."""
    if not CONFIG_KEY.match(key) or key in (".", ".."):
        return (f"{key!r} is not a valid key: letters, digits, '-', '_' and '.' only (a file name, not a path), "
                "and not '.' or '..'")
    return None


def local_path_problem(path: str) -> str | None:
    """What is wrong with a path that must stay inside a volume (a subPath, a configMap item's path),
    as the API server says it (validateLocalDescendingPath): relative, with no '..' element."""
    if not path:
        return "must not be empty"
    if path.startswith("/"):
        return f"{path!r} must be a relative path (inside the volume)"
    if ".." in path.split("/"):
        return f"{path!r} must not contain '..' (it would reach outside the volume)"
    return None


def max_name_length(job: TorchJob) -> int:
    """Longest job name whose derived names (`{name}-worker-{N}`) stay DNS labels."""
    longest_suffix = 0
    for rtype in REPLICA_TYPES:
        n = job.replica_count(rtype)
        if n > 0:
            longest_suffix = max(longest_suffix, len(f"-{rtype.lower()}-{n - 1}"))
    return MAX_LABEL - longest_suffix


def _runs_torchrun(job: TorchJob) -> bool:
    """Whether a replica runs torchrun, which restarts its workers itself (their spares are its agent's)."""
    for spec in job.spec.pytorchReplicaSpecs.values():
        c = spec.template.spec.containers[training_container(spec.template.spec.containers)]
        if is_torchrun([*(c.command or []), *(c.args or [])]):
            return True
    return False


def validate(job: TorchJob, doc: Document | None = None) -> list[Problem]:
    problems: list[Problem] = []

    def add(path: list[str | int], message: str, fix: str | None = None) -> None:
        problems.append(problem_at(doc, path, message, fix))

    specs = job.spec.pytorchReplicaSpecs
    base: list[str | int] = ["spec", "pytorchReplicaSpecs"]
    if not specs:
        add(base, "no replicas are defined", f"add a {MASTER} and/or {WORKER} entry")
    for key in specs:
        if key not in REPLICA_TYPES:
            add([*base, key], f"unknown replica type {key!r}", f"use {MASTER} or {WORKER}")

    master = specs.get(MASTER)
    if master is not None and master.replicas is not None and master.replicas != 1:
        add(
            [*base, MASTER, "replicas"],
            f"a job has exactly one master, got {master.replicas}",
            f"set it to 1 and put the other replicas under {WORKER}",
        )
    worker = specs.get(WORKER)
    if worker is not None and worker.replicas is not None and worker.replicas < 1:
        add(
            [*base, WORKER, "replicas"],
            f"must be at least 1, got {worker.replicas}",
            f"to run the master alone, remove the {WORKER} entry",
        )

    name = job.metadata.name
    if not DNS1035.match(name):
        add(
            ["metadata", "name"],
            f"{name!r} is not a DNS-1035 label (lower-case letters, digits and '-', starting with a "
            "letter and ending with a letter or digit)",
            f"for example {_suggest_name(name)!r}",
        )
    elif len(name) > max_name_length(job):
        add(
            ["metadata", "name"],
            f"{name!r} is {len(name)} characters; the replica names derived from it would exceed "
            f"{MAX_LABEL}, the limit of a pod or host name",
            f"use at most {max_name_length(job)} characters",
        )

    for rtype, rspec in specs.items():
        if rtype not in REPLICA_TYPES:
            continue
        path: list[str | int] = [*base, rtype, "template", "spec"]
        pod = rspec.template.spec
        if not pod.containers:
            add([*path, "containers"], "is empty: a replica runs its training container",
                "add it, e.g. containers: [{name: pytorch, image: IMAGE, command: [python, train.py]}]")
            continue
        volume_names = {v.name for v in pod.volumes or []}
        for vi, vol in enumerate(pod.volumes or []):
            if vol.source_kind() is None:
                add([*path, "volumes", vi], f"volume {vol.name!r} must have exactly one source", None)
            for ii, item in enumerate(vol.configMap.items or [] if vol.configMap is not None else []):
                ipath: list[str | int] = [*path, "volumes", vi, "configMap", "items", ii]
                for field_name, problem in (("key", config_key_problem(item.key)),
                                            ("path", local_path_problem(item.path))):
                    if problem:
                        add([*ipath, field_name], problem, None)
        for i, c in enumerate(pod.containers):
            cpath: list[str | int] = [*path, "containers", i]
            for p in c.ports or []:
                if not 1 <= p.containerPort <= 65535:
                    add([*cpath, "ports"], f"port {p.containerPort} is out of range", "use 1-65535")
            for ei, env in enumerate(c.env or []):
                vc = job.spec.volcano
                volcano_set = vc is not None and (
                    (vc.taskIndex and env.name in VOLCANO_ENV)
                    or (vc.hosts and env.name.startswith("VC_") and env.name.endswith(("_HOSTS", "_NUM")))
                )
                if env.name in RESERVED_ENV or env.name.startswith(RESERVED_PREFIX) or volcano_set:
                    reason = RESERVED_ENV.get(env.name, "torchjob sets it")
                    add(
                        [*cpath, "env", ei, "name"],
                        f"{env.name} is set by torchjob and cannot be set by hand",
                        f"remove it: {reason}",
                    )
                if env.value is not None and env.valueFrom is not None:
                    add([*cpath, "env", ei], f"{env.name} has both value and valueFrom", "keep one")
                for ref_name in ("configMapKeyRef", "secretKeyRef"):
                    ref = getattr(env.valueFrom, ref_name) if env.valueFrom is not None else None
                    problem = config_key_problem(ref.key) if ref is not None else None
                    if problem:
                        add([*cpath, "env", ei, "valueFrom", ref_name, "key"], problem, None)
            for mi, m in enumerate(c.volumeMounts or []):
                sub_problem = local_path_problem(m.subPath) if m.subPath else None  # "": no subPath
                if sub_problem:
                    add([*cpath, "volumeMounts", mi, "subPath"], sub_problem, None)
                if m.name not in volume_names:
                    add(
                        [*cpath, "volumeMounts", mi, "name"],
                        f"no volume named {m.name!r} in this pod",
                        f"add it under volumes, or use one of {sorted(volume_names)}" if volume_names else
                        "add it under volumes",
                    )
            seen: set[str] = set()
            for ei, env in enumerate(c.env or []):
                if env.name in seen:
                    add([*cpath, "env", ei, "name"], f"{env.name} is set twice", "keep one")
                seen.add(env.name)

    if any(not s.template.spec.containers for s in specs.values()):
        return problems  # what follows reads each replica's training container
    _validate_policies(job, add)

    rp = job.run_policy
    for fname in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit", "progressDeadlineSeconds",
                  "hangDeadlineSeconds"):
        value = getattr(rp, fname)
        if value is not None and value < 0:
            add(["spec", "runPolicy", fname], f"must not be negative, got {value}")
    if rp.activeDeadlineSeconds == 0:
        add(["spec", "runPolicy", "activeDeadlineSeconds"], "must be positive", "remove it for no deadline")
    if rp.progressDeadlineSeconds == 0:
        add(["spec", "runPolicy", "progressDeadlineSeconds"], "must be positive", "remove it for no stall detection")
    replicas_restart = rp.backoffLimit != 0 and any(
        job.restart_policy(t) != "Never" for t in job.spec.pytorchReplicaSpecs)
    ep = job.spec.elasticPolicy
    workers_restart = _runs_torchrun(job) and ep is not None and (ep.maxRestarts or 0) > 0
    if rp.warmSpares and not (replicas_restart or workers_restart):
        why = "backoffLimit is 0" if rp.backoffLimit == 0 else "every replica's restartPolicy is Never"
        add(["spec", "runPolicy", "warmSpares"], f"no replica of this job is ever restarted ({why}), nor a torchrun "
            "worker (elasticPolicy.maxRestarts), so a warm spare would never be used",
            "remove warmSpares, or let replicas restart (restartPolicy OnFailure and a backoffLimit over 0)")

    nproc = job.spec.nprocPerNode
    if nproc is not None and nproc not in NPROC_WORDS and not (digits(nproc) and int(nproc) >= 1):
        add(["spec", "nprocPerNode"], f"{nproc!r} is neither a positive integer nor one of {NPROC_WORDS}")

    ep = job.spec.elasticPolicy
    if ep is not None:
        epath: list[str | int] = ["spec", "elasticPolicy"]
        if worker is None:
            add(epath, f"an elastic job needs a {WORKER} replica spec", f"add {WORKER} or remove elasticPolicy")
        if ep.minReplicas is not None and ep.minReplicas < 1:
            add([*epath, "minReplicas"], f"must be at least 1, got {ep.minReplicas}")
        if ep.minReplicas is not None and ep.maxReplicas is not None and ep.minReplicas > ep.maxReplicas:
            add(epath, f"minReplicas ({ep.minReplicas}) is greater than maxReplicas ({ep.maxReplicas})")
        if ep.rdzvPort is not None and not 1 <= ep.rdzvPort <= 65535:
            add([*epath, "rdzvPort"], f"port {ep.rdzvPort} is out of range", "use 1-65535")
        if ep.nProcPerNode is not None and nproc is not None:
            add(
                [*epath, "nProcPerNode"],
                "set together with spec.nprocPerNode",
                "remove elasticPolicy.nProcPerNode (deprecated)",
            )
        if ep.maxRestarts is not None and ep.maxRestarts < 0:
            add([*epath, "maxRestarts"], f"must not be negative, got {ep.maxRestarts}")
    return problems


def _validate_policies(job: TorchJob, add: Callable[[list[str | int], str, str | None], None]) -> None:
    base: list[str | int] = ["spec", "pytorchReplicaSpecs"]
    places: list[tuple[list[str | int], list[LifecyclePolicy]]] = [(["spec", "policies"], job.spec.policies or [])]
    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        places.append(([*base, rtype, "policies"], rspec.policies or []))
        if rspec.maxRestarts is not None and rspec.maxRestarts < 0:
            add([*base, rtype, "maxRestarts"], f"must not be negative, got {rspec.maxRestarts}", None)
        if rspec.dependsOn is not None:
            for dep in rspec.dependsOn.name:
                if dep not in job.spec.pytorchReplicaSpecs or dep == rtype:
                    add([*base, rtype, "dependsOn", "name"], f"{dep!r} is not another replica type of this job",
                        f"use one of {sorted(set(job.spec.pytorchReplicaSpecs) - {rtype})}")
    deps = {t: set(s.dependsOn.name) if s.dependsOn else set() for t, s in job.spec.pytorchReplicaSpecs.items()}
    if any(t in deps.get(d, set()) for t, ds in deps.items() for d in ds):
        add([*base], "dependsOn forms a cycle: no replica could ever start", "remove one of the dependencies")
    for path, policies in places:
        seen: set[str] = set()
        for i, pol in enumerate(policies):
            here = [*path, i]
            events = pol.event_names()
            if pol.exitCode is not None and events:
                add(here, "has both an event and an exitCode", "a policy reacts to one or the other: split it in two")
            elif pol.exitCode is None and not events:
                add(here, "has neither an event nor an exitCode", "add event: PodFailed (for example) or exitCode: N")
            if pol.exitCode == 0:
                add([*here, "exitCode"], "0 is success, not a failure to react to", "use a non-zero code")
            if "*" in events and len(events) > 1:
                add(here, "'*' must be the only event of its policy", "remove the other events")
            if "Stalled" in events and job.run_policy.progressDeadlineSeconds is None:
                add(here, "reacts to Stalled, which needs runPolicy.progressDeadlineSeconds",
                    "set spec.runPolicy.progressDeadlineSeconds (e.g. 600) to say how long without a progress "
                    "report is a stall")
            keys = [f"exit:{pol.exitCode}"] if pol.exitCode is not None else events
            for key in keys:
                if key in seen:
                    add(here, f"{key.replace('exit:', 'exitCode ')} appears in two policies here", "keep one")
                seen.add(key)
            if pol.timeout is not None:
                try:
                    parse_duration(pol.timeout)
                except ValueError as e:
                    add([*here, "timeout"], str(e), None)
    if job.spec.minSuccess is not None:
        total = sum(job.replica_count(t) for t in job.spec.pytorchReplicaSpecs)
        if not 1 <= job.spec.minSuccess <= total:
            add(["spec", "minSuccess"], f"must be between 1 and the job's {total} replicas, got {job.spec.minSuccess}",
                None)
    debug = job.spec.runMode.debug if job.spec.runMode else None
    for i, d in enumerate(debug.replicaSpecs or [] if debug else []):
        if d.type.capitalize() not in job.spec.pytorchReplicaSpecs:
            add(["spec", "runMode", "debug", "replicaSpecs", i, "type"],
                f"{d.type!r} is not a replica type of this job",
                f"use one of {[t.lower() for t in job.spec.pytorchReplicaSpecs]}")


def _suggest_name(name: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not s or not s[0].isalpha():
        s = "job-" + s
    return s[:MAX_LABEL].rstrip("-") or "my-job"
