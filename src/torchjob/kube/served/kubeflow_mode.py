"""`--kubeflow-api`'s values: whether this operator serves Kubeflow's PyTorchJob API (how `auto`
decides: kube/served/kubeflow_api.py). Apart from that module so that the command line reads them
without loading the API client."""

from __future__ import annotations

from enum import StrEnum


class KubeflowApi(StrEnum):
    AUTO = "auto"  # when the cluster has the CRD as torchjob installs it and Kubeflow's operator is not at work
    ON = "on"  # always
    OFF = "off"  # never
