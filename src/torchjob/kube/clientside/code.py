"""Shipping a job's code to the cluster: its ConfigMap is created before the job (so that no pod
waits for it), then made the job's once the job has a uid; if the job is refused, the ConfigMap
goes again: nothing is left behind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from torchjob.api.build import CODE_VOLUME
from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.kube.machinery.client import status_code
from torchjob.kube.objects.labels import LABEL_JOB
from torchjob.kube.objects.workload.code import code_configmap, owned_by


def _code_volume(job: TorchJob) -> Any:
    """The configMap source of the job's `torchjob-code` volume (`torchjob.api.build`), or None."""
    for rspec in job.spec.pytorchReplicaSpecs.values():
        for v in rspec.template.spec.volumes or [] if rspec.template.spec else []:
            if v.name == CODE_VOLUME and v.configMap is not None and v.configMap.name:
                return v.configMap
    return None


def configmap_of(job: TorchJob, files: Mapping[str, bytes]) -> dict[str, Any]:
    """The ConfigMap that carries the files (relative path -> content) under the keys the job's
    `torchjob-code` volume maps to those paths; no namespace (it goes where the job goes)."""
    volume = _code_volume(job)
    if volume is None:
        raise UserError(f"job {job.name!r} has code to ship but no {CODE_VOLUME} volume")
    paths = {item.key: item.path for item in volume.items or []}
    missing = sorted(set(paths.values()) - set(files))
    if missing:
        raise UserError(f"job {job.name!r}: its torchjob-code volume names files it does not ship: {missing}")
    doc = code_configmap(volume.name, job.name, "", {key: files[path] for key, path in paths.items()})
    del doc["metadata"]["namespace"]
    return doc


def with_code(kube: Client, configmap: dict[str, Any], ns: str, create_job: Callable[[], str]) -> None:
    """Create the code's ConfigMap, then the job (`create_job` returns its uid), then own the ConfigMap."""
    name = configmap["metadata"]["name"]
    job = configmap["metadata"]["labels"][LABEL_JOB]
    try:
        placed = {**configmap, "metadata": {**configmap["metadata"], "namespace": ns}}
        kube.create(ConfigMap.from_dict(placed))  # type: ignore[call-overload]
    except ApiError as e:
        if status_code(e) == 409:
            raise UserError(f"a ConfigMap named {name!r} already exists in {ns}",
                            fix=f"pick another --name, or delete it: kubectl delete configmap -n {ns} {name}")
        raise UserError(f"the API server refused the code's ConfigMap {name!r}: {e.status.message}")
    try:
        uid = create_job()
    except BaseException:
        kube.delete(ConfigMap, name, namespace=ns)
        raise
    kube.patch(ConfigMap, name, owned_by(job, uid), namespace=ns, patch_type=PatchType.MERGE)
