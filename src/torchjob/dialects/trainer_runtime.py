"""Kubeflow Trainer v2 runtimes (`ClusterTrainingRuntime`, `TrainingRuntime`) as a TrainJob uses them.

A runtime is a JobSet template with an ML policy. torchjob takes from it what a PyTorch job needs:
the pod template of the replicated job the `trainer.kubeflow.org/trainjob-ancestor-step: trainer`
label marks (its `node` container is the training container), `mlPolicy.numNodes` and
`mlPolicy.torch`, the Job's `backoffLimit`, and `podGroupPolicy`; and the jobs labelled
`dataset-initializer` and `model-initializer` (Trainer's initializers: their pod templates and
backoffLimit), which run before the nodes; and the JobSet's volumeClaimPolicies (the workspace
claim Trainer's torchtune runtimes give each TrainJob: dialects/volume_claims.py). What it cannot
honour is refused (another framework's policy, a launcher or any other job) or named in a warning;
nothing is dropped silently.
Facts from kubeflow/trainer @8c0f505 (pkg/apis/trainer/v1alpha1, plugins/torch/torch.go). Runtimes
written for Trainer v2.0/v2.1 carry `mlPolicy.torch.numProcPerNode` (an integer or `auto`, `cpu`,
`gpu`; the TrainJob's default there) and `elasticPolicy` (accepted there, never acted on); both
were removed in v2.2 (kubeflow/trainer #3239, #3235). Facts from kubeflow/trainer v2.1.0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from torchjob.api.source import Document
from torchjob.api.validate import digits
from torchjob.dialects import Notes, volume_claims

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # the trainer's container (and replicated job) name
JOB_BACKOFF_DEFAULT = 6  # a Kubernetes Job's backoffLimit when unset
NPROC_WORDS = ("auto", "cpu", "gpu")  # Trainer v2.0/v2.1's numProcPerNode strings
# The initializer jobs Trainer fills from a TrainJob's spec.initializer.dataset and .model (by their
# ancestor label; the container of the same name), run before the trainer's (jobset plugin, builder.go)
INITIALIZERS = ("dataset-initializer", "model-initializer")
REPLICATED_JOB_NAME_MAX = 20  # Trainer v2.4 (kubeflow/trainer#4394): pod names and labels are made from it
Path = list[str | int]

# The upstream `torch-distributed` ClusterTrainingRuntime of Kubeflow Trainer v2.3
# (manifests/base/runtimes/torch_distributed.yaml), known without a --runtime file.
TORCH_DISTRIBUTED: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": [{
            "name": NODE,
            "template": {
                "metadata": {"labels": {ANCESTOR: "trainer"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": NODE, "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}},
            },
        }]}},
    },
}
BUILTIN = {("ClusterTrainingRuntime", "torch-distributed"): TORCH_DISTRIBUTED}


@dataclass
class InitJob:
    """An initializer job of a runtime: `ancestor` (one of INITIALIZERS), its name, its pod template
    and its Job's backoffLimit."""

    ancestor: str
    name: str
    pod_template: dict[str, Any]
    backoff_limit: int = JOB_BACKOFF_DEFAULT


@dataclass
class Runtime:
    name: str
    pod_template: dict[str, Any]  # the trainer's pod template, its node container first
    job_name: str = NODE  # the trainer's replicated job
    num_nodes: int = 1
    backoff_limit: int = JOB_BACKOFF_DEFAULT
    num_proc_per_node: str | None = None  # mlPolicy.torch.numProcPerNode (Trainer v2.0/v2.1)
    scheduling: dict[str, Any] = field(default_factory=dict)  # native schedulingPolicy
    warnings: list[str] = field(default_factory=list)
    initializers: list[InitJob] = field(default_factory=list)  # in the runtime's order
    claims: list[dict[str, Any]] = field(default_factory=list)  # volumeClaimPolicies' (volume_claims.read)


def is_runtime(data: dict[str, Any]) -> bool:
    return data.get("apiVersion") == API_VERSION and data.get("kind") in KINDS


def find(kind: str, name: str, supplied: list[Document]) -> Document | None:
    for d in supplied:
        meta = d.data.get("metadata")
        if d.data.get("kind") == kind and isinstance(meta, dict) and meta.get("name") == name:
            return d
    builtin = BUILTIN.get((kind, name))
    return Document(data=copy.deepcopy(builtin), source=f"<the upstream {name} runtime>") if builtin else None


def proc_per_node(notes: Notes, data: dict[str, Any], path: Path) -> str | None:
    """data["numProcPerNode"] as Trainer v2.0/v2.1 took it: a positive integer, or `auto`, `cpu` or
    `gpu` (v2.2 and later take an integer only); None when absent or refused."""
    value = data.get("numProcPerNode")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return str(value)
    if value in NPROC_WORDS:
        return str(value)
    fix = (f"write it unquoted: numProcPerNode: {value}" if isinstance(value, str) and digits(value)
           and int(value) >= 1 else "a number of processes per node, e.g. numProcPerNode: 4")
    notes.error([*path, "numProcPerNode"], "must be a positive integer, or auto, cpu or gpu as Trainer v2.0/v2.1 "
                f"took it, got {value!r}", fix)
    return None


