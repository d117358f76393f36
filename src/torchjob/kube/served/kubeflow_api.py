"""Whether this operator serves Kubeflow's `kubeflow.org/v1` PyTorchJob API (`--kubeflow-api`).

`on` serves it; `off` never does; `auto` (the default) serves it when the cluster has the
`pytorchjobs.kubeflow.org` CRD as torchjob installed it (`torchjob install --kubeflow-api`: the CRD
carries the label `app.kubernetes.io/managed-by: torchjob`) and Kubeflow's training-operator does
not hold its leader-election Lease. A CRD from Kubeflow's own manifests, or a training-operator
at work, means its PyTorchJobs are Kubeflow's: torchjob says so and leaves them alone."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from torchjob.api.errors import UserError
from torchjob.kube.machinery.client import Api, parse_time, status_code
from torchjob.kube.objects.install.kubeflow_crd import CRD_NAME
from torchjob.kube.served.kubeflow_mode import KubeflowApi

# Kubeflow training-operator v1.8.1's leader election (cmd/training-operator.v1/main.go), in the
# namespace of its default install.
KUBEFLOW_LEASE = ("kubeflow", "1ca428e5.training-operator.kubeflow.org")
MANAGED_BY = ("app.kubernetes.io/managed-by", "torchjob")


def lease_held(lease: dict[str, Any] | None, now: datetime) -> bool:
    spec = (lease or {}).get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    return bool(spec.get("holderIdentity")) and renewed is not None and (
        now < renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 15)))


def decide(mode: KubeflowApi, crd: dict[str, Any] | None, crd_readable: bool, lease: dict[str, Any] | None,
           now: datetime) -> tuple[bool, str]:
    """(serve PyTorchJobs?, why), from what the cluster has. Pure."""
    if mode is KubeflowApi.OFF:
        return False, "--kubeflow-api=off"
    if crd is None and crd_readable:
        if mode is KubeflowApi.ON:
            raise UserError(f"--kubeflow-api=on, but the {CRD_NAME} CRD is not installed on this cluster",
                            fix="run `torchjob install --kubeflow-api` (or --crd-only --kubeflow-api), or pass "
                                "--kubeflow-api=auto")
        return False, f"no {CRD_NAME} CRD on this cluster"
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    if lease_held(lease, now):
        why = f"Kubeflow's training-operator ({holder}) holds its Lease {KUBEFLOW_LEASE[0]}/{KUBEFLOW_LEASE[1]}"
        if mode is KubeflowApi.ON:
            return True, f"--kubeflow-api=on although {why}: two controllers will act on the same PyTorchJobs"
        return False, f"{why}: its PyTorchJobs are left to it (stop it, then restart torchjob, to move them)"
    labels = ((crd or {}).get("metadata") or {}).get("labels") or {}
    if mode is KubeflowApi.AUTO and crd is not None and labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
        return False, (f"the {CRD_NAME} CRD was not installed by torchjob (Kubeflow's manifests?): pass "
                       f"--kubeflow-api=on to serve its PyTorchJobs here")
    return True, f"--kubeflow-api={mode}" + ("" if crd_readable else f" (the {CRD_NAME} CRD could not be read)")


async def should_serve(api: Api, mode: KubeflowApi, now: datetime) -> tuple[bool, str]:
    """`decide`, from the cluster: the CRD and Kubeflow's Lease (either may be unreadable for lack
    of RBAC: then as if absent for the Lease, unknown for the CRD)."""
    if mode is KubeflowApi.OFF:
        return decide(mode, None, True, None, now)
    crd_readable = True
    try:
        crd = await api.find("CustomResourceDefinition", CRD_NAME, None)
    except Exception as e:
        if status_code(e) != 403:
            raise
        crd, crd_readable = None, False
    try:
        lease = await api.find("Lease", KUBEFLOW_LEASE[1], KUBEFLOW_LEASE[0])
    except Exception as e:
        if status_code(e) != 403:
            raise
        lease = None
    return decide(mode, crd, crd_readable, lease, now)
