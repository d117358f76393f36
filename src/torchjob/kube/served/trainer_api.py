"""Whether this operator serves Kubeflow Trainer v2's TrainJob API: when the cluster has the
`trainjobs.trainer.kubeflow.org` CRD as torchjob installs it (`torchjob install --trainer-api` or the
chart's `trainerApi.enabled`: the CRD carries the label `app.kubernetes.io/managed-by: torchjob` or
the annotation `torchjob.dev/installed-by: torchjob`), as `--kubeflow-api=auto` decides for
PyTorchJob. A CRD that Kubeflow Trainer's own manifests installed means Trainer's controller runs
those TrainJobs: torchjob says so in its log and leaves them alone (two controllers never act on
the same TrainJob). Where torchjob serves the API, a TrainJob whose `spec.managedBy` is not Trainer's
TrainJob controller (Kueue's MultiKueue) is left alone too (kube/served/trainjob.py)."""

from __future__ import annotations

from typing import Any

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code
from torchjob.kube.served.trainer_objects import CRD_NAME, installed_by_torchjob


def decide(crd: dict[str, Any] | None, readable: bool) -> tuple[bool, str]:
    """(serve TrainJobs?, why), from the CRD as the cluster has it. Pure."""
    if not readable:
        return False, f"the {CRD_NAME} CRD could not be read (no RBAC rule: `torchjob install --trainer-api` adds it)"
    if crd is None:
        return False, f"no {CRD_NAME} CRD on this cluster (`torchjob install --trainer-api` installs it)"
    if not installed_by_torchjob(crd):
        return False, (f"the {CRD_NAME} CRD was not installed by torchjob (Kubeflow Trainer's?): its TrainJobs "
                       "are left to Trainer's controller")
    return True, f"the {CRD_NAME} CRD is torchjob's"


async def should_serve(api: ApiProtocol) -> tuple[bool, str]:
    readable = True
    try:
        crd = await api.find("CustomResourceDefinition", CRD_NAME, None)
    except Exception as e:
        if status_code(e) != 403:
            raise
        crd, readable = None, False
    return decide(crd, readable)