def _elastic(notes: Notes, ml: dict[str, Any], torch: dict[str, Any], path: Path) -> None:
    """mlPolicy.torch.elasticPolicy (Trainer v2.0/v2.1): its API server refused it with numNodes, and
    its torch plugin never acted on it (the nodes stayed numNodes); removed in v2.2 (#3235)."""
    if "elasticPolicy" not in torch:
        return
    notes.section(torch, "elasticPolicy", path)
    if "numNodes" in ml:
        notes.error([*path, "elasticPolicy"], "is not allowed with mlPolicy.numNodes (Trainer v2.0/v2.1's API "
                    "server refuses this runtime too)", "remove elasticPolicy: Trainer never applied it, and "
                    "v2.2 removed it (kubeflow/trainer #3235)")
    else:
        notes.warn([*path, "elasticPolicy"], "not honoured: Trainer v2.0/v2.1 accepted it but never acted on it "
                   "(the nodes are the TrainJob's numNodes, not elastic), and v2.2 removed it (kubeflow/trainer "
                   "#3235); torchjob runs the job as Trainer did. Remove it; for elastic training write a TorchJob "
                   "with spec.elasticPolicy")


def _ancestor(rj: dict[str, Any]) -> object:
    meta = (rj.get("template") or {}).get("metadata") if isinstance(rj.get("template"), dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels.get(ANCESTOR) if isinstance(labels, dict) else None


def _jobs(notes: Notes, jobs: list[tuple[int, dict[str, Any]]], path: Path
          ) -> tuple[tuple[int, dict[str, Any]], list[tuple[int, dict[str, Any]]]]:
    """The replicated job the TrainJob's trainer fills, and the initializer jobs; any other is refused."""
    trainer = None
    inits: list[tuple[int, dict[str, Any]]] = []
    for i, rj in jobs:
        name = rj.get("name")
        if isinstance(name, str) and len(name) > REPLICATED_JOB_NAME_MAX:
            notes.error([*path, i, "name"], f"{name!r} is {len(name)} characters: Kubeflow Trainer v2.4 allows at "
                        f"most {REPLICATED_JOB_NAME_MAX} (kubeflow/trainer#4394: the pods' names and labels are made "
                        "from it)", f"shorten the replicated job's name to {REPLICATED_JOB_NAME_MAX} characters or "
                        "fewer (e.g. dataset-initializer, model-initializer, node)")
        ancestor = _ancestor(rj)
        if ancestor == "trainer" and trainer is None:
            trainer = (i, rj)
        elif ancestor in INITIALIZERS and all(_ancestor(o) != ancestor for _, o in inits):
            inits.append((i, rj))
        else:
            notes.error([*path, i], f"replicated job {name!r} is neither the trainer nor a dataset or model "
                        "initializer: torchjob runs those (no launchers or other jobs, locally or on Kubernetes)",
                        f"label the job {ANCESTOR}: trainer, dataset-initializer or model-initializer (one of "
                        "each), or prepare what it does where the trainer reads it")
    if trainer is None:
        notes.error(path, f"no replicated job is labelled {ANCESTOR}: trainer", "label the trainer's job template")
        return (-1, {}), inits
    return trainer, inits


def read(doc: Document) -> Runtime:
    """A runtime document -> what a TorchJob takes from it; raises InvalidJob naming its fields."""
    notes = Notes(doc)
    data = doc.data
    notes.unknown(data, {"apiVersion", "kind", "metadata", "spec"}, [])
    spec = notes.section(data, "spec", [])
    notes.unknown(spec, {"mlPolicy", "podGroupPolicy", "template"}, ["spec"])
    ml = notes.section(spec, "mlPolicy", ["spec"])
    notes.unknown(ml, {"numNodes", "torch", "mpi", "jax", "xgboost", "flux"}, ["spec", "mlPolicy"])
    for other in ("mpi", "jax", "xgboost", "flux"):
        if other in ml:
            notes.error(["spec", "mlPolicy", other], f"a {other} runtime: torchjob runs PyTorch jobs",
                        "use a runtime with mlPolicy.torch, e.g. torch-distributed")
    if "torch" not in ml and not notes.errors:
        notes.error(["spec", "mlPolicy"], "has no torch policy: torchjob runs PyTorch jobs",
                    "use a runtime with mlPolicy.torch, e.g. torch-distributed")
    torch = notes.section(ml, "torch", ["spec", "mlPolicy"])
    notes.unknown(torch, {"envInjection", "numProcPerNode", "elasticPolicy"}, ["spec", "mlPolicy", "torch"])
    num_proc = proc_per_node(notes, torch, ["spec", "mlPolicy", "torch"])
    _elastic(notes, ml, torch, ["spec", "mlPolicy", "torch"])
    if torch.get("envInjection"):
        notes.warn(["spec", "mlPolicy", "torch", "envInjection"],
                   "not honoured: only the node container gets the PET_* env (init containers and sidecars do not)")
    num_nodes = notes.integer(ml, "numNodes", ["spec", "mlPolicy"], minimum=1)
    template = notes.section(spec, "template", ["spec"])
    notes.unknown(template, {"metadata", "spec"}, ["spec", "template"])
    if "metadata" in template:
        notes.warn(["spec", "template", "metadata"], "the JobSet's labels and annotations are not used")
    jobset = notes.section(template, "spec", ["spec", "template"])
    jpath: Path = ["spec", "template", "spec"]
    for key in jobset:
        if key not in ("replicatedJobs", "volumeClaimPolicies"):
            notes.warn([*jpath, key], "a JobSet setting torchjob does not use; ignored")
    (index, rj), found = _jobs(notes, notes.items(jobset, "replicatedJobs", jpath), [*jpath, "replicatedJobs"])
    pod, backoff = _pod_template(notes, rj, [*jpath, "replicatedJobs", index])
    inits = []
    for i, job in found:
        template, limit = _pod_template(notes, job, [*jpath, "replicatedJobs", i], container=None)
        inits.append(InitJob(str(_ancestor(job)), str(job.get("name", _ancestor(job))), template,
                             JOB_BACKOFF_DEFAULT if limit is None else limit))
    scheduling = _gang(notes, spec, pod)
    claims = volume_claims.read(notes, jobset, [pod, *(i.pod_template for i in inits)], jpath)
    notes.raise_if_any()
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return Runtime(name=str((meta or {}).get("name", "")), pod_template=pod, job_name=str(rj.get("name", NODE)),
                   num_nodes=num_nodes or 1, backoff_limit=JOB_BACKOFF_DEFAULT if backoff is None else backoff,
                   num_proc_per_node=num_proc, scheduling=scheduling, warnings=notes.warnings, initializers=inits,
                   claims=claims)


def _pod_template(notes: Notes, rj: dict[str, Any], path: Path,
                  container: str | None = NODE) -> tuple[dict[str, Any], int | None]:
    """A replicated job's pod template (`container`, where given, first: it must be there) and backoffLimit."""
    notes.unknown(rj, {"name", "replicas", "template", "dependsOn", "groupName"}, path, fatal=False)
    if rj.get("replicas", 1) != 1:
        notes.warn([*path, "replicas"], "Trainer runs one of each replicated job (the trainer's numNodes make the "
                   "nodes; an initializer is one pod); ignored")
    job = notes.section(rj, "template", path)
    jspec = notes.section(job, "spec", [*path, "template"])
    for key in jspec:
        if key not in ("template", "backoffLimit", "parallelism", "completions"):
            notes.warn([*path, "template", "spec", key], "a Job setting torchjob does not use; ignored")
    backoff = notes.integer(jspec, "backoffLimit", [*path, "template", "spec"], minimum=0)
    pod = copy.deepcopy(notes.section(jspec, "template", [*path, "template", "spec"]))
    if pod.get("spec") is not None and not isinstance(pod["spec"], dict):
        notes.section(pod, "spec", [*path, "template", "spec", "template"])  # says it must be a mapping
        return pod, backoff
    containers = (pod.get("spec") or {}).get("containers")
    if container is None:
        return pod, backoff
    if not isinstance(containers, list) or not any(isinstance(c, dict) and c.get("name") == NODE for c in containers):
        notes.error([*path, "template", "spec", "template", "spec", "containers"],
                    f"the trainer's pod has no container named {NODE!r} (Trainer's training container)",
                    f"name the training container {NODE}")
        return pod, backoff
    containers.sort(key=lambda c: 0 if isinstance(c, dict) and c.get("name") == NODE else 1)
    return pod, backoff


def _gang(notes: Notes, spec: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """podGroupPolicy -> the native schedulingPolicy (the operator makes the PodGroup)."""
    group = notes.section(spec, "podGroupPolicy", ["spec"])
    notes.unknown(group, {"coscheduling", "volcano"}, ["spec", "podGroupPolicy"])
    if "coscheduling" in group:
        cos = notes.section(group, "coscheduling", ["spec", "podGroupPolicy"])
        notes.unknown(cos, {"scheduleTimeoutSeconds"}, ["spec", "podGroupPolicy", "coscheduling"])
        timeout = notes.integer(cos, "scheduleTimeoutSeconds", ["spec", "podGroupPolicy", "coscheduling"], 1)
        ps = pod.get("spec")
        name = (ps.get("schedulerName") if isinstance(ps, dict) else None) or "scheduler-plugins-scheduler"
        return {"schedulerName": name, "scheduleTimeoutSeconds": 60 if timeout is None else timeout}
    if "volcano" in group:
        vc = notes.section(group, "volcano", ["spec", "podGroupPolicy"])
        if vc.get("networkTopology"):
            notes.warn(["spec", "podGroupPolicy", "volcano", "networkTopology"], "not passed to the PodGroup; ignored")
        return {"schedulerName": "volcano"}
    return {}
