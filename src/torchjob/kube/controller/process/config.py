"""The operator's settings: one frozen object built once from `torchjob operator`'s flags and
handed to what needs it. Keyword arguments only; nothing is set after construction.

A setting is declared once, here: its field, and in the field's metadata the flag that sets it (its
name, help, and its default where the command line's differs from the field's). cli/cluster.py makes
`torchjob operator`'s options from these fields, so a new setting is one new field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from torchjob.api.defaults import INIT_IMAGE
from torchjob.kube.served.kubeflow_mode import KubeflowApi

FORCE_DELETE_AFTER_S = 60.0  # past its deletionTimestamp, a pod stuck terminating (lost node) is force-deleted
FLAG = "flag"  # the key of a setting's Flag in its field's metadata
AS_FIELD: Any = object()  # a flag's default that is its field's


@dataclass(frozen=True, kw_only=True)
class Flag:
    """How a setting is typed on `torchjob operator`'s command line."""

    decls: str  # "--workers"; a switch names both ways: "--leader-elect/--no-leader-elect"
    help: str | None = None
    metavar: str | None = None
    default: Any = AS_FIELD  # the command line's default, where it is not the field's
    choices: tuple[str, ...] = ()  # the only values taken (none: any of the default's type)
    multiple: bool = False  # repeatable: its value is the tuple of every use
    envvar: str | None = None
    parse: Callable[[Any], Any] | None = None  # the flag's value -> the field's (None: as it is)


def flag(decls: str, help: str | None = None, *, metavar: str | None = None, default: Any = AS_FIELD,
         choices: tuple[str, ...] = (), multiple: bool = False, envvar: str | None = None,
         parse: Callable[[Any], Any] | None = None) -> dict[str, Flag]:
    """A field's metadata: the flag that sets it."""
    return {FLAG: Flag(decls=decls, help=help, metavar=metavar, default=default, choices=choices,
                       multiple=multiple, envvar=envvar, parse=parse)}


def _first_kubeconfig(value: str | None) -> str | None:
    return value.split(":")[0] if value else None  # $KUBECONFIG may list several; the first is read


