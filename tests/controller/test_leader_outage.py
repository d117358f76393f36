"""Leader election through an API server that cannot be reached for a while (issue 22's chaos run:
a restarted kube-apiserver made the standby operator exit, and a leader gave up at its first failed
renewal). A real lightkube client against a port nothing listens on: a real transport error."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease

from torchjob.kube.machinery.client import Api, outlasting, passing
from torchjob.kube.machinery.leader import LeaderElector, LostLease


def unreachable() -> Api:
    with socket.socket() as s:  # a port that was free a moment ago: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = KubeConfig.from_dict({
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}],
        "current-context": "gone"})
    return Api(AsyncClient(config=config))


def api_error(code: int) -> ApiError:
    request = httpx2.Request("GET", "https://api/apis/coordination.k8s.io/v1/leases/x")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": f"answer {code}", "code": code}
    return ApiError(response=httpx2.Response(code, json=body, request=request))


@pytest.mark.parametrize(("error", "passes"), [
    (httpx2.ConnectError("All connection attempts failed"), True),
    (httpx2.ReadError("connection reset"), True),
    (asyncio.TimeoutError(), True),
    (api_error(503), True),
    (api_error(429), True),
    (api_error(500), True),
    (api_error(403), False),  # no RBAC on Leases: the installer's mistake, said at once
    (api_error(404), False),
    (ValueError("a bug"), False),
])
def test_only_an_api_server_out_of_reach_or_overloaded_is_ridden_out(error: BaseException, passes: bool) -> None:
    assert passing(error) is passes


def test_a_candidate_believes_a_refusal_only_once_it_lasts() -> None:
    async def go() -> float:
        refusing = Api(RefusingClient())  # type: ignore[arg-type]
        elector = LeaderElector(refusing, "torchjob-operator", "torchjob-system", "me", renew_s=0.2,
                                settle_s=1.0)
        start = time.monotonic()
        with pytest.raises(ApiError, match="answer 403"):
            await elector.acquire()
        return time.monotonic() - start

    assert 0.9 <= asyncio.run(go()) < 3.0


class RefusingClient:
    """An API server that answers 403 to everything (RBAC without Leases)."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise api_error(403)


def test_a_candidate_keeps_trying_while_the_api_server_is_away() -> None:
    async def go() -> None:
        elector = LeaderElector(unreachable(), "torchjob-operator", "torchjob-system", "me", duration_s=3,
                                renew_s=0.2)
        task = asyncio.create_task(elector.acquire())
        await asyncio.sleep(1.5)
        assert not task.done(), task  # before the fix: "cannot reach the Kubernetes API server", exit
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_a_leader_gives_up_at_its_renew_deadline_not_at_its_first_failed_renewal() -> None:
    async def go() -> float:
        elector = LeaderElector(unreachable(), "torchjob-operator", "torchjob-system", "me", duration_s=3,
                                renew_s=0.2)
        start = time.monotonic()
        lost = r"not renewed for [\d.]+s \(the renew deadline is 2s\)"
        with pytest.raises(LostLease, match=lost):
            await elector.keep()
        return time.monotonic() - start

    took = asyncio.run(go())
    # The deadline is two thirds of the 3 s lease: it retried for about 2 s, and stopped before the
    # lease could expire for the others (3 s).
    assert 1.2 <= took < 3.0, took


def test_a_start_up_call_outlasts_a_restarting_api_server_and_not_a_refusal() -> None:
    tries: list[float] = []

    async def flaky() -> str:  # the API server comes back on the third try
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise httpx2.ConnectError("All connection attempts failed")
        return "served"

    assert asyncio.run(outlasting(flaky, "asking")) == "served"
    assert len(tries) == 3 and tries[2] - tries[0] >= 1.4  # 0.5 s, then 1 s between tries

    refused: list[float] = []

    async def forbidden() -> str:  # a restarted API server refuses for a moment; this one for good
        refused.append(time.monotonic())
        raise api_error(403)

    with pytest.raises(ApiError, match="answer 403"):
        asyncio.run(outlasting(forbidden, "asking", settle_s=1.0))
    assert len(refused) >= 2 and refused[-1] - refused[0] < 2.0  # believed after settle_s

    async def not_found() -> str:
        refused.append(0.0)
        raise api_error(404)

    refused.clear()
    with pytest.raises(ApiError, match="answer 404"):
        asyncio.run(outlasting(not_found, "asking"))
    assert refused == [0.0]  # said at once

    async def gone() -> Any:  # a real client, a port nobody listens on: given up within the bound
        return await unreachable().client.get(Lease, "torchjob-operator", namespace="torchjob-system")

    start = time.monotonic()
    with pytest.raises(httpx2.TransportError):
        asyncio.run(outlasting(gone, "the lease", within_s=2.0))
    assert time.monotonic() - start < 4.0
