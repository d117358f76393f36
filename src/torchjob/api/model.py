"""The native job model: `torchjob.dev/v1` `TorchJob`, spec and status.

Field names follow Kubeflow's PyTorchJob v1 (and the Kubernetes pod template) so that its users
feel at home. Unknown fields are errors (`extra="forbid"`): a typo never silently changes a job.
Pod and container fields that only mean something on a cluster are accepted and typed loosely;
the local runtime names them in a warning (see `CLUSTER_ONLY_*`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

API_VERSION: Final = "torchjob.dev/v1"
KIND: Final = "TorchJob"

MASTER = "Master"
WORKER = "Worker"
REPLICA_TYPES = (MASTER, WORKER)

DEFAULT_PORT = 23456
PORT_NAME = "pytorchjob-port"
DEFAULT_CONTAINER = "pytorch"

RestartPolicy = Literal["Never", "OnFailure", "Always", "ExitCode"]
CleanPodPolicy = Literal["None", "Running", "All", "Unfinished"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- the pod template subset -------------------------------------------------------------


class ObjectFieldSelector(Strict):
    fieldPath: str
    apiVersion: str | None = None


class KeySelector(Strict):
    name: str | None = None
    key: str
    optional: bool | None = None


class EnvVarSource(Strict):
    fieldRef: ObjectFieldSelector | None = None
    configMapKeyRef: KeySelector | None = None
    secretKeyRef: KeySelector | None = None
    resourceFieldRef: dict[str, Any] | None = None


class EnvVar(Strict):
    name: str
    value: str | None = None
    valueFrom: EnvVarSource | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        # YAML `value: 1` is a common slip; Kubernetes rejects it, we accept it as "1".
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return str(v)
        return v


class ContainerPort(Strict):
    name: str | None = None
    containerPort: int
    protocol: str | None = None
    hostPort: int | None = None
    hostIP: str | None = None


class ResourceRequirements(Strict):
    limits: dict[str, str | int | float] | None = None
    requests: dict[str, str | int | float] | None = None
    claims: list[dict[str, Any]] | None = None


class VolumeMount(Strict):
    name: str
    mountPath: str
    readOnly: bool | None = None
    subPath: str | None = None
    mountPropagation: str | None = None
    subPathExpr: str | None = None


# Container fields that only mean something on a cluster: accepted, warned about locally.
CLUSTER_ONLY_CONTAINER_FIELDS = (
    "imagePullPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "securityContext",
    "lifecycle",
    "stdin",
    "stdinOnce",
    "tty",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "envFrom",
    "resizePolicy",
    "restartPolicy",
    "volumeDevices",
)


class Container(Strict):
    name: str
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    workingDir: str | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    volumeMounts: list[VolumeMount] | None = None
    imagePullPolicy: str | None = None
    livenessProbe: dict[str, Any] | None = None
    readinessProbe: dict[str, Any] | None = None
    startupProbe: dict[str, Any] | None = None
    securityContext: dict[str, Any] | None = None
    lifecycle: dict[str, Any] | None = None
    stdin: bool | None = None
    stdinOnce: bool | None = None
    tty: bool | None = None
    terminationMessagePath: str | None = None
    terminationMessagePolicy: str | None = None
    envFrom: list[dict[str, Any]] | None = None
    resizePolicy: list[dict[str, Any]] | None = None
    restartPolicy: str | None = None
    volumeDevices: list[dict[str, Any]] | None = None

    @field_validator("command", "args", mode="before")
    @classmethod
    def _argv_strings(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x for x in v]
        return v


class HostPathVolume(Strict):
    path: str
    type: str | None = None


class KeyToPath(Strict):
    key: str
    path: str
    mode: int | None = None


class ConfigMapVolume(Strict):
    name: str
    items: list[KeyToPath] | None = None
    defaultMode: int | None = None
    optional: bool | None = None


class EmptyDirVolume(Strict):
    medium: str | None = None
    sizeLimit: str | int | None = None


class Volume(Strict):
    name: str
    emptyDir: EmptyDirVolume | None = None
    hostPath: HostPathVolume | None = None
    configMap: ConfigMapVolume | None = None
    # Cluster volumes: accepted; a local run refuses them with a message that names them.
    persistentVolumeClaim: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None
    nfs: dict[str, Any] | None = None
    csi: dict[str, Any] | None = None
    projected: dict[str, Any] | None = None
    downwardAPI: dict[str, Any] | None = None
    ephemeral: dict[str, Any] | None = None

    def source_kind(self) -> str | None:
        kinds = [k for k in VOLUME_SOURCES if getattr(self, k) is not None]
        return kinds[0] if len(kinds) == 1 else None


VOLUME_SOURCES = (
    "emptyDir",
    "hostPath",
    "configMap",
    "persistentVolumeClaim",
    "secret",
    "nfs",
    "csi",
    "projected",
    "downwardAPI",
    "ephemeral",
)
LOCAL_VOLUME_SOURCES = ("emptyDir", "hostPath", "configMap")

CLUSTER_ONLY_POD_FIELDS = (
    "nodeSelector",
    "nodeName",
    "tolerations",
    "affinity",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "imagePullSecrets",
    "securityContext",
    "priorityClassName",
    "priority",
    "schedulerName",
    "hostNetwork",
    "hostIPC",
    "hostPID",
    "dnsPolicy",
    "dnsConfig",
    "hostAliases",
    "hostname",
    "subdomain",
    "runtimeClassName",
    "shareProcessNamespace",
    "topologySpreadConstraints",
    "enableServiceLinks",
    "activeDeadlineSeconds",
    "preemptionPolicy",
    "overhead",
    "readinessGates",
    "setHostnameAsFQDN",
    "os",
    "ephemeralContainers",
)


class PodSpec(Strict):
    containers: list[Container]
    initContainers: list[Container] | None = None
    volumes: list[Volume] | None = None
    restartPolicy: str | None = None
    terminationGracePeriodSeconds: int | None = Field(default=None, ge=0)
    nodeSelector: dict[str, str] | None = None
    nodeName: str | None = None
    tolerations: list[dict[str, Any]] | None = None
    affinity: dict[str, Any] | None = None
    serviceAccountName: str | None = None
    serviceAccount: str | None = None
    automountServiceAccountToken: bool | None = None
    imagePullSecrets: list[dict[str, Any]] | None = None
    securityContext: dict[str, Any] | None = None
    priorityClassName: str | None = None
    priority: int | None = None
    schedulerName: str | None = None
    hostNetwork: bool | None = None
    hostIPC: bool | None = None
    hostPID: bool | None = None
    dnsPolicy: str | None = None
    dnsConfig: dict[str, Any] | None = None
    hostAliases: list[dict[str, Any]] | None = None
    hostname: str | None = None
    subdomain: str | None = None
    runtimeClassName: str | None = None
    shareProcessNamespace: bool | None = None
    topologySpreadConstraints: list[dict[str, Any]] | None = None
    enableServiceLinks: bool | None = None
    activeDeadlineSeconds: int | None = None
    preemptionPolicy: str | None = None
    overhead: dict[str, Any] | None = None
    readinessGates: list[dict[str, Any]] | None = None
    setHostnameAsFQDN: bool | None = None
    os: dict[str, Any] | None = None
    ephemeralContainers: list[dict[str, Any]] | None = None


class TemplateMeta(Strict):
    name: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(Strict):
    metadata: TemplateMeta | None = None
    spec: PodSpec


# --- the job spec ----------------------------------------------------------------------

# Lifecycle policies (from Volcano): on an event or an exit code, take an action. They apply
# before restartPolicy: a failure a policy matches is handled by the policy alone.
# Stalled: a replica stopped reporting progress for runPolicy.progressDeadlineSeconds.
PolicyEvent = Literal["PodFailed", "PodEvicted", "TaskCompleted", "TaskFailed", "Stalled", "Unknown", "*"]
PolicyAction = Literal["RestartJob", "RestartTask", "RestartPod", "AbortJob", "TerminateJob", "CompleteJob"]
POLICY_EVENTS: tuple[str, ...] = ("PodFailed", "PodEvicted", "TaskCompleted", "TaskFailed", "Stalled", "Unknown",
                                  "*")
POLICY_ACTIONS: tuple[str, ...] = ("RestartJob", "RestartTask", "RestartPod", "AbortJob", "TerminateJob", "CompleteJob")


class LifecyclePolicy(Strict):
    event: PolicyEvent | None = None
    events: list[PolicyEvent] | None = None
    action: PolicyAction
    exitCode: int | None = None
    timeout: str | None = None  # a Go duration ("90s", "10m"): act only if it still holds then

    def event_names(self) -> list[str]:
        return [*([self.event] if self.event else []), *(self.events or [])]


class DependsOn(Strict):
    """Start this replica type only once the named types run (Volcano's task dependsOn)."""

    name: list[str]
    iteration: Literal["any", "all"] | None = None


class ReplicaSpec(Strict):
    replicas: int | None = None
    restartPolicy: RestartPolicy | None = None
    template: PodTemplateSpec
    policies: list[LifecyclePolicy] | None = None
    maxRestarts: int | None = None  # restarts of this type before its TaskFailed event (unset: none)
    dependsOn: DependsOn | None = None


class SchedulingPolicy(Strict):
    minAvailable: int | None = None
    queue: str | None = None
    minResources: dict[str, str | int | float] | None = None
    priorityClass: str | None = None
    scheduleTimeoutSeconds: int | None = None
    priority: int | None = None  # a scheduler's own priority number (T9k scheduler)
    schedulerName: str | None = None  # e.g. volcano


class RunPolicy(Strict):
    cleanPodPolicy: CleanPodPolicy | None = None
    ttlSecondsAfterFinished: int | None = None
    activeDeadlineSeconds: int | None = None
    backoffLimit: int | None = None
    schedulingPolicy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managedBy: str | None = None
    # Once a replica has reported progress, no new report from it for this long is the event
    # Stalled (the name Deployments use for the same idea).
    progressDeadlineSeconds: int | None = None


class RdzvConf(Strict):
    key: str
    value: str


class ElasticPolicy(Strict):
    minReplicas: int | None = None
    maxReplicas: int | None = None
    rdzvBackend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzvPort: int | None = None
    rdzvHost: str | None = None
    rdzvId: str | None = None
    rdzvConf: list[RdzvConf] | None = None
    standalone: bool | None = None
    nProcPerNode: int | None = None
    maxRestarts: int | None = None
    metrics: list[dict[str, Any]] | None = None


class DebugReplica(Strict):
    type: str
    skipInitContainer: bool | None = None
    command: list[str] | None = None  # default: sleep inf


class DebugMode(Strict):
    enabled: bool = False
    replicaSpecs: list[DebugReplica] | None = None


class RunMode(Strict):
    """T9k's debug mode: replicas start with a debug command instead of training."""

    debug: DebugMode | None = None


T9K_PVC = "t9k://pvc/"


class TensorBoardSpec(Strict):
    image: str | None = None
    logDirs: list[str]  # local paths, or t9k://pvc/NAME/PATH resolved with --pvc NAME=PATH

    @staticmethod
    def on_claim(item: str) -> tuple[str, str] | None:
        """`t9k://pvc/NAME/PATH` as (NAME, PATH); None for any other entry."""
        if not item.startswith(T9K_PVC):
            return None
        claim, _, rest = item[len(T9K_PVC):].partition("/")
        return claim, rest


class VolcanoEnv(Strict):
    """The env Volcano's plugins give, for jobs that came from (or go to) Volcano."""

    taskNames: dict[str, str] | None = None  # replica type -> Volcano task name (VC_<TASK>_*)
    taskIndex: bool = False  # `env` plugin: VC_TASK_INDEX, VK_TASK_INDEX
    hosts: bool = False  # `svc` plugin: VC_<TASK>_HOSTS, VC_<TASK>_NUM


class WaitForMaster(Strict):
    """Workers wait until the master's port accepts connections before they start (on Kubernetes an
    init container does; Volcano's `--wait-master-*` plugin flags). Unset: the operator's default."""

    enabled: bool = True
    image: str | None = None  # default: the operator's --init-image
    timeoutSeconds: int | None = Field(default=None, ge=1)  # the worker fails after it; unset: no limit


class TorchJobSpec(Strict):
    pytorchReplicaSpecs: dict[str, ReplicaSpec]
    runPolicy: RunPolicy | None = None
    elasticPolicy: ElasticPolicy | None = None
    nprocPerNode: str | None = None
    policies: list[LifecyclePolicy] | None = None  # job-level; replica-level ones are tried first
    minSuccess: int | None = None  # the job succeeds once this many replicas have succeeded
    runMode: RunMode | None = None
    tensorboard: TensorBoardSpec | None = None
    volcano: VolcanoEnv | None = None
    waitForMaster: WaitForMaster | None = None

    @field_validator("pytorchReplicaSpecs", mode="before")
    @classmethod
    def _case_insensitive_keys(cls, v: Any) -> Any:
        # `worker:` and `WORKER:` mean `Worker:` (Kubeflow's defaulter does the same, but only
        # after its webhook has already rejected them).
        if isinstance(v, dict):
            canonical = {t.lower(): t for t in REPLICA_TYPES}
            return {canonical.get(str(k).lower(), k): val for k, val in v.items()}
        return v

    @field_validator("nprocPerNode", mode="before")
    @classmethod
    def _nproc_string(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        return v


class ObjectMeta(Strict):
    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    generateName: str | None = None
    creationTimestamp: str | datetime | None = None
    resourceVersion: str | None = None
    generation: int | None = None


# --- status -----------------------------------------------------------------------------

ConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]


class Condition(BaseModel):
    type: ConditionType
    status: Literal["True", "False"] = "True"
    reason: str = ""
    message: str = ""
    lastTransitionTime: datetime | None = None
    lastUpdateTime: datetime | None = None


class ReplicaStatus(BaseModel):
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


class FailureInfo(BaseModel):
    """Why the job failed: the root cause, the way torchrun's summary names it."""

    reason: str
    message: str
    replica: str | None = None
    attempt: int | None = None
    exitCode: int | None = None
    signal: str | None = None


class ReplicaAttemptState(BaseModel):
    """What the controller has decided for one replica: its current attempt, restart backoff."""

    attempt: int = 0
    restarts: int = 0
    notBefore: datetime | None = None


class Metric(BaseModel):
    """A named value a replica reported (Kubeflow Trainer's `trainerStatus.metrics[]` entry)."""

    name: str
    value: str


class Progress(BaseModel):
    """How far the job is, from the replicas' latest progress report. Written by the runtime (the
    local supervisor, the operator) as reports arrive, never by `core`."""

    percent: float | None = None  # 0-100
    etaSeconds: int | None = None  # estimated time left
    step: int | None = None
    total: int | None = None
    rate: float | None = None  # steps per second, over the recent reports
    metrics: list[Metric] = Field(default_factory=list)
    lastReportTime: datetime | None = None
    reporter: str | None = None  # the replica that sent the latest report


class JobStatus(BaseModel):
    conditions: list[Condition] = Field(default_factory=list)
    replicaStatuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    replicas: dict[str, ReplicaAttemptState] = Field(default_factory=dict)
    restartCount: int = 0
    startTime: datetime | None = None
    completionTime: datetime | None = None
    failure: FailureInfo | None = None
    progress: Progress | None = None

    def condition(self, ctype: str) -> Condition | None:
        for c in self.conditions:
            if c.type == ctype:
                return c
        return None

    def is_true(self, ctype: str) -> bool:
        c = self.condition(ctype)
        return c is not None and c.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true("Succeeded") or self.is_true("Failed")

    @property
    def state(self) -> str:
        """One word for tables: the last condition that is true, in lifecycle order."""
        for ctype in ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created"):
            if self.is_true(ctype):
                return ctype
        return "Pending"


class TorchJob(Strict):
    apiVersion: Literal["torchjob.dev/v1"] = API_VERSION
    kind: Literal["TorchJob"] = KIND
    metadata: ObjectMeta
    spec: TorchJobSpec
    status: JobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.runPolicy or RunPolicy()

    def replica_count(self, rtype: str) -> int:
        spec = self.spec.pytorchReplicaSpecs.get(rtype)
        if spec is None:
            return 0
        return 1 if spec.replicas is None else spec.replicas

    def restart_policy(self, rtype: str) -> RestartPolicy:
        spec = self.spec.pytorchReplicaSpecs[rtype]
        return spec.restartPolicy or "OnFailure"