def _watched(values: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """One namespace as itself (a namespaced watch), several as a tuple, none as None (all)."""
    unique = tuple(dict.fromkeys(values))
    return unique[0] if len(unique) == 1 else unique or None


@dataclass(frozen=True, kw_only=True)
class PodOptions:
    """What the operator adds to every job's pods."""

    init_image: str = INIT_IMAGE
    wait_for_master: bool = True
    progress_url: str | None = None  # the progress endpoint pods report to (None: no progress env)


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """The fields' defaults are those of a config built in code (tests: no progress endpoint); the
    command line's, where they differ, are in the flag."""

    kubeconfig: str | None = field(default=None, metadata=flag(
        "--kubeconfig", "Default: in-cluster, else ~/.kube/config.", envvar="KUBECONFIG", parse=_first_kubeconfig))
    namespace: str | tuple[str, ...] | None = field(default=None, metadata=flag(
        "--namespace", "Watch this namespace only; repeat it for several (default: all).", metavar="NAMESPACE",
        multiple=True, parse=_watched))
    workers: int = field(default=4, metadata=flag("--workers", "Concurrent reconciles."))
    metrics_port: int = field(default=8080, metadata=flag(
        "--metrics-port", "Port of /metrics (0: any free one)."))
    metrics_tls: bool = field(default=False, metadata=flag(
        "--metrics-tls/--no-metrics-tls",
        "Serve /metrics over HTTPS, with the certificate of the CA the operator keeps for its progress endpoint "
        "(Secret torchjob-progress-tls in --lease-namespace; the CA is its ca.crt).", default=True))
    health_port: int = field(default=8081, metadata=flag(
        "--health-port",
        "Port of the probes, /healthz and /readyz (plain HTTP, no token; 0: any free one). /readyz answers "
        "on every replica that works, leader or not."))
    metrics_auth: bool = field(default=True, metadata=flag(
        "--metrics-auth/--no-metrics-auth",
        "Serve /metrics only to a bearer token the API server authenticates and allows to get /metrics "
        "(TokenReview and SubjectAccessReview, as controller-runtime does; bind the scraper's ServiceAccount to "
        "the torchjob-metrics-reader ClusterRole). /healthz and /readyz stay open."))
    pod_name: str | None = field(default=None, metadata=flag(
        "--pod-name",
        "This replica's pod (in --lease-namespace): the leader labels it torchjob.dev/leader=true, which the "
        "progress Service selects. In the install manifests, from the downward API.", metavar="NAME",
        envvar="POD_NAME"))
    leader_elect: bool = field(default=False, metadata=flag(
        "--leader-elect/--no-leader-elect", "Hold a Lease so that only one replica of the operator acts."))
    lease_namespace: str = field(default="torchjob-system", metadata=flag("--lease-namespace"))
    lease_duration_s: int = field(default=15, metadata=flag(
        "--lease-duration", "How long a leader's Lease holds without renewal (renewed every third of it).",
        metavar="SECONDS"))
    init_image: str = field(default=INIT_IMAGE, metadata=flag(
        "--init-image", "Image of the workers' wait-for-master init container."))
    wait_for_master: bool = field(default=True, metadata=flag(
        "--wait-for-master/--no-wait-for-master", "Workers wait until the master's port accepts connections."))
    gang_scheduler: str | None = field(default=None, metadata=flag(
        "--gang-scheduler-name",
        "The scheduler of jobs that name none (Kubeflow's flag): volcano gives them a Volcano PodGroup, another "
        "name a scheduler-plugins PodGroup.", metavar="NAME"))
    force_delete_after_s: float = field(default=FORCE_DELETE_AFTER_S, metadata=flag(
        "--force-delete-after",
        "Force-delete a job's pod still terminating this long past its deletion time (its node is gone), so "
        "that the job can go on.", metavar="SECONDS"))
    progress_port: int = field(default=0, metadata=flag(
        "--progress-port",
        "Serve the progress endpoint (HTTPS) that pods report to; 0 turns it off (and the pods get no "
        "KUBEFLOW_TRAINER_SERVER_* variables).", metavar="PORT", default=8443))
    progress_url: str | None = field(default=None, metadata=flag(
        "--progress-url",
        "The endpoint's address as pods reach it [default: https://SERVICE.LEASE-NAMESPACE.svc:PORT].",
        metavar="URL"))
    progress_service: str = field(default="torchjob-operator", metadata=flag(
        "--progress-service",
        "The operator's Service (in --lease-namespace): the name the endpoint's certificate is for.",
        metavar="NAME"))
    progress_write_s: float = field(default=5.0, metadata=flag(
        "--progress-write-interval",
        "Write a job's status.progress at most once this often, however often its pods report.",
        metavar="SECONDS"))
    kubeflow_api: KubeflowApi = field(default=KubeflowApi.AUTO, metadata=flag(
        "--kubeflow-api",
        "Serve Kubeflow's kubeflow.org/v1 PyTorchJobs too. auto: when the cluster has their CRD as `torchjob "
        "install --kubeflow-api` installs it and Kubeflow's training-operator holds no Lease.",
        choices=tuple(m.value for m in KubeflowApi), parse=KubeflowApi))

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> OperatorConfig:
        """The config from the command line's values, by field name (each parsed by its flag)."""
        parsers = {name: f.parse for name, f, _ in flags() if f.parse}
        return cls(**{name: parsers[name](v) if name in parsers else v for name, v in values.items()})

    @property
    def reported_url(self) -> str | None:
        """The progress endpoint's address as pods are told it (None: no endpoint)."""
        if not self.progress_port:
            return None
        return self.progress_url or f"https://{self.progress_service}.{self.lease_namespace}.svc:{self.progress_port}"

    @property
    def pods(self) -> PodOptions:
        return PodOptions(init_image=self.init_image, wait_for_master=self.wait_for_master,
                          progress_url=self.reported_url)


def flags() -> list[tuple[str, Flag, Any]]:
    """Every setting's (field name, flag, the command line's default), in the fields' order."""
    found = []
    for f in fields(OperatorConfig):
        if FLAG in f.metadata:
            default = f.default if f.metadata[FLAG].default is AS_FIELD else f.metadata[FLAG].default
            found.append((f.name, f.metadata[FLAG], default.value if isinstance(default, Enum) else default))
    return found
