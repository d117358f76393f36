"""A TorchJob's replicas as Kubernetes objects: Pods `{job}-{master|worker}-{i}` and one headless
Service `{job}`, so that `MASTER_ADDR` is the master's stable DNS name. Pure: dicts in, dicts out.

Every pod is created with `restartPolicy: Never`: the operator decides every restart with the
same `core` as the local runtime (so both give the same answer), and counts each toward
backoffLimit (Kubeflow's ExitCode restarts were never counted: its #2045).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

from torchjob.api.defaults import ADDED_USER, INIT_IMAGE, INIT_RESOURCES
from torchjob.api.model import API_VERSION, KIND, MASTER, PORT_NAME, WORKER, TorchJob
from torchjob.api.spec_facts import master_port
from torchjob.api.validate import SERVED_AS, reserved_meta, training_container
from torchjob.core import topology
from torchjob.core.topology import Placement, ReplicaId, debug_command, has_master, merge_env, replica_env, replicas
from torchjob.kube.objects import gang, kueue, tensorboard
from torchjob.kube.objects import kubeflow_labels as kf

LABEL_JOB = "torchjob.dev/job-name"
LABEL_TYPE = "torchjob.dev/replica-type"
LABEL_INDEX = "torchjob.dev/replica-index"
# On a job read from a foreign kind the operator serves (never stored): that kind's apiVersion/kind.
ANNOTATION_SERVED_AS = SERVED_AS
ANNOTATION_ATTEMPT = "torchjob.dev/attempt"
ANNOTATION_WAIT = "torchjob.dev/wait-for-master"  # "false" turns the init container off for a job
WAIT_CONTAINER = "wait-for-master"
TERMINATION_LOG = "/dev/termination-log"
PROGRESS_VOLUME = "torchjob-progress"
PROGRESS_DIR = "/var/run/secrets/torchjob.dev/progress"
# A lost node's NoExecute taints, and how long torchjob's pods stay on such a node (see node_lost_tolerations)
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
NODE_LOST_TOLERATION_S = 30
CA_CONFIGMAP = "torchjob-progress-ca"  # the progress endpoint's CA, in each job namespace
CA_KEY = "ca.crt"
PROGRESS_TOKEN_S = 3600  # the projected token's lifetime; the kubelet renews it before it ends
# torchrun names a node in an elastic rendezvous by its address and pid. A pod made again for a
# lost replica has the same hostname and the same pid (torchrun is PID 1), so the rendezvous took
# it for the node it replaces and never finished a round (found on the real node: a worker's
# container killed, the survivors timed out in `_assign_worker_ranks`). The pod's IP is new with
# every pod.


def replica_name(labels: Mapping[str, str]) -> str | None:
    """The replica a pod or Service of a job is (`worker-1`), from its labels; None when not one."""
    rtype, index = labels.get(LABEL_TYPE), labels.get(LABEL_INDEX)
    return f"{rtype}-{index}" if rtype and index is not None else None


def replica_of(obj: Mapping[str, Any]) -> ReplicaId | None:
    """The replica an object of a job is, from its labels; None when not one of a known type."""
    name = replica_name(obj.get("metadata", {}).get("labels") or {})
    try:
        return ReplicaId.parse(name) if name else None
    except ValueError:
        return None


def terminated(pod: Mapping[str, Any], container: str | None) -> dict[str, Any]:
    """`state.terminated` of one container of a pod (as the API serves it); empty while it has not ended."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return (cs.get("state") or {}).get("terminated") or {}
    return {}


def disruption(pod: Mapping[str, Any]) -> str | None:
    """Why Kubernetes deletes the pod (its DisruptionTarget condition: a lost node's NoExecute taint,
    a preemption, an eviction), or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return ": ".join(x for x in (c.get("reason"), c.get("message")) if x) or "DisruptionTarget"
    return None


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """An object's controller (its ownerReference marked `controller`), or None."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def owned_by(obj: Mapping[str, Any], job: TorchJob) -> bool:
    """Whether the job itself (its uid) controls an object (a pod, a Workload, a PodGroup)."""
    owner = controller_of(obj)
    return owner is not None and bool(job.metadata.uid) and owner.get("uid") == job.metadata.uid


def left_by_earlier(obj: Mapping[str, Any], job: TorchJob) -> bool:
    """Whether an object is controlled by an earlier job of this one's kind and name (another uid):
    what that job left behind, until the garbage collector takes it."""
    owner = controller_of(obj) or {}
    return (not owned_by(obj, job) and owner.get("name") == job.name
            and (owner.get("apiVersion"), owner.get("kind")) == served_as(job))


def whose(obj: Mapping[str, Any]) -> str:
    """An object's controller, as a message says it."""
    owner = controller_of(obj)
    return f"{owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})" if owner else "no controller"


