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
    return decide_crd(CRD_NAME, "--trainer-api", crd, readable,
                      "(Kubeflow Trainer's?): its TrainJobs are left to Trainer's controller")


def decide_crd(name: str, flag: str, crd: dict[str, Any] | None, readable: bool, theirs: str) -> tuple[bool, str]:
    """(serve the kind?, why) for an API whose CRD `torchjob install FLAG` installs: served when the CRD
    is torchjob's; `theirs` says whose it is otherwise. Pure."""
    if not readable:
        return False, f"the {name} CRD could not be read (no RBAC rule: `torchjob install {flag}` adds it)"
    if crd is None:
        return False, f"no {name} CRD on this cluster (`torchjob install {flag}` installs it)"
    if not installed_by_torchjob(crd):
        return False, f"the {name} CRD was not installed by torchjob {theirs}"
    return True, f"the {name} CRD is torchjob's"


async def read_crd(api: ApiProtocol, name: str) -> tuple[dict[str, Any] | None, bool]:
    """The CRD of that name (None: there is none), and whether it could be read at all (403: no rule)."""
    try:
        return await api.find("CustomResourceDefinition", name, None), True
    except Exception as e:
        if status_code(e) != 403:
            raise
        return None, False


async def should_serve(api: ApiProtocol) -> tuple[bool, str]:
    return decide(*await read_crd(api, CRD_NAME))
