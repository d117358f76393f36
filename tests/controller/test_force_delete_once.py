"""A pod stuck terminating is force-deleted once, not once a round (kube/controller/round/reconciler.py
`_force_delete_stuck`): a gang restart of one job of 4,096 pods on nodes slow to delete them had every
round (one per pod event) ask again for each stuck pod, 141,000 force deletes in a few minutes, and the
operator's pool and log drowned in them (bench/operator_scale.py --job-pods 4096). One that failed is
asked again in a later round."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta

from tests.controller.fakeapi import FakeApi, api_error
from tests.controller.test_sequencing import KEY, NS, one_round, run, settled, synced, torchjob


class SlowNode(FakeApi):
    """A force delete (grace 0) of a pod is in flight until the test lets it go, or fails once."""

    def __init__(self) -> None:
        super().__init__()
        self.forced: list[str] = []
        self.go = asyncio.Event()
        self.fail_first = False

    async def delete(self, kind: str, name: str, namespace: str, grace_s: int | None = None) -> None:
        if kind == "Pod" and grace_s == 0:
            self.forced.append(name)
            if self.fail_first and len(self.forced) == 1:
                raise api_error(500, "etcd leader changed")
            await self.go.wait()
        await super().delete(kind, name, namespace, grace_s)


def stuck(api: FakeApi, name: str) -> None:
    """The pod is being deleted since two minutes, its node silent (no kubelet confirms its end)."""
    pod = copy.deepcopy(api.objects[("Pod", NS, name)])
    since = datetime.now(UTC) - timedelta(seconds=120)
    pod["metadata"]["deletionTimestamp"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    api._store(pod, "MODIFIED")


def rounds(fail_first: bool) -> list[str]:
    out: list[str] = []

    async def scenario() -> None:
        api = SlowNode()
        api.fail_first = fail_first
        api.put(torchjob())
        async with synced(api) as c:
            await one_round(api, c)
            stuck(api, "demo-worker-1")
            await settled(api, c)
            for _ in range(3):
                await c.reconciler.reconcile(KEY)
                for _ in range(20):  # the spawned deletes start (and the failed one ends)
                    await asyncio.sleep(0)
            out.extend(api.forced)
            api.go.set()

    run(scenario)
    return out


def test_a_stuck_pod_is_force_deleted_once_however_many_rounds_come() -> None:
    assert rounds(fail_first=False) == ["demo-worker-1"]  # one a round before: three


def test_a_force_delete_that_failed_is_asked_again() -> None:
    assert rounds(fail_first=True) == ["demo-worker-1", "demo-worker-1"]
