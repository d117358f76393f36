"""Kubeflow Trainer v2 `trainer.kubeflow.org/v1alpha1` `TrainJob` <-> `TorchJob`.

A TrainJob names a runtime (`runtimeRef`: the upstream `torch-distributed` ClusterTrainingRuntime
is known; others come with `--runtime FILE` or as another document in the same file) and fills
its trainer: `numNodes` nodes (node 0 is the master, the rest workers: one template), each running
the `node` container with the trainer's `image`, `command`, `args`, `env` and `resourcesPerNode`.
The env is Trainer's torch plugin's: `PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK`,
`PET_MASTER_ADDR`, `PET_MASTER_PORT` (29500); `numProcPerNode` unset is the runtime's (Trainer
v2.0/v2.1), else `auto`: kept with GPUs, else the CPUs requested (at least 1), as Trainer decides it;
Trainer v2.0/v2.1's `auto`, `cpu` and `gpu` strings are read as it read them. A static TrainJob
succeeds when every node has succeeded (JobSet's success: each node's Job completed), which the
TorchJob it becomes says with `minSuccess: numNodes`; an elastic one (`torchjob.dev/nodes`) as any
elastic job: when a node's torchrun agent exits 0 (the agents of one rendezvous end together).
The runtime's dataset and model initializer jobs become the job's `initializers`, which run to
completion before the nodes; `spec.initializer.dataset` and `.model` fill them as Trainer's jobset
plugin does (builder.go `Initializer`): in the container named `dataset-initializer` (or
`model-initializer`) the env `STORAGE_URI` and the given env are upserted, and the `secretRef` is
added as an `envFrom`. The runtime's volumeClaimPolicies become the job's `volumeClaims` and its pods'
volumes, as JobSet makes and mounts them (dialects/volume_claims.py). Facts from kubeflow/trainer @8c0f505 and v2.1.0.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from typing import Any

from torchjob.api.load import job_from_data
from torchjob.api.model import API_VERSION as NATIVE_API
from torchjob.api.model import KIND as NATIVE_KIND
from torchjob.api.model import MASTER, PORT_NAME, WORKER
from torchjob.api.source import Document
from torchjob.api.validate import digits
from torchjob.dialects import Converted, Notes, trainer_runtime, volume_claims
from torchjob.dialects.patches import apply_patches, write_patches
from torchjob.dialects.trainer_runtime import JOB_BACKOFF_DEFAULT

API_VERSION = trainer_runtime.API_VERSION
KIND = "TrainJob"
TRAINER_PORT = 29500  # Trainer's PET_MASTER_PORT
CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
SPEC_FIELDS = {"runtimeRef", "initializer", "trainer", "runtimePatches", "suspend", "activeDeadlineSeconds",
               "managedBy"}
TRAINER_FIELDS = {"image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"}
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
# torchjob's, on a TrainJob (Trainer has neither: elastic TrainJobs are its open KEP-2903)
NODES_ANNOTATION = "torchjob.dev/nodes"  # "MIN:MAX": an elastic job of MIN to MAX nodes (c10d rendezvous)
PROGRESS_DEADLINE_ANNOTATION = "torchjob.dev/progress-deadline-seconds"  # a stall fails the job
# Trainer v2.0/v2.1's TrainJob fields that v2.2 replaced with runtimePatches (kubeflow/trainer #3309).
REPLACED_BY_PATCHES = ("podTemplateOverrides", "labels", "annotations")
Path = list[str | int]
INITIALIZER_FIELDS = {"storageUri", "env", "secretRef"}
STORAGE_URI = "STORAGE_URI"  # what Trainer's initializers read (pkg/initializers/utils STORAGE_URI_ENV)
URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")  # a storageUri, as Trainer's CRD rule has it
# The Kubeflow SDK's BuiltinTrainer(TorchTuneConfig) writes this command and its config as args; Trainer's
# controller completes it with a recipe, a config and the runtime's overrides (plugins/torch/torchtune.go)
TORCHTUNE_ENTRYPOINT = ["tune", "run"]
# The env Trainer's torch plugin sets in the node container; its webhook refuses a TrainJob that sets
# one (torch.go's Validate): what to write instead.
RESERVED_ENV = {
    "PET_NNODES": "set spec.trainer.numNodes",
    "PET_NPROC_PER_NODE": "set spec.trainer.numProcPerNode",
    "PET_NODE_RANK": "remove it: each node gets its index",
    "PET_MASTER_ADDR": "remove it: it is node 0's address",
    "PET_MASTER_PORT": f"remove it: the master port is {TRAINER_PORT}",
}


def _quantity(value: object) -> int:
    """A quantity rounded up, as Kubernetes' Quantity.Value() does ("500m" -> 1)."""
    text = str(value)
    try:
        return math.ceil(float(text[:-1]) / 1000) if text.endswith("m") else math.ceil(float(text))
    except ValueError:
        return 0


