"""Shipping a job's code to the cluster: its ConfigMap is created before the job (so that no pod
waits for it), then made the job's once the job has a uid; if the job is refused, the ConfigMap
goes again: nothing is left behind."""

from __future__ import annotations

from collections.abc import Callable

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.kube.machinery.client import status_code
from torchjob.kube.objects.code import code_configmap, owned_by


def configmap_name(job: TorchJob) -> str | None:
    for rspec in job.spec.pytorchReplicaSpecs.values():
        for v in rspec.template.spec.volumes or [] if rspec.template.spec else []:
            if v.name == "torchjob-code" and v.configMap is not None and v.configMap.name:
                return v.configMap.name
    return None


def with_code(kube: Client, job: TorchJob, ns: str, files: dict[str, bytes], create_job: Callable[[], str]) -> None:
    """Create the code's ConfigMap, then the job (`create_job` returns its uid), then own the ConfigMap."""
    name = configmap_name(job)
    if name is None:
        raise UserError(f"job {job.name!r} has code to ship but no torchjob-code volume")
    try:
        kube.create(ConfigMap.from_dict(code_configmap(name, job.name, ns, files)))  # type: ignore[call-overload]
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
    kube.patch(ConfigMap, name, owned_by(job.name, uid), namespace=ns, patch_type=PatchType.MERGE)
