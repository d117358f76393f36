"""A gang restart's deletes are asked together (kube/controller/round/reconciler.py `_apply`), as its creates
are: one awaited after the other, a job of 4,096 pods took its round that many round trips to stop
(bench/operator_scale.py --job-pods). Against the recording fake API (tests/controller/fakeapi.py)."""

from __future__ import annotations

import asyncio
from typing import Any

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


class LateDeleteEvents(FakeApi):
    """The pods' DELETED events held back until the test lets them go: the informer's cache behind the server."""

    def __init__(self) -> None:
        super().__init__()
        self.late = False
        self.held: list[tuple[str, str, dict[str, object]]] = []

    def _publish(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        if self.late and kind == "Pod" and event == "DELETED":
            self.held.append((kind, event, obj))
            return
        super()._publish(kind, event, obj)

    def catch_up(self) -> None:
        self.late, held, self.held = False, self.held, []
        for kind, event, obj in held:
            super()._publish(kind, event, obj)  # type: ignore[arg-type]


def test_a_gang_restart_asks_each_pod_s_delete_once_while_the_cache_still_shows_it() -> None:
    """Rounds run again before the informer has seen the deleted pods go (kube/controller/pods/deletes.py): each
    pod's delete is asked once, not once a round (a 1,024-pod gang restart asked 3,307 of pods already gone)."""
    async def scenario() -> None:
        api = LateDeleteEvents()
        api.put(torchjob(workers=7, restart_policy="OnFailure", restart_scope=None))  # a failure restarts the gang
        async with synced(api) as c:
            await one_round(api, c)
            for pod in api.named("Pod", NS):
                api.kubelet(pod, NS, "Running")
            await one_round(api, c)
            api.kubelet("demo-worker-3", NS, "Failed", exit_code=1)  # OnFailure: the gang restarts
            await settled(api, c)
            api.late = True
            for _ in range(3):
                await c.reconciler.reconcile(KEY)
            deletes = [call.name for call in api.calls if call.verb == "delete" and call.kind == "Pod"]
            assert sorted(deletes) == sorted(set(deletes)) and len(deletes) >= 7, deletes
            api.catch_up()
            for _ in range(5):  # the failed pod's verdict out, then it goes, then the next attempt's pods
                await one_round(api, c)
            pods = api.named("Pod", NS)
            assert len(pods) == 8, pods  # made once the old ones were seen gone
            assert len([call for call in api.calls if call.verb == "delete" and call.kind == "Pod"]) == 8

    run(scenario)