def _count(resources: dict[str, Any], wanted: Callable[[str], bool]) -> int:
    """The requested amount of a resource, else its limit (Trainer's GetNumGPUPerNode, getNumCPUPerNode)."""
    for group in (resources.get("requests"), resources.get("limits")):
        if isinstance(group, dict):
            amount = next((_quantity(v) for k, v in group.items() if wanted(str(k))), 0)
            if amount > 0:
                return amount
    return 0


def nproc(resources: dict[str, Any], given: int | str | None, runtime_default: str | None = None) -> str:
    """Trainer's numProcPerNode (torch.go's EnforceMLPolicy, v2.1 and later): the TrainJob's, else the
    runtime's (v2.0/v2.1), else `auto`. `auto` without GPUs, and `cpu`, become the CPUs requested (or
    limited), at least 1; `auto` with GPUs and `gpu` stay (torchrun: one per GPU); a number stays."""
    value = str(given) if given is not None else runtime_default or "auto"
    if value == "cpu" or (value == "auto" and _count(resources, lambda k: "gpu" in k.lower()) == 0):
        return str(max(1, _count(resources, lambda k: k == "cpu")))
    return value


def _runtime(doc: Document, notes: Notes, spec: dict[str, Any]) -> trainer_runtime.Runtime | None:
    path: Path = ["spec", "runtimeRef"]
    ref = notes.section(spec, "runtimeRef", ["spec"])
    notes.unknown(ref, {"name", "kind", "apiGroup"}, path)
    name = notes.typed(ref, "name", path, str, "a runtime's name")
    kind = ref.get("kind", trainer_runtime.KINDS[0])
    if kind not in trainer_runtime.KINDS:
        notes.error([*path, "kind"], f"{kind!r} is not a training runtime", f"use one of {list(trainer_runtime.KINDS)}")
    if ref.get("apiGroup", "trainer.kubeflow.org") != "trainer.kubeflow.org":
        notes.error([*path, "apiGroup"], f"{ref.get('apiGroup')!r} is not Kubeflow Trainer's",
                    "use trainer.kubeflow.org")
    if not name:
        notes.error(path, "names no runtime", "e.g. runtimeRef: {name: torch-distributed}")
    if notes.errors:
        return None
    found = trainer_runtime.find(str(kind), str(name), doc.companions)
    if found is None:
        notes.error([*path, "name"], f"{kind} {name!r} is not known here (torchjob knows torch-distributed)",
                    "pass --runtime FILE with its YAML (kubectl get clustertrainingruntime NAME -o yaml), or put "
                    "it in this file after a --- line")
        return None
    rt = trainer_runtime.read(found)
    job_ns = (doc.data.get("metadata") or {}).get("namespace") if isinstance(doc.data.get("metadata"), dict) else None
    rt_ns = (found.data.get("metadata") or {}).get("namespace")
    if kind == "TrainingRuntime" and job_ns and rt_ns and job_ns != rt_ns:
        notes.error([*path, "name"], f"TrainingRuntime {name!r} is in namespace {rt_ns!r}, the TrainJob in "
                    f"{job_ns!r}", "a namespaced runtime serves TrainJobs of its own namespace")
    notes.warnings += rt.warnings
    return rt


