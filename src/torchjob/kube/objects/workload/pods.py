"""A TorchJob's replicas as Kubernetes objects: Pods `{job}-{master|worker}-{i}` and one headless
Service `{job}`, so that `MASTER_ADDR` is the master's stable DNS name. Pure: dicts in, dicts out.

Every pod is created with `restartPolicy: Never`: the operator decides every restart with the
same `core` as the local runtime (so both give the same answer), and counts each toward
backoffLimit (Kubeflow's ExitCode restarts were never counted: its #2045).

A pod is put together from the modules of each role: labels (names and labels), ownership (the owner
reference), init_container (wait-for-master), reporting (the progress endpoint's env and volume);
a caller imports a name from the module that defines it.
"""

from __future__ import annotations

from typing import Any

from torchjob.api.defaults import INIT_IMAGE
from torchjob.api.model import MASTER, PORT_NAME, WORKER, TorchJob
from torchjob.api.spec_facts import master_port
from torchjob.api.validate import reserved_meta, training_container
from torchjob.core.policies import hangs, spares
from torchjob.core.shape import topology
from torchjob.core.shape.topology import (
    Placement,
    ReplicaId,
    debug_command,
    has_master,
    merge_env,
    replica_env,
    replicas,
)
from torchjob.kube.objects.admission import gang, kueue
from torchjob.kube.objects.front import inplace, stacks
from torchjob.kube.objects.labels import (
    ANNOTATION_ATTEMPT,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_TYPE,
    host,
    pod_name,
    selector,
)
from torchjob.kube.objects.labels import kubeflow as kf
from torchjob.kube.objects.labels import t9k as t9k_labels
from torchjob.kube.objects.labels import trainjob as trainjob_labels
from torchjob.kube.objects.labels.ownership import (
    owner_reference,
    served_as,
)
from torchjob.kube.objects.workload import tensorboard
from torchjob.kube.objects.workload.init_container import (
    is_windows,
    wait_for_master,
    waits_for_master,
)
from torchjob.kube.objects.workload.reporting import (
    PROGRESS_VOLUME,
    progress_env,
)

TERMINATION_LOG = "/dev/termination-log"
# The grace of a pod (or, restarting in place, of an attempt) stopped because its replica restarts, where
# its template sets none (the pod's own default is 30 s): a peer of a failed rank is hung or failing; a
# job that checkpoints on SIGTERM sets its own.
RESTART_GRACE_S = 3
# A lost node's NoExecute taints, and how long torchjob's pods stay on such a node (see node_lost_tolerations)
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
NODE_LOST_TOLERATION_S = 30

