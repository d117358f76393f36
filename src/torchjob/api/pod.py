"""The subset of the Kubernetes pod template a TorchJob's replicas are made from: containers, env,
volumes. Fields that only mean something on a cluster are accepted and typed loosely; the local
runtime names them in a warning (see `CLUSTER_ONLY_*`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from torchjob.api.strict import Strict

DEFAULT_CONTAINER = "pytorch"  # the name of the container that trains (Kubeflow's rule)


def training_index(names: Iterable[object], wanted: str = DEFAULT_CONTAINER) -> int:
    """Which container trains, given the containers' names in order: the one named `wanted`
    (`pytorch`; T9k's documents say `python`), else the first. The one home of that rule."""
    for i, name in enumerate(names):
        if name == wanted:
            return i
    return 0


def training_container(containers: Sequence[Container]) -> int:
    """The index of the container torchjob configures: the one named `pytorch`, else the first."""
    return training_index(c.name for c in containers)


def training_container_of_data(containers: Sequence[Any], wanted: str = DEFAULT_CONTAINER) -> int:
    """The same rule for containers as a document's data (dicts, before they are typed)."""
    return training_index((c.get("name") if isinstance(c, dict) else None for c in containers), wanted)


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
    # What a Go client writes for a template's zero time (Kueue does, resuming a PyTorchJob; so does
    # `kubectl get -o yaml` of one): accepted as null only, and never written back.
    creationTimestamp: SkipJsonSchema[None] = Field(default=None, exclude=True)


class PodTemplateSpec(Strict):
    metadata: TemplateMeta | None = None
    spec: PodSpec