def attempt_of(obj: Mapping[str, Any]) -> int:
    """Which attempt of its replica a pod runs (the annotation the operator sets)."""
    return int((obj.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_ATTEMPT, "0"))


LOCAL_ADDR_ENV = {"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def pod_name(job: TorchJob, rid: ReplicaId) -> str:
    return f"{job.name}-{rid.name}"


def host(job: TorchJob, rid: ReplicaId) -> str:
    """The replica's DNS name through the job's headless Service (pod hostname.subdomain)."""
    return f"{pod_name(job, rid)}.{job.name}"


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


def served_as(job: TorchJob) -> tuple[str, str]:
    """The apiVersion and kind of the stored object this job was read from: its own, or the foreign
    kind the operator serves it as (a Kubeflow PyTorchJob), which then owns its pods."""
    served = (job.metadata.annotations or {}).get(ANNOTATION_SERVED_AS)
    if served:
        api_version, _, kind = served.rpartition("/")
        return api_version, kind
    return API_VERSION, KIND


def as_torchjob(job: TorchJob) -> TorchJob:
    """A TorchJob as its own kind: an annotation that says it was read from another kind (which the
    operator sets only on the foreign kinds it serves, never stored) dropped, so that its pods are
    owned by it and labelled as its own, whatever its document says."""
    annotations = job.metadata.annotations or {}
    if ANNOTATION_SERVED_AS not in annotations:
        return job
    kept = {k: v for k, v in annotations.items() if k != ANNOTATION_SERVED_AS}
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": kept})})


def owner_reference(job: TorchJob) -> dict[str, Any]:
    api_version, kind = served_as(job)
    return {"apiVersion": api_version, "kind": kind, "name": job.name, "uid": job.metadata.uid or "",
            "controller": True, "blockOwnerDeletion": True}


def _kubeflow_labels(job: TorchJob, rid: ReplicaId | None) -> dict[str, str]:
    """Kubeflow's labels on the pods and Service of a job served as a PyTorchJob (its tools select
    pods by them); none on a TorchJob's."""
    if served_as(job)[1] != "PyTorchJob":
        return {}
    if rid is None:
        return kf.service_labels(job.name)
    return kf.pod_labels(job.name, rid.rtype, rid.index, MASTER in job.spec.pytorchReplicaSpecs)


def selector(job: TorchJob) -> dict[str, str]:
    return {LABEL_JOB: job.name}


def added_security(pod_context: Mapping[str, Any] | None, *, windows: bool = False) -> dict[str, Any]:
    """The securityContext of a container torchjob adds to a pod: what Pod Security `restricted`
    asks of it (no privilege escalation, every capability dropped, RuntimeDefault seccomp, a non-root
    user) and a read-only root. It never contradicts the pod's own securityContext: where the pod
    names a user (and group), the container runs as the pod says, one identity per pod, as a
    platform's policy sees it (runAsNonRoot only when that user is not root: the kubelet would refuse
    to start it otherwise); where it names none, as ADDED_USER. A seccomp profile the pod sets is
    inherited, not overridden. A Windows pod gets only what Windows has (the rest is refused there)."""
    pod_context = pod_context or {}
    if windows:
        return {"runAsNonRoot": True} if pod_context.get("runAsUser") != 0 else {}
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                          "readOnlyRootFilesystem": True}
    user = pod_context.get("runAsUser")
    if user is None:
        sc["runAsUser"] = ADDED_USER
        if pod_context.get("runAsGroup") is None:
            sc["runAsGroup"] = ADDED_USER
    if user != 0:
        sc["runAsNonRoot"] = True
    if "seccompProfile" not in pod_context:
        sc["seccompProfile"] = {"type": "RuntimeDefault"}
    return sc


def is_windows(spec: Mapping[str, Any]) -> bool:
    return bool((spec.get("os") or {}).get("name") == "windows")


