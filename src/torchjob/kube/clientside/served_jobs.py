"""The kinds torchjob's operator serves beside its own TorchJob (Kubeflow's PyTorchJob, Kubeflow
Trainer v2's TrainJob, T9k's PyTorchTrainingJob), as the client side finds, lists and reads them:
`list`, `describe`, `logs`, the dashboard and a handle show them beside TorchJobs, each with its kind.
A kind whose CRD is not installed has none (the API server answers 404 for the whole type); one the
user may not read (403) is left out too, so the TorchJobs they may see are still listed."""

from __future__ import annotations

from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.kube.clientside.job_pods import served
from torchjob.kube.machinery.client import status_code, to_dict
from torchjob.runtime import AmbiguousJob

MISSING = (403, 404)  # no such type (no CRD), or not the user's to read: none of that kind


def kinds() -> list[tuple[str, Any]]:
    """(the kind's name, its lightkube resource) of each kind served beside TorchJob, in the order
    `describe NAME` looks for one (a TorchJob of that name first)."""
    from torchjob.kube.machinery.client import PyTorchJobRes, T9kPyTorchTrainingJobRes, TrainJobRes

    return [("PyTorchJob", PyTorchJobRes), ("TrainJob", TrainJobRes), ("PyTorchTrainingJob", T9kPyTorchTrainingJobRes)]


def every_kind() -> list[tuple[str, Any]]:
    """TorchJob first, then the kinds served beside it."""
    from torchjob.kube.machinery.client import TorchJobRes

    return [("TorchJob", TorchJobRes), *kinds()]


def words(kind: str, res: Any) -> list[str]:
    """What `KIND/NAME` may say for a kind, as kubectl takes it: the kind, its plural, a short name,
    each also with the API group (`trainjobs.trainer.kubeflow.org`); any case."""
    plural, group = res._api_info.plural, res._api_info.resource.group
    short = ["tj"] if kind == "TorchJob" else []
    return [*(w for w in (kind.lower(), plural)), *short, f"{kind.lower()}.{group}", f"{plural}.{group}"]


KIND_HELP = "torchjob (tj), pytorchjob, trainjob, pytorchtrainingjob"


def parse_ref(ref: str) -> tuple[str | None, str]:
    """`NAME` -> (None, NAME); `KIND/NAME` (kubectl's `trainjob/foo`, `pytorchjobs/foo`, ...) -> (the
    kind, NAME). A word that is no kind torchjob shows is a UserError naming the kinds."""
    word, sep, name = ref.partition("/")
    if not sep:
        return None, ref
    kind = next((k for k, res in every_kind() if word.lower() in words(k, res)), None)
    if kind is None or not name or "/" in name:
        raise UserError(f"{ref!r} is not KIND/NAME with a kind torchjob shows",
                        fix=f"write NAME, or KIND/NAME with KIND one of {KIND_HELP} (e.g. trainjob/{name or 'NAME'})")
    return kind, name


def get(kube: Client, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The job of that kind and name, or None (none there, or its kind not installed or not readable)."""
    res = dict(every_kind())[kind]
    try:
        return to_dict(kube.get(res, name, namespace=namespace))
    except Exception as e:
        # A TorchJob that is not there; not its type missing (explain() says to install torchjob) nor a 403
        gone = isinstance(e, ApiError) and status_code(e) == 404 if kind == "TorchJob" else status_code(e) in MISSING
        if not gone:
            raise
        return None


def named(kube: Client, name: str, namespace: str) -> list[dict[str, Any]]:
    """Every job of that name, of any kind (a TorchJob first)."""
    return [found for kind, _ in every_kind() if (found := get(kube, kind, name, namespace)) is not None]


def ambiguous(name: str, found: list[dict[str, Any]], namespace: str) -> AmbiguousJob:
    """A bare name that several kinds hold: which, and how to name one."""
    return AmbiguousJob(name, [str(d.get("kind") or "TorchJob") for d in found], namespace)


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
