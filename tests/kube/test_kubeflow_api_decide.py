"""How `--kubeflow-api` decides whether torchjob serves PyTorchJobs (pure: the cluster's facts in)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from torchjob.api.errors import UserError
from torchjob.kube.objects.install.kubeflow_crd import crd
from torchjob.kube.served.kubeflow_api import decide
from torchjob.kube.served.kubeflow_mode import KubeflowApi

NOW = datetime(2026, 11, 23, tzinfo=UTC)
OURS = crd()
KUBEFLOWS: dict[str, Any] = {**OURS, "metadata": {"name": OURS["metadata"]["name"]}}  # no torchjob label


def lease(renewed_s_ago: float, holder: str = "training-operator-5d9c") -> dict[str, Any]:
    renewed = (NOW - timedelta(seconds=renewed_s_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15}}


def test_auto_serves_the_api_with_torchjobs_crd_and_no_kubeflow_operator() -> None:
    assert decide(KubeflowApi.AUTO, OURS, True, None, NOW)[0]
    assert decide(KubeflowApi.AUTO, OURS, True, lease(600), NOW)[0]  # a Lease long expired: it is gone


def test_auto_leaves_pytorchjobs_to_a_training_operator_at_work() -> None:
    serve, why = decide(KubeflowApi.AUTO, OURS, True, lease(3), NOW)
    assert not serve and "training-operator-5d9c" in why and "left to it" in why


def test_auto_leaves_a_crd_kubeflow_installed_alone_and_says_how_to_take_it() -> None:
    serve, why = decide(KubeflowApi.AUTO, KUBEFLOWS, True, None, NOW)
    assert not serve and "--kubeflow-api=on" in why


def test_without_the_crd_auto_serves_nothing_and_on_is_an_error_with_the_fix() -> None:
    assert decide(KubeflowApi.AUTO, None, True, None, NOW) == (False, "no pytorchjobs.kubeflow.org CRD on this cluster")
    with pytest.raises(UserError) as e:
        decide(KubeflowApi.ON, None, True, None, NOW)
    assert "torchjob install --kubeflow-api" in (e.value.fix or "")


def test_on_serves_even_beside_kubeflow_and_says_the_risk_off_never_serves() -> None:
    serve, why = decide(KubeflowApi.ON, KUBEFLOWS, True, lease(3), NOW)
    assert serve and "two controllers" in why
    assert decide(KubeflowApi.OFF, OURS, True, None, NOW) == (False, "--kubeflow-api=off")


def test_a_crd_it_may_not_read_does_not_stop_auto() -> None:
    serve, why = decide(KubeflowApi.AUTO, None, False, None, NOW)
    assert serve and "could not be read" in why