# torchrun names a node in an elastic rendezvous by its address and pid. A pod made again for a
# lost replica has the same hostname and the same pid (torchrun is PID 1), so the rendezvous took
# it for the node it replaces and never finished a round (found on the real node: a worker's
# container killed, the survivors timed out in `_assign_worker_ranks`). The pod's IP is new with
# every pod.
LOCAL_ADDR_ENV = {"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


# A replica of several processes tags each process's lines with its rank, as locally (core.topology.
# tags_ranks); torchjob is not in the image, so torchrun's own tee does it: every line of each process
# copied whole to the agent's output (the pod's log) behind `[rankN]: ` (torch >= 2.2 reads the
# template; older torch writes its default `[default0]:`). The copies' files go to an emptyDir of
# torchjob's, so a read-only root file system does not stop torchrun. Defaults: a user's PET_TEE wins.
RANK_TAG_VOLUME, RANK_TAG_DIR = "torchjob-torchrun-logs", "/var/run/torchjob/torchrun-logs"
RANK_TAG_ENV = {"PET_TEE": "3", "PET_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ", "PET_LOG_DIR": RANK_TAG_DIR}


def placement(job: TorchJob) -> Placement:
    first = ReplicaId(MASTER if has_master(job) else WORKER, 0)
    port = master_port(job)
    ep = job.spec.elasticPolicy
    # worker-0 as in Kubeflow, but by the name the headless Service makes resolvable: Kubeflow's
    # bare `<job>-worker-0` resolves only because it makes a Service per replica.
    rdzv_host = ep.rdzvHost if ep and ep.rdzvHost else host(job, ReplicaId(WORKER, 0))
    # A host that names one of the job's pods bare (Kubeflow's default, spelled out) resolves
    # through the job's headless Service by its hostname.subdomain.
    bare = rdzv_host.removeprefix(f"{job.name}-")
    named = topology.replica_named(job, bare) if bare != rdzv_host else None
    rdzv_host = host(job, named) if named is not None else rdzv_host
    rdzv_port = ep.rdzvPort if ep and ep.rdzvPort else port
    return Placement(host(job, first), port, rdzv_host, rdzv_port)


def _kubeflow_labels(job: TorchJob, rid: ReplicaId | None) -> dict[str, str]:
    """Kubeflow's labels on the pods and Service of a job served as a PyTorchJob (its tools select
    pods by them), or Trainer's JobSet labels on a TrainJob's (kube/objects/labels/trainjob.py); none
    on a TorchJob's."""
    kind = served_as(job)[1]
    if kind == "TrainJob":
        if rid is None:
            return trainjob_labels.service_labels(job.name)
        return trainjob_labels.pod_labels(job.name, topology.node_rank(job, rid))
    if kind == t9k_labels.KIND:
        return t9k_labels.labels()
    if kind != "PyTorchJob":
        return {}
    if rid is None:
        return kf.service_labels(job.name)
    return kf.pod_labels(job.name, rid.rtype, rid.index, MASTER in job.spec.pytorchReplicaSpecs)


def pod(job: TorchJob, rid: ReplicaId, attempt: int, *, init_image: str = INIT_IMAGE,
        wait: bool = True, progress_url: str | None = None) -> dict[str, Any]:
    rspec = job.spec.pytorchReplicaSpecs[rid.rtype]
    template = rspec.template.model_dump(mode="json", exclude_none=True)
    spec: dict[str, Any] = template["spec"]
    meta = template.get("metadata", {})
    where = placement(job)
    ci = training_container(rspec.template.spec.containers)
    c = spec["containers"][ci]
    argv = [*(c.get("command") or []), *(c.get("args") or [])]
    debug = debug_command(job, rid.rtype)
    skip_init = False
    if debug is not None:  # T9k's debug mode: the environment is set up, nothing trains
        c["command"], c["args"] = debug, []
        skip_init = any(d.skipInitContainer for d in (job.spec.runMode.debug.replicaSpecs or [])  # type: ignore[union-attr]
                        if d.type.lower() == rid.rtype.lower())
    renv = replica_env(job, rid, argv, where, lambda r: host(job, r))
    ours = renv.env
    ours["TORCHJOB_JOB_UID"] = job.metadata.uid or ""
    if progress_url:
        penv, pvolume, pmount = progress_env(job, progress_url)
        ours.update(penv)
        spec["volumes"] = [*[v for v in spec.get("volumes", []) if v.get("name") != PROGRESS_VOLUME], pvolume]
        # A projected token needs a named service account (the API server refuses it otherwise); the
        # ServiceAccount admission plugin would name `default` anyway.
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        c["volumeMounts"] = [*[m for m in c.get("volumeMounts", []) if m.get("name") != PROGRESS_VOLUME], pmount]
    if "terminationMessagePath" not in c:
        ours["TORCHELASTIC_ERROR_FILE"] = TERMINATION_LOG  # the traceback shows in the pod's status
    # Without torch's error file (a script without @record, an argparse error), the end of its log is
    # the termination message: the status's root cause says what the script said, after its pod goes.
    c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    defaults = dict(renv.defaults)
    if topology.tags_ranks(job, renv.torchrun):
        defaults.update(RANK_TAG_ENV)
        spec["volumes"] = [*[v for v in spec.get("volumes", []) if v.get("name") != RANK_TAG_VOLUME],
                           {"name": RANK_TAG_VOLUME, "emptyDir": {}}]
        c["volumeMounts"] = [*[m for m in c.get("volumeMounts", []) if m.get("name") != RANK_TAG_VOLUME],
                             {"name": RANK_TAG_VOLUME, "mountPath": RANK_TAG_DIR}]
    user = {e["name"]: e for e in c.get("env", [])}
    merged = merge_env([(name, e.get("value", "") if "valueFrom" not in e else None) for name, e in user.items()],
                       ours, defaults)
    # Upserted, never duplicated: the user's entries keep their places; the kubelet expands $(VAR).
    c["env"] = [user[name] if value is None else {"name": name, "value": value} for name, value, _ in merged]
    if "PET_RDZV_BACKEND" in ours:
        c["env"].append(LOCAL_ADDR_ENV)
    entry = spares.in_pod_entry(argv)
    in_place = (progress_url is not None and debug is None and entry is not None
                and spares.in_place_reason(job, rid.rtype, argv, renv.torchrun) is None)
    if in_place:
        assert entry is not None
        grace = rspec.template.spec.terminationGracePeriodSeconds
        inplace.wrap(c, argv, len(entry.options), attempt, RESTART_GRACE_S if grace is None else grace)
        spec["volumes"] = [*[v for v in spec.get("volumes", []) if v.get("name") != inplace.VOLUME],
                           inplace.volume()]
    front = (not in_place and debug is None and entry is not None and stacks.wanted(job.metadata.annotations)
             and not is_windows(spec))
    if front:  # by default its ranks give their stacks on request (kube/objects/front/stacks.py; POSIX only)
        limit = hangs.deadline(job) if progress_url else None  # the samples go to the progress endpoint
        stacks.wrap(spec, c, argv, hangs.sample_every(limit) if limit else None)
    ports = c.setdefault("ports", [])
    if not any(p.get("name") == PORT_NAME for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": master_port(job)})
    spec["tolerations"] = node_lost_tolerations(spec.get("tolerations") or [])
    spec["restartPolicy"] = "Never"
    spec["hostname"] = pod_name(job, rid)
    spec["subdomain"] = job.name
    if waits_for_master(job, rid, meta, wait, attempt):
        init = wait_for_master(job, where, init_image, spec.get("securityContext"), is_windows(spec))
        spec["initContainers"] = [init, *spec.get("initContainers", [])]
    if skip_init:
        spec.pop("initContainers", None)
    # The template's own labels and annotations, less those torchjob sets (validate() refuses them; a
    # job stored past it, as the operator reads it, has them dropped here), then torchjob's.
    labels = {**_users(meta.get("labels")), **_kubeflow_labels(job, rid), LABEL_JOB: job.name,
              LABEL_TYPE: rid.rtype.lower(), LABEL_INDEX: str(rid.index)}
    annotations = {**_users(meta.get("annotations")), ANNOTATION_ATTEMPT: str(attempt),
                   **({inplace.ANNOTATION_IN_PLACE: "true"} if in_place else {}),
                   **({stacks.ANNOTATION_CONTAINER: c["name"]} if front else {})}
    gang.decorate_pod(job, rid.rtype, spec, labels, annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(job, rid), "namespace": job.metadata.namespace or "default",
                     "labels": labels, "annotations": annotations, "ownerReferences": [owner_reference(job)]},
        "spec": spec,
    }


def node_lost_tolerations(tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The template's tolerations, and a short one of a lost node's taints where it has none.

    When a node's kubelet stops reporting, the node controller taints the node NoExecute
    (not-ready, unreachable) and its pods go once their toleration of the taint runs out: 300 s by
    default (the DefaultTolerationSeconds admission plugin adds that to every pod without one). A
    gang cannot train while a member sits on a lost node, so torchjob's pods tolerate it for
    NODE_LOST_TOLERATION_S; a template that tolerates the taint itself keeps its own."""
    out = list(tolerations)
    for key in NODE_LOST_TAINTS:
        if not any(t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists") for t in out):
            out.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": NODE_LOST_TOLERATION_S})
    return out


def _users(found: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (found or {}).items() if not reserved_meta(k)}


def service(job: TorchJob) -> dict[str, Any]:
    """One headless Service per job; not-ready addresses are published so that every replica's
    name resolves as soon as its pod exists."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job.name, "namespace": job.metadata.namespace or "default",
                     "labels": {**_kubeflow_labels(job, None), **selector(job)},
                     "ownerReferences": [owner_reference(job)]},
        "spec": {"clusterIP": "None", "selector": selector(job), "publishNotReadyAddresses": True,
                 "ports": [{"name": PORT_NAME, "port": master_port(job), "targetPort": master_port(job)}]},
    }


def podgroup(job: TorchJob) -> dict[str, Any] | None:
    """The job's PodGroup, if a gang scheduler is asked for; labelled like its pods, so the operator
    watches only its own."""
    group = gang.podgroup(job, owner_reference(job))
    if group is not None:
        group["metadata"]["labels"] = selector(job)
    return group


def manifests(job: TorchJob, *, init_image: str = INIT_IMAGE, wait: bool = True,
              progress_url: str | None = None) -> list[dict[str, Any]]:
    """Everything the operator creates for the job's first attempt, in the order it creates them
    (`torchjob render --kube`)."""
    group = podgroup(job)
    queued = [kueue.workload(job, owner_reference(job), selector(job))] if kueue.queue_name(job) else []
    pods = [pod(job, rid, 0, init_image=init_image, wait=wait, progress_url=progress_url) for rid in replicas(job)]
    return [*queued, *([group] if group else []), service(job), *pods, *tensorboard.objects(job, owner_reference(job))]
