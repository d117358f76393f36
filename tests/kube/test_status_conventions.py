"""Status as Kubernetes clients expect it: observedGeneration says whether the operator has acted on
a change; the state and conditions are right after every transition; a reconcile that keeps
failing backs off per job and says why in an Event. On a real API server."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from lightkube import Client
from lightkube.models.core_v1 import ResourceQuotaSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, ResourceQuota
from lightkube.types import PatchType

from tests.jobs import job_data
from tests.kube.conftest import Operator, wait_job
from tests.kube.test_operator import create, wait_pods
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.machinery.queue import WorkQueue


def generation(kube: Client, name: str, namespace: str) -> int:
    return int(kube.get(TorchJobRes, name, namespace=namespace).metadata.generation or 0)


def events(kube: Client, name: str, namespace: str, reason: str) -> list[Any]:
    return [e for e in kube.list(Event, namespace=namespace)
            if e.involvedObject.name == name and e.reason == reason]


def test_observed_generation_tells_a_client_the_operator_acted_on_its_change(
        kube: Client, namespace: str, operator: Operator) -> None:
    create(kube, job_data("gen", workers=1), namespace)
    wait_pods(kube, "gen", namespace, 2)
    first = generation(kube, "gen", namespace)
    wait_job(kube, "gen", namespace, lambda s: s.get("observedGeneration") == first)
    kube.patch(TorchJobRes, "gen", {"spec": {"runPolicy": {"suspend": True}}}, namespace=namespace,
               patch_type=PatchType.MERGE)
    later = generation(kube, "gen", namespace)
    assert later > first
    status = wait_job(kube, "gen", namespace, lambda s: s.get("observedGeneration") == later)
    # Acted on means decided: the same write carries the new state and its condition.
    assert status["state"] == "Suspended"
    assert any(c["type"] == "Suspended" and c["status"] == "True" for c in status["conditions"])


def test_a_job_the_controller_refuses_shows_failed_in_its_state(
        kube: Client, namespace: str, operator: Operator) -> None:
    data = job_data("bad", workers=1)
    # Valid for the CRD's schema, refused by the API server when the pod is made (a mistake of the
    # user's): the job fails with the server's words, and its state says Failed at once.
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "1"}, "requests": {"cpu": "2"}}
    create(kube, data, namespace)
    status = wait_job(kube, "bad", namespace, lambda s: s.get("state") == "Failed")
    assert status["failure"]["reason"] == "InvalidSpec" and "is invalid" in status["failure"]["message"]
    assert any(c["type"] == "Failed" and c["reason"] == "InvalidSpec" for c in status["conditions"])


def test_a_reconcile_that_keeps_failing_backs_off_and_says_why(
        kube: Client, namespace: str, operator: Operator) -> None:
    # A quota of no pods: every pod create is forbidden (403), an error that is not the job's
    # mistake and does not go away by itself. The operator retries, ever less often, and says so.
    kube.create(ResourceQuota(metadata=ObjectMeta(name="no-pods", namespace=namespace),
                              spec=ResourceQuotaSpec(hard={"pods": "0"})))
    # The test plays kube-controller-manager's quota controller: admission enforces only a quota
    # whose status has been counted.
    kube.patch(ResourceQuota.Status, "no-pods", {"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}},
               namespace=namespace, patch_type=PatchType.MERGE)
    create(kube, job_data("quota", workers=1), namespace)
    end = time.monotonic() + 60
    while time.monotonic() < end and len(events(kube, "quota", namespace, "ReconcileError")) < 4:
        time.sleep(0.2)
    said = sorted(events(kube, "quota", namespace, "ReconcileError"), key=lambda e: e.eventTime or e.firstTimestamp)
    assert len(said) >= 4, [e.message for e in said]
    assert "1 in a row" in (said[0].message or "") and "forbidden" in (said[0].message or "").lower()
    # the delay doubles with each failure in a row: as the operator says it (the events' own times also
    # hold the API server's latency, which a busy machine made larger than the first delays)
    delays = [float(re.search(r"next try in ([\d.]+)s", e.message or "").group(1)) for e in said]  # type: ignore[union-attr]
    assert delays == sorted(delays) and delays[-1] >= delays[0] * 4, delays
    kube.delete(ResourceQuota, "no-pods", namespace=namespace)
    wait_pods(kube, "quota", namespace, 2, timeout=60)  # retried until it works


def test_the_queue_backs_off_per_key_and_forgets_on_success() -> None:
    async def scenario() -> list[float]:
        q = WorkQueue(base_delay_s=0.01, max_delay_s=0.04)
        delays = [q.add_rate_limited(("ns", "a")) for _ in range(4)]
        assert q.add_rate_limited(("ns", "b")) == 0.01  # another job's failures do not slow this one
        q.succeeded(("ns", "a"))
        delays.append(q.add_rate_limited(("ns", "a")))
        assert await asyncio.wait_for(q.get(), 1) in {("ns", "a"), ("ns", "b")}
        return delays

    assert asyncio.run(scenario()) == [0.01, 0.02, 0.04, 0.04, 0.01]
