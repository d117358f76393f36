"""The kinds torchjob's operator serves beside its own TorchJob (Kubeflow's PyTorchJob, Kubeflow
Trainer v2's TrainJob, T9k's PyTorchTrainingJob), as the client side finds, lists and reads them:
`list`, `describe`, `logs`, the dashboard and a handle show them beside TorchJobs, each with its kind.
A kind whose CRD is not installed has none (the API server answers 404 for the whole type); one the
user may not read (403) is left out too, so the TorchJobs they may see are still listed."""

from __future__ import annotations

from typing import Any

from lightkube import Client

from torchjob.api.model import TorchJob
from torchjob.kube.clientside.job_pods import served
from torchjob.kube.machinery.client import status_code, to_dict

MISSING = (403, 404)  # no such type (no CRD), or not the user's to read: none of that kind


def kinds() -> list[tuple[str, Any]]:
    """(the kind's name, its lightkube resource) of each kind served beside TorchJob, in the order
    `describe NAME` looks for one (a TorchJob of that name first)."""
    from torchjob.kube.machinery.client import PyTorchJobRes, T9kPyTorchTrainingJobRes, TrainJobRes

    return [("PyTorchJob", PyTorchJobRes), ("TrainJob", TrainJobRes), ("PyTorchTrainingJob", T9kPyTorchTrainingJobRes)]


def resource_of(data: dict[str, Any]) -> Any:
    """The lightkube resource of a stored served job (None for a TorchJob)."""
    return dict(kinds()).get(str(data.get("kind"))) if data.get("kind") != "TorchJob" else None


def find(kube: Client, name: str, namespace: str) -> dict[str, Any] | None:
    """The served job of that name (the first kind that has one), or None."""
    for _, res in kinds():
        try:
            return to_dict(kube.get(res, name, namespace=namespace))
        except Exception as e:
            if status_code(e) not in MISSING:
                raise
    return None


def list_all(kube: Client, namespace: str) -> list[dict[str, Any]]:
    """Every served job in a namespace (or every one: `*`), kind after kind."""
    out: list[dict[str, Any]] = []
    for _, res in kinds():
        try:
            out += [to_dict(o) for o in kube.list(res, namespace=namespace)]
        except Exception as e:
            if status_code(e) not in MISSING:
                raise
    return out


def kind_name(data: dict[str, Any]) -> str | None:
    """What list, describe and the dashboard call a job's kind: None for a TorchJob, else its kind."""
    kind = data.get("kind")
    return None if not kind or kind == "TorchJob" else str(kind)


class Reader:
    """Reads stored jobs of any served kind as TorchJobs, as the operator reads them (the same reader):
    a TrainJob with the runtime it names, fetched once per reader (a listing reads many). One that
    cannot be read (its runtime deleted, a bad document the operator failed) reads as a job of no
    replicas: its status, which says why, is still shown."""

    def __init__(self, kube: Client | None) -> None:
        self.kube = kube
        self._runtimes: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}

    def read(self, data: dict[str, Any]) -> TorchJob:
        from torchjob.kube.served.reading import Unreadable

        kind = served(data)
        try:
            return kind.read(data, self._needs(data) if kind.needs is not None else [])
        except Unreadable:
            if kind_name(data) is None:
                raise
            meta = data.get("metadata") or {}
            return TorchJob.model_validate({"metadata": {k: meta[k] for k in ("name", "namespace", "uid")
                                                         if meta.get(k)}, "spec": {"pytorchReplicaSpecs": {}}})

    def _needs(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A TrainJob's runtime, as the cluster has it now ([] when there is none)."""
        from torchjob.kube.machinery.client import ClusterTrainingRuntimeRes, TrainingRuntimeRes
        from torchjob.kube.served.trainer_objects import CLUSTER_RUNTIME_KIND, RUNTIME_KIND
        from torchjob.kube.served.trainjob import runtime_ref

        key = runtime_ref(data)
        kind, name, namespace = key
        if self.kube is None or not name or kind not in (RUNTIME_KIND, CLUSTER_RUNTIME_KIND):
            return []
        if key not in self._runtimes:
            try:
                found = self.kube.get(TrainingRuntimeRes, name, namespace=namespace) if kind == RUNTIME_KIND \
                    else self.kube.get(ClusterTrainingRuntimeRes, name)
                self._runtimes[key] = [to_dict(found)]
            except Exception as e:
                if status_code(e) not in MISSING:
                    raise
                self._runtimes[key] = []
        return self._runtimes[key]
