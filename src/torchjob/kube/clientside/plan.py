"""What `--kube` would create, offline: the plan of a job on a cluster (`Runtime.dryrun`). The
objects the operator makes for its first attempt (`render --kube`), from the functions the operator
makes them with, and the documents this side creates (`run --kube --dry-run -o yaml`): the job, and
the ConfigMap that carries its code before it."""

from __future__ import annotations

from typing import Any

from torchjob.api.errors import UserError
from torchjob.api.model import TorchJob
from torchjob.core.policies.spares import on_a_cluster
from torchjob.dialects.convert import explicit
from torchjob.kube.clientside.code import configmap_of
from torchjob.kube.objects.labels.ownership import as_torchjob
from torchjob.kube.objects.workload.pods import manifests
from torchjob.runtime import Code


class KubePlan:
    """A job for a cluster and the files it ships (relative path -> content, as the builder keyed
    them); both are checked and placed here, before anything is sent."""

    def __init__(self, job: TorchJob, code: Code | None = None) -> None:
        from torchjob.kube.objects.install import DEFAULT_PROGRESS_URL

        self.job = job
        self.code = code
        self.notes: list[str] = []
        self.warnings = [w for w in (on_a_cluster(job),) if w is not None]  # warm spares: local runs only
        self.hint: str | None = None
        self.objects = manifests(as_torchjob(job), progress_url=DEFAULT_PROGRESS_URL)  # as the operator makes them
        # created before the job, so that no pod waits for it
        self.configmap: dict[str, Any] | None = configmap_of(job, code) if code is not None else None

    def data(self) -> Any:
        return self.objects

    def text(self) -> str:
        import yaml

        return yaml.safe_dump_all(self.objects, sort_keys=False).rstrip()

    def documents(self) -> list[dict[str, Any]]:
        return [*([self.configmap] if self.configmap is not None else []), explicit(self.job)]


def refuse_without_image(job: TorchJob) -> None:
    """A container without `image` makes pods the API server refuses after the job is created: refused
    here, before anything is, naming the field (a job built from flags is refused earlier: --image)."""
    from torchjob.api.build import EXAMPLE_IMAGE

    for rtype, rspec in job.spec.pytorchReplicaSpecs.items():
        pod = rspec.template.spec
        for field, containers in (("initContainers", pod.initContainers or []), ("containers", pod.containers)):
            for i, c in enumerate(containers):
                if not c.image:
                    raise UserError(
                        f"job {job.name}: spec.pytorchReplicaSpecs.{rtype}.template.spec.{field}[{i}] ({c.name}) "
                        "has no image: a pod on a cluster runs an image",
                        fix=f"set its image: (e.g. image: {EXAMPLE_IMAGE}, with python, torch and your script in "
                            "it), or run the document locally (without --kube), where no image is needed")
