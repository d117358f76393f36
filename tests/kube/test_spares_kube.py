"""runPolicy.warmSpares on a cluster (issue 32): the operator makes every restart a new pod, so spares
do nothing there; it runs the job all the same and says so in one Warning event (WarmSparesLocalOnly),
once per job: not again in later rounds, a restart of the job or of the operator."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event

from tests.jobs import job_data
from tests.kube.conftest import Operator, set_pod, wait_job
from tests.kube.test_operator import create, wait_pods
from torchjob.api.status import Reason
from torchjob.core.spares import ON_A_CLUSTER

pytestmark = pytest.mark.kube


def said(kube: Client, job: str, namespace: str) -> list[Any]:
    return [e for e in kube.list(Event, namespace=namespace, fields={"involvedObject.name": job})
            if e.reason == Reason.WARM_SPARES_LOCAL_ONLY]


def test_a_job_with_warm_spares_is_told_once_that_its_restarts_are_new_pods(
        kubeconfig: str, kube: Client, namespace: str, tmp_path: Path) -> None:
    op = Operator(kubeconfig, tmp_path / "operator.log")
    op.start()
    try:
        create(kube, job_data("spared", workers=1, restart_policy="OnFailure",
                              run_policy={"warmSpares": True, "backoffLimit": 3}), namespace)
        create(kube, job_data("plain", workers=1, restart_policy="OnFailure"), namespace)
        pods = {p.metadata.name: p for p in wait_pods(kube, "spared", namespace, 2)}
        wait_pods(kube, "plain", namespace, 2)
        for p in pods.values():
            set_pod(kube, p, "Running")
        wait_job(kube, "spared", namespace, lambda s: s.get("state") == "Running")
        # a rank fails: the operator restarts it as a new pod (no spare stands in)
        set_pod(kube, pods["spared-worker-0"], "Failed", exit_code=1)
        wait_job(kube, "spared", namespace, lambda s: s.get("restartCount") == 1)
        again = {p.metadata.name: p for p in wait_pods(kube, "spared", namespace, 2)}
        assert again["spared-worker-0"].metadata.uid != pods["spared-worker-0"].metadata.uid
        # an operator restart: what it said is not said again (it learns the job anew)
        op.stop()
        op.start()
        for p in again.values():
            set_pod(kube, p, "Running")
        for p in again.values():
            set_pod(kube, p, "Succeeded", exit_code=0)
        wait_job(kube, "spared", namespace, lambda s: s.get("state") == "Succeeded")
        op.wait_idle(0)  # every round it had to do, done
        end = time.monotonic() + 10
        while not said(kube, "spared", namespace) and time.monotonic() < end:  # recorded beside the round
            time.sleep(0.1)
        events = said(kube, "spared", namespace)
        assert [(e.type, e.message, e.count or 1) for e in events] == [("Warning", ON_A_CLUSTER, 1)], events
        assert said(kube, "plain", namespace) == []
    finally:
        op.stop()
        print(op.log.read_text()[-3000:])