def _env_key(entry: dict[str, Any], fallback: str) -> str:
    name = entry.get("name")
    return name if isinstance(name, str) else fallback


def _node(notes: Notes, trainer: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The runtime's node container with the trainer's fields on it (env upserted by name)."""
    path: Path = ["spec", "trainer"]
    c: dict[str, Any] = pod["spec"]["containers"][0]
    for key in ("image",):
        if notes.typed(trainer, key, path, str, "a string"):
            c[key] = trainer[key]
    for key in ("command", "args"):
        if key in trainer:
            c[key] = notes.strings(trainer, key, path)
    if trainer.get("command") == TORCHTUNE_ENTRYPOINT:
        notes.error([*path, "command"], "`tune run` alone is the Kubeflow SDK's BuiltinTrainer(TorchTuneConfig), "
                    "which Kubeflow Trainer's controller completes with a recipe, a config and the runtime's "
                    "overrides; torchjob does not (not served)",
                    "use CustomTrainer(func) on the runtime, write the whole command (e.g. the runtime's own: tune "
                    "run --rdzv_endpoint=localhost:29500 full_finetune_distributed --config llama3_2/1B_full ...), "
                    "or leave spec.trainer.command unset to run the runtime's")
    # Keyed by name; an entry whose name is not a string keeps a key of its own, for the model to refuse.
    own = c.get("env")  # not a list: left as it is, for the model to refuse naming the runtime's field
    env = {_env_key(e, f"<runtime env {i}>"): e for i, e in enumerate(own if isinstance(own, list) else [])
           if isinstance(e, dict)}
    for i, e in notes.items(trainer, "env", path):
        if isinstance(e.get("name"), str) and e["name"] in RESERVED_ENV:
            notes.error([*path, "env", i, "name"], f"{e['name']} is set by the TrainJob's torch runtime (Trainer "
                        "refuses it too)", RESERVED_ENV[str(e["name"])])
        env[_env_key(e, f"<env {i}>")] = e
    if env and (own is None or isinstance(own, list)):
        c["env"] = list(env.values())
    resources = notes.typed(trainer, "resourcesPerNode", path, dict, "a mapping (requests, limits)")
    if resources is not None:
        c["resources"] = copy.deepcopy(resources)
    ports = c.setdefault("ports", [])
    if isinstance(ports, list) and not any(isinstance(p, dict) and p.get("name") == PORT_NAME for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": TRAINER_PORT})
    return c


def _initializers(notes: Notes, init: dict[str, Any], rt: trainer_runtime.Runtime) -> list[dict[str, Any]]:
    """The runtime's initializer jobs as native initializers, with spec.initializer's dataset and model
    on them as Trainer puts them (its webhook's refusals too: a runtime without the job, a job without
    the container)."""
    jobs = {j.ancestor: j for j in rt.initializers}
    steps = []
    for key, ancestor in zip(("dataset", "model"), trainer_runtime.INITIALIZERS, strict=True):
        path: Path = ["spec", "initializer", key]
        given = notes.section(init, key, ["spec", "initializer"]) if init.get(key) is not None else {}
        notes.unknown(given, INITIALIZER_FIELDS, path)
        job = jobs.get(ancestor)
        if job is None:
            if given:
                notes.error(path, f"runtime {rt.name!r} has no {ancestor} job to run it (Trainer refuses it too)",
                            f"use a runtime with a job labelled {trainer_runtime.ANCESTOR}: {ancestor}, or remove "
                            f"spec.initializer.{key}")
            continue
        pod = copy.deepcopy(job.pod_template)
        containers = (pod.get("spec") or {}).get("containers") or []
        c = next((c for c in containers if isinstance(c, dict) and c.get("name") == ancestor), None)
        if given and c is None:
            notes.error(path, f"runtime {rt.name!r}'s {job.name} job has no container named {ancestor!r} (Trainer "
                        "refuses it too)", f"name the initializer's container {ancestor}")
        elif given and c is not None:
            env = {_env_key(e, f"<runtime env {i}>"): e for i, e in enumerate(c.get("env") or [])
                   if isinstance(e, dict)}
            uri = notes.typed(given, "storageUri", path, str, "a URI, e.g. hf://org/name")
            if uri and not URI.match(uri):  # as Trainer's CRD refuses it (kubeflow/trainer#3510)
                notes.error([*path, "storageUri"], f"{uri!r} is not a URI (scheme://...)",
                            "write it with its scheme, e.g. hf://tatsu-lab/alpaca or s3://bucket/path")
            if uri:
                env[STORAGE_URI] = {"name": STORAGE_URI, "value": uri}
            for i, e in notes.items(given, "env", path):
                env[_env_key(e, f"<env {i}>")] = e
            c["env"] = list(env.values())
            ref = notes.typed(given, "secretRef", path, dict, "a mapping, e.g. {name: hub-token}")
            if ref:
                c["envFrom"] = [*(c.get("envFrom") or []), {"secretRef": {"name": ref.get("name")}}]
        steps.append({"name": job.name, "template": pod, "backoffLimit": job.backoff_limit})
    return steps


def _annotation(annotations: Any, key: str) -> str | None:
    value = annotations.get(key) if isinstance(annotations, dict) else None
    return None if value is None else str(value)


def _elastic_nodes(notes: Notes, annotations: Any, count: int) -> tuple[int, int] | None:
    """The annotation `torchjob.dev/nodes: MIN:MAX`: (MIN, MAX), numNodes the nodes it starts with."""
    value = _annotation(annotations, NODES_ANNOTATION)
    if value is None:
        return None
    path: Path = ["metadata", "annotations", NODES_ANNOTATION]
    lo_text, sep, hi_text = value.partition(":")
    if not sep or not digits(lo_text) or not digits(hi_text) or not 1 <= int(lo_text) <= int(hi_text):
        notes.error(path, f"must be MIN:MAX nodes (1 <= MIN <= MAX), got {value!r}", "e.g. \"1:4\"")
        return None
    lo, hi = int(lo_text), int(hi_text)
    if not lo <= count <= hi:
        notes.error(["spec", "trainer", "numNodes"], f"{count} nodes to start with is outside {NODES_ANNOTATION} "
                    f"{value}", f"set numNodes between {lo} and {hi}")
        return None
    return lo, hi


def _progress_deadline(notes: Notes, annotations: Any) -> int | None:
    value = _annotation(annotations, PROGRESS_DEADLINE_ANNOTATION)
    if value is None:
        return None
    if not digits(value) or int(value) < 1:
        notes.error(["metadata", "annotations", PROGRESS_DEADLINE_ANNOTATION],
                    f"must be a positive number of seconds, got {value!r}", "e.g. \"600\"")
        return None
    return int(value)


def read(doc: Document) -> Converted:
    notes = Notes(doc)
    data = doc.data
    notes.top_level()
    spec = notes.section(data, "spec", [])
    for key in REPLACED_BY_PATCHES:
        if key in spec:
            notes.error(["spec", key], "is Trainer v2.0/v2.1's; v2.2 replaced it with runtimePatches (kubeflow/"
                        "trainer #3309), which torchjob reads", "write it as a spec.runtimePatches entry on the "
                        "node job (trainingRuntimeSpec.template.spec.replicatedJobs[{name: node, template: {spec: "
                        "{template: {metadata: ..., spec: ...}}}}]); see the README's TrainJob table")
    notes.unknown({k: v for k, v in spec.items() if k not in REPLACED_BY_PATCHES}, SPEC_FIELDS, ["spec"])
    init = notes.section(spec, "initializer", ["spec"])
    notes.unknown(init, {"dataset", "model"}, ["spec", "initializer"])
    trainer = notes.section(spec, "trainer", ["spec"])
    notes.unknown(trainer, TRAINER_FIELDS, ["spec", "trainer"])
    rt = _runtime(doc, notes, spec)  # a runtime's own problems are raised by its file and lines
    nodes = notes.integer(trainer, "numNodes", ["spec", "trainer"], minimum=1)
    given = trainer_runtime.proc_per_node(notes, trainer, ["spec", "trainer"])
    notes.raise_if_any()
    assert rt is not None
    steps = _initializers(notes, init, rt)
    pod = rt.pod_template
    apply_patches(notes, spec, pod, rt.job_name)
    c = _node(notes, trainer, pod)
    meta = data.get("metadata")
    job_name = str(meta.get("name") or "") if isinstance(meta, dict) else ""  # not a mapping: said by the model
    for template in [pod, *(s["template"] for s in steps)]:  # as JobSet adds them to each Job it makes
        volume_claims.mount(template, rt.claims, job_name)
    count = nodes or rt.num_nodes
    restart = (pod.get("spec") or {}).pop("restartPolicy", None) or "OnFailure"  # JobSet's default
    rp: dict[str, Any] = {"backoffLimit": rt.backoff_limit}
    for key in ("suspend", "activeDeadlineSeconds"):
        if key in spec:
            rp[key] = spec[key]
    if spec.get("managedBy") not in (None, CONTROLLER):
        notes.warn(["spec", "managedBy"], "ignored: torchjob's operator runs the TorchJob this becomes")
    sched = dict(rt.scheduling)
    annotations = (data.get("metadata") or {}).get("annotations") if isinstance(data.get("metadata"), dict) else None
    if sched.get("schedulerName") == "volcano" and isinstance(annotations, dict) and annotations.get(VOLCANO_QUEUE):
        sched["queue"] = annotations[VOLCANO_QUEUE]
    if sched:
        rp["schedulingPolicy"] = sched
    replica = {"restartPolicy": restart, "template": pod}
    elastic = _elastic_nodes(notes, annotations, count)
    stall = _progress_deadline(notes, annotations)
    if stall is not None:
        rp["progressDeadlineSeconds"] = stall
    notes.raise_if_any()
    if elastic is not None:  # every node a worker, as an elastic PyTorchJob's
        replicas = {WORKER: {**replica, "replicas": count}}
    else:
        replicas = {MASTER: {**replica, "replicas": 1}}
        if count > 1:
            replicas[WORKER] = {**copy.deepcopy(replica), "replicas": count - 1}
    resources = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    native_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas, "runPolicy": rp,
                                   "nprocPerNode": nproc(resources or {}, given, rt.num_proc_per_node)}
    if steps:
        native_spec["initializers"] = steps
    if rt.claims:
        native_spec["volumeClaims"] = volume_claims.native(notes, rt.claims, job_name)
    if elastic is not None:
        native_spec["elasticPolicy"] = {"minReplicas": elastic[0], "maxReplicas": elastic[1], "rdzvBackend": "c10d"}
    elif count > 1:  # JobSet's success: every node's Job completed, not node 0's alone (core's minSuccess rule)
        native_spec["minSuccess"] = count
    for rtype in replicas:
        base = ("spec", "pytorchReplicaSpecs", rtype, "template", "spec", "containers", 0)
        doc.aliases += [((*base, k), ("spec", "trainer", k)) for k in ("image", "command", "args", "env")]
        doc.aliases.append(((*base, "resources"), ("spec", "trainer", "resourcesPerNode")))
    doc.aliases += [(("spec", "runPolicy", k), ("spec", k)) for k in ("suspend", "activeDeadlineSeconds")]
    native = {"apiVersion": NATIVE_API, "kind": NATIVE_KIND, "metadata": copy.deepcopy(data.get("metadata")),
              "spec": native_spec}
    notes.raise_if_any()
    return Converted(job_from_data(native, doc), notes.warnings)


def write(job_data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Native job data (explicit, see `convert.explicit`) -> a TrainJob on torch-distributed, and what
    was lost. Pod fields a runtime patch may carry (volumes, nodeSelector, ...) go in `runtimePatches`."""
    from torchjob.api.model import TorchJob
    from torchjob.api.pod import training_container
    from torchjob.api.spec_facts import is_torchrun, master_port

    lost: list[str] = []
    job = TorchJob.model_validate(job_data)
    spec = job_data["spec"]
    specs = spec["pytorchReplicaSpecs"]
    first = MASTER if MASTER in specs else WORKER
    pod = copy.deepcopy(specs[first]["template"])
    others = [t for t in specs if t != first]
    if others and specs[others[0]]["template"] != specs[first]["template"]:
        lost.append(f"{others[0]}'s template differs from the {first}'s: a TrainJob's nodes share one; the {first}'s "
                    "is written")
    containers = pod["spec"]["containers"]
    ci = training_container(job.spec.pytorchReplicaSpecs[first].template.spec.containers)
    c = containers.pop(ci)
    trainer: dict[str, Any] = {"numNodes": sum(int(r.get("replicas", 1)) for r in specs.values())}
    for key, dest in (("image", "image"), ("command", "command"), ("args", "args"), ("env", "env"),
                      ("resources", "resourcesPerNode")):
        if key in c:
            trainer[dest] = c.pop(key)
    argv = [*trainer.get("command", []), *trainer.get("args", [])]
    if argv and not is_torchrun(argv):
        lost.append("the command starts no launcher: Trainer sets only PET_* (no MASTER_ADDR, RANK or WORLD_SIZE); "
                    "start it with torchrun")
    nproc_text = spec.get("nprocPerNode")
    if nproc_text is not None and digits(str(nproc_text)):
        trainer["numProcPerNode"] = int(nproc_text)
    elif nproc_text not in (None, "auto"):
        lost.append(f"nprocPerNode {nproc_text} is written as Trainer's auto (GPUs, else the CPUs requested)")
    if master_port(job) != TRAINER_PORT:
        lost.append(f"the master port {master_port(job)}: Trainer's is {TRAINER_PORT}")
    c["ports"] = [p for p in c.get("ports", []) if p.get("name") != PORT_NAME]
    out_spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}
    patches, dropped = write_patches(pod, c, containers)
    lost += dropped
    if patches:
        out_spec["runtimePatches"] = patches
    rp = spec.get("runPolicy") or {}
    for key in ("suspend", "activeDeadlineSeconds"):
        if key in rp:
            out_spec[key] = rp[key]
    kept = ("suspend", "activeDeadlineSeconds")
    lost += [f"runPolicy.{k} has no TrainJob field" for k, v in rp.items()
             if k not in kept and (k, v) != ("backoffLimit", JOB_BACKOFF_DEFAULT)]  # torch-distributed's Job: 6
    restarts = {r.get("restartPolicy", "OnFailure") for r in specs.values()}
    if restarts != {"OnFailure"}:
        lost.append(f"restartPolicy {sorted(restarts)}: a TrainJob's nodes restart as its runtime's Job says "
                    "(torch-distributed: OnFailure)")
    every_node = spec.get("minSuccess") == trainer["numNodes"] and "elasticPolicy" not in spec  # a TrainJob's rule
    lost += [f"spec.{k} has no TrainJob equivalent" for k in ("elasticPolicy", "policies", "minSuccess", "runMode",
                                                               "tensorboard", "volcano", "waitForMaster")
             if k in spec and not (k == "minSuccess" and every_node)]
    if spec.get("volumeClaims"):
        lost.append("spec.volumeClaims: a TrainJob's claims are its runtime's volumeClaimPolicies; not written")
    if spec.get("initializers"):
        lost.append("spec.initializers: a TrainJob's initializers are its runtime's jobs (and spec.initializer "
                    "fills them); not written")
    lost += [f"pytorchReplicaSpecs.{t}.{k} has no TrainJob equivalent" for t, r in specs.items()
             for k in ("policies", "maxRestarts", "dependsOn") if k in r]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": copy.deepcopy(job_data["metadata"]),
            "spec": out_spec}, lost