def wait_for_master(job: TorchJob, where: Placement, image: str,
                    pod_context: Mapping[str, Any] | None = None, windows: bool = False) -> dict[str, Any]:
    """Waits until the master's port accepts connections, not only until its name resolves
    (pytorch-operator #333: DNS answers before the master listens); with `waitForMaster.timeoutSeconds`
    it gives up after that long and the worker fails (Volcano's `--wait-master-timeout`). It probes
    with `nc -z`, else bash's `/dev/tcp` (Volcano's plugin falls back to it too), so an image with
    either works; with neither it fails at once, saying so. POSIX sh around them."""
    host, port = where.master_addr, where.master_port
    wait = job.spec.waitForMaster
    timeout = wait.timeoutSeconds if wait else None
    # The values go in once, quoted, as variables; the script only ever expands them in double quotes
    # (the host comes from the job's name and the port from its spec: never code, whatever they hold).
    lines = [
        f"host={shlex.quote(str(host))} port={int(port)}",
        'has() { command -v "$1" >/dev/null 2>&1; }',
        "if ! has nc && ! has bash; then",
        '  echo "wait-for-master: this image has neither nc nor bash (for /dev/tcp), so it cannot probe port $port '
        'of $host; use an image with one of them (spec.waitForMaster.image, or the operator --init-image)"; exit 1',
        "fi",
        'probe() { { has nc && nc -z -w 2 "$host" "$port"; } || '
        """{ has bash && bash -c ': > "/dev/tcp/$0/$1"' "$host" "$port"; }; }""",
    ]
    if timeout is not None:
        lines += [f"timeout={int(timeout)}", f"end=$(( $(date +%s) + {int(timeout)} ))"]
    lines.append("until probe 2>/dev/null; do")
    if timeout is not None:
        lines.append('  if [ "$(date +%s)" -ge "$end" ]; then '
                     'echo "gave up waiting for $host $port after ${timeout}s"; exit 1; fi')
    lines += ['  echo "waiting for $host $port"; sleep 1', "done"]
    return {"name": WAIT_CONTAINER, "image": wait.image if wait and wait.image else image,
            "command": ["sh", "-c", "\n".join(lines)],
            "securityContext": added_security(pod_context, windows=windows),
            "resources": copy.deepcopy(INIT_RESOURCES)}


def waits_for_master(job: TorchJob, rid: ReplicaId, meta: dict[str, Any], default: bool,
                     attempt: int = 0) -> bool:
    """Whether this pod gets the wait-for-master init container: workers of a job with a master, unless
    the job (`waitForMaster.enabled`) or its template (annotation) says otherwise; else the operator's
    default, for a first attempt only (a job's `waitForMaster` holds for every attempt). A restarted
    worker starts at once, beside its restarted master: torch's store client retries a name that does
    not resolve yet and a port that refuses until its timeout, so the wait only serialised the two
    torch imports and a 1 s probe (bench/recovery.py: seconds of a gang restart on the real node)."""
    if rid.rtype != WORKER or not has_master(job) or meta.get("annotations", {}).get(ANNOTATION_WAIT) == "false":
        return False
    if job.spec.waitForMaster is not None:  # the job asked: every attempt waits as it says
        return job.spec.waitForMaster.enabled
    return default and attempt == 0


def progress_env(job: TorchJob, base_url: str) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """What a pod reports progress with, as Kubeflow Trainer gives it
    (`plugins/trainjobstatus/trainjobstatus.go` @8c0f505): the variables, a projected volume with a
    service-account token whose audience names the job and the endpoint's CA, and its mount."""
    from torchjob.progress.server import PYTORCHJOBS, TORCHJOBS, audience, status_path

    ns = job.metadata.namespace or "default"
    plural = PYTORCHJOBS if served_as(job)[1] == "PyTorchJob" else TORCHJOBS  # the kind's path and audience
    env = {"KUBEFLOW_TRAINER_SERVER_URL": base_url.rstrip("/") + status_path(ns, job.name, plural),
           "KUBEFLOW_TRAINER_SERVER_CA_CERT": f"{PROGRESS_DIR}/{CA_KEY}",
           "KUBEFLOW_TRAINER_SERVER_TOKEN": f"{PROGRESS_DIR}/token"}
    volume = {"name": PROGRESS_VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"audience": audience(ns, job.name, plural), "expirationSeconds": PROGRESS_TOKEN_S,
                                 "path": "token"}},
        {"configMap": {"name": CA_CONFIGMAP, "items": [{"key": CA_KEY, "path": CA_KEY}]}}]}}
    mount = {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_DIR, "readOnly": True}
    return env, volume, mount


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
    user = {e["name"]: e for e in c.get("env", [])}
    merged = merge_env([(name, e.get("value", "") if "valueFrom" not in e else None) for name, e in user.items()],
                       ours, renv.defaults)
    # Upserted, never duplicated: the user's entries keep their places; the kubelet expands $(VAR).
    c["env"] = [user[name] if value is None else {"name": name, "value": value} for name, value, _ in merged]
    if "PET_RDZV_BACKEND" in ours:
        c["env"].append(LOCAL_ADDR_ENV)
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
    annotations = {**_users(meta.get("annotations")), ANNOTATION_ATTEMPT: str(attempt)}
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


def ca_configmap(namespace: str, ca_pem: str) -> dict[str, Any]:
    """The ConfigMap that gives a namespace's pods the progress endpoint's CA (they project it)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CA_CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
            "data": {CA_KEY: ca_pem}}
