"""The operator's settings: one frozen object built once from `torchjob operator`'s flags and
handed to what needs it. Keyword arguments only; nothing is set after construction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from torchjob.api.defaults import INIT_IMAGE

FORCE_DELETE_AFTER_S = 60.0  # past its deletionTimestamp, a pod stuck terminating (lost node) is force-deleted


class KubeflowApi(StrEnum):
    """Whether the operator serves Kubeflow's PyTorchJob API (`--kubeflow-api`)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


@dataclass(frozen=True, kw_only=True)
class PodOptions:
    """What the operator adds to every job's pods."""

    init_image: str = INIT_IMAGE
    wait_for_master: bool = True
    progress_url: str | None = None  # the progress endpoint pods report to (None: no progress env)


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    kubeconfig: str | None = None  # None: in-cluster, else ~/.kube/config
    namespace: str | tuple[str, ...] | None = None  # the namespace(s) watched (None: all)
    workers: int = 4  # concurrent reconciles per kind
    metrics_port: int = 8080  # /metrics, /healthz, /readyz
    metrics_auth: bool = True  # /metrics only for tokens allowed to get it (TokenReview + SubjectAccessReview)
    leader_elect: bool = False
    lease_namespace: str = "torchjob-system"
    lease_duration_s: int = 15
    init_image: str = INIT_IMAGE
    wait_for_master: bool = True
    gang_scheduler: str | None = None  # the scheduler of jobs that name none
    force_delete_after_s: float = FORCE_DELETE_AFTER_S
    progress_port: int = 0  # 0: no progress endpoint (and no progress env in the pods)
    progress_url: str | None = None  # default: the progress Service in the lease namespace
    progress_service: str = "torchjob-operator"
    progress_write_s: float = 5.0
    kubeflow_api: KubeflowApi = KubeflowApi.AUTO

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
