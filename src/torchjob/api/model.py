"""The native job model: `torchjob.dev/v1` `TorchJob` and its spec.

Field names follow Kubeflow's PyTorchJob v1 (and the Kubernetes pod template) so that its users
feel at home. Unknown fields are errors (`extra="forbid"`): a typo never silently changes a job.
The pod template is in `api/pod.py`, the status in `api/status.py`; both are re-exported here.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from torchjob.api.pod import (
    CLUSTER_ONLY_CONTAINER_FIELDS,
    CLUSTER_ONLY_POD_FIELDS,
    DEFAULT_CONTAINER,
    LOCAL_VOLUME_SOURCES,
    VOLUME_SOURCES,
    ConfigMapVolume,
    Container,
    ContainerPort,
    EmptyDirVolume,
    EnvVar,
    EnvVarSource,
    HostPathVolume,
    KeySelector,
    KeyToPath,
    ObjectFieldSelector,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
    TemplateMeta,
    Volume,
    VolumeMount,
)
from torchjob.api.status import (
    Condition,
    ConditionType,
    FailureInfo,
    JobStatus,
    Metric,
    Progress,
    ReplicaAttemptState,
    ReplicaStatus,
)
from torchjob.api.strict import Strict

__all__ = [
    "API_VERSION", "CLUSTER_ONLY_CONTAINER_FIELDS", "CLUSTER_ONLY_POD_FIELDS", "DEFAULT_CONTAINER", "DEFAULT_PORT",
    "KIND", "LOCAL_VOLUME_SOURCES", "MASTER", "POLICY_ACTIONS", "POLICY_EVENTS", "PORT_NAME", "REPLICA_TYPES",
    "T9K_PVC", "VOLUME_SOURCES", "WORKER", "CleanPodPolicy", "Condition", "ConditionType", "ConfigMapVolume",
    "Container", "ContainerPort", "DebugMode", "DebugReplica", "DependsOn", "ElasticPolicy", "EmptyDirVolume",
    "EnvVar", "EnvVarSource", "FailureInfo", "HostPathVolume", "Initializer", "JobStatus", "KeySelector", "KeyToPath",
    "LifecycleAction", "LifecycleEvent", "LifecyclePolicy", "Metric", "ObjectFieldSelector", "ObjectMeta",
    "PodSpec", "PodTemplateSpec", "PolicyAction", "PolicyEvent", "Progress", "RdzvConf", "ReplicaAttemptState",
    "ReplicaSpec", "ReplicaStatus", "ResourceRequirements", "RestartPolicy", "RunMode", "RunPolicy",
    "SchedulingPolicy", "Strict", "TemplateMeta", "TensorBoardSpec", "TorchJob", "TorchJobSpec", "VolcanoEnv",
    "Volume", "VolumeClaim", "VolumeMount", "WaitForMaster",
]

API_VERSION: Final = "torchjob.dev/v1"
KIND: Final = "TorchJob"

MASTER = "Master"
WORKER = "Worker"
REPLICA_TYPES = (MASTER, WORKER)

DEFAULT_PORT = 23456
PORT_NAME = "pytorchjob-port"

RestartPolicy = Literal["Never", "OnFailure", "Always", "ExitCode"]
CleanPodPolicy = Literal["None", "Running", "All", "Unfinished"]


# Lifecycle policies (from Volcano): on an event or an exit code, take an action. They apply
# before restartPolicy: a failure a policy matches is handled by the policy alone.
# Stalled: a replica stopped reporting progress for runPolicy.progressDeadlineSeconds.
PolicyEvent = Literal["PodFailed", "PodEvicted", "TaskCompleted", "TaskFailed", "Stalled", "Unknown", "*"]
PolicyAction = Literal["RestartJob", "RestartTask", "RestartPod", "AbortJob", "TerminateJob", "CompleteJob"]


class LifecycleEvent(StrEnum):
    """What a lifecycle policy acts on (the values of `PolicyEvent`, named for code)."""

    POD_FAILED = "PodFailed"
    POD_EVICTED = "PodEvicted"
    TASK_COMPLETED = "TaskCompleted"
    TASK_FAILED = "TaskFailed"
    STALLED = "Stalled"
    UNKNOWN = "Unknown"
    ANY = "*"


class LifecycleAction(StrEnum):
    """What a lifecycle policy does (the values of `PolicyAction`, named for code)."""

    RESTART_JOB = "RestartJob"
    RESTART_TASK = "RestartTask"
    RESTART_POD = "RestartPod"
    ABORT_JOB = "AbortJob"
    TERMINATE_JOB = "TerminateJob"
    COMPLETE_JOB = "CompleteJob"


POLICY_EVENTS: tuple[str, ...] = tuple(e.value for e in LifecycleEvent)
POLICY_ACTIONS: tuple[str, ...] = tuple(a.value for a in LifecycleAction)


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


class Initializer(Strict):
    """A step that runs to completion before any replica is made (Kubeflow Trainer's dataset and model
    initializers): its pod template, one pod (locally its first container, as one process); every
    step of a job at once. Its failure is retried `backoffLimit` times, then fails the job."""

    name: str
    template: PodTemplateSpec
    backoffLimit: int | None = Field(default=None, ge=0)  # unset: 0, no retry


class VolumeClaim(Strict):
    """A PersistentVolumeClaim the operator makes for the job before its pods (JobSet's
    volumeClaimPolicies, as Kubeflow Trainer's runtimes give a TrainJob its workspace): named `name`,
    with `spec` as written; owned by the job (deleted with it) unless `whenDeleted` is Retain. Its
    pods mount it by a persistentVolumeClaim volume of that claimName; locally it is a directory."""

    name: str
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    spec: dict[str, Any]
    whenDeleted: Literal["Delete", "Retain"] = "Delete"


class SchedulingPolicy(Strict):
    minAvailable: int | None = None
    queue: str | None = None
    minResources: dict[str, str | int | float] | None = None
    priorityClass: str | None = None
    scheduleTimeoutSeconds: int | None = None
    priority: int | None = None  # a scheduler's own priority number (T9k scheduler)
    schedulerName: str | None = None  # e.g. volcano


class RestartScope(StrEnum):
    JOB = "Job"
    REPLICA = "Replica"


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
    # No rank of the job moved (its main thread's stack and its CPU time unchanged in samples taken
    # every tenth of it) for this long: the event Stalled too, for a job that never reports. Unset:
    # core/policies/hangs.py's DEFAULT_S; 0: not watched. On a cluster, from the samples its pods post.
    hangDeadlineSeconds: int | None = None
    # What a failed replica's restart (by its restartPolicy) restarts: `Job`, every replica at once,
    # counted as one restart (the default of a job that is not elastic: no rank can go on without the
    # others, which would fail in their next collective or hang in it); `Replica`, only the failed
    # one (Kubeflow's behaviour; the default of an elastic job, whose rendezvous re-forms). A replica
    # deleted by someone else restarts the same, uncounted (core/round/facts.py `lost_rank`).
    restartScope: RestartScope | None = None
    # torchjob's: keep a warm spare process (interpreter up, torch imported) per restartable replica,
    # which becomes the replica's next attempt when it is restarted (core/policies/spares.py; local runs only).
    warmSpares: bool | None = None


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
    # The TensorBoard container's requests and limits on Kubernetes (T9k's tensorboardSpec.resources);
    # locally TensorBoard is a plain process and they are not applied.
    resources: ResourceRequirements | None = None

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
    """What the job runs and how: its replicas (Master, Worker), their pod templates and policies."""

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
    initializers: list[Initializer] | None = None  # run to completion, all at once, before any replica
    volumeClaims: list[VolumeClaim] | None = None  # made before any pod; locally directories

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


class TorchJob(Strict):
    """A PyTorch distributed-training job: a master and N workers, run by torchjob (locally or by its operator)."""

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

    @property
    def restart_scope(self) -> RestartScope:
        """`runPolicy.restartScope`, else Replica for an elastic job and Job for any other."""
        given = self.run_policy.restartScope
        if given is not None:
            return given
        return RestartScope.REPLICA if self.spec.elasticPolicy is not None else RestartScope.JOB

    def restart_policy(self, rtype: str) -> RestartPolicy:
        spec = self.spec.pytorchReplicaSpecs[rtype]
        return spec.restartPolicy or "OnFailure"
