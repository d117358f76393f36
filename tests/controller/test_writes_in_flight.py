"""The operator's writes in flight are bounded (kube/machinery/client.py WRITES_IN_FLIGHT): a round of a
job of thousands of pods asks for them all at once, and lightkube's HTTP pool (100 connections, the
watches holding some) left the rest waiting past the client's timeout: PoolTimeout, the round failed
and was retried with a backoff (bench/operator_scale.py --job-pods 1024: 23 pods/s)."""

from __future__ import annotations

import asyncio
from typing import Any

from torchjob.kube.machinery.client import WRITES_IN_FLIGHT, Api


class SlowClient:
    """Stands where lightkube's AsyncClient is: each create and delete takes a moment, and the most
    in flight at once is counted."""

    def __init__(self) -> None:
        self.now = self.most = self.calls = 0

    async def _call(self) -> None:
        self.now += 1
        self.calls += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.001)
        self.now -= 1

    async def create(self, obj: Any) -> Any:
        await self._call()
        return obj

    async def delete(self, *_: Any, **__: Any) -> None:
        await self._call()


def pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"j-worker-{i}", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_a_thousand_pods_asked_at_once_are_written_at_most_writes_in_flight_at_a_time() -> None:
    async def main() -> SlowClient:
        client = SlowClient()
        api = Api(client)  # type: ignore[arg-type]
        await asyncio.gather(*(api.create(pod(i)) for i in range(1000)),
                             *(api.delete("Pod", f"j-worker-{i}", "ns", grace_s=3) for i in range(500)))
        return client

    client = asyncio.run(main())
    assert client.calls == 1500
    assert client.most == WRITES_IN_FLIGHT < 100  # the pool's 100 connections, some of them the watches'
