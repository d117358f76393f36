"""A gang restart's deletes are asked together (kube/controller/round/reconciler.py `_apply`), as its creates
are: one awaited after the other, a job of 4,096 pods took its round that many round trips to stop
(bench/operator_scale.py --job-pods). Against the recording fake API (tests/controller/fakeapi.py)."""

from __future__ import annotations

import asyncio

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import KEY, NS, one_round, run, settled, synced, torchjob


class HeldDeletes(FakeApi):
    """Each pod delete waits until the test lets them all go: how many were asked before any answer."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.waiting = 0
        self.go = asyncio.Event()

    async def delete(self, kind: str, name: str, namespace: str, grace_s: int | None = None) -> None:
        if self.hold and kind == "Pod":
            self.waiting += 1
            await self.go.wait()
        await super().delete(kind, name, namespace, grace_s)


def test_a_gang_restart_asks_for_every_pod_s_delete_before_any_answers() -> None:
    async def scenario() -> None:
        api = HeldDeletes()
        api.put(torchjob(workers=7))
        async with synced(api) as c:
            await one_round(api, c)
            pods = api.named("Pod", NS)
            assert len(pods) == 8
            for pod in pods:
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            api.kubelet("demo-worker-3", NS, "Failed", exit_code=1)  # OnFailure: the gang restarts
            await settled(api, c)
            api.hold = True
            round_ = asyncio.create_task(c.reconciler.reconcile(KEY))
            for _ in range(200):
                if api.waiting == 7 or round_.done():
                    break
                await asyncio.sleep(0)
            asked = api.waiting
            api.go.set()
            await round_
            # the 7 running pods stopped at once (one before the fix)
            assert asked == 7, f"{asked} pod deletes asked before the first answered, of 7"
            assert api.named("Pod", NS) == ["demo-worker-3"]  # its verdict is out: it goes in a later round

    run(scenario)
