"""The informer's cache rules and the controller's supervision of its informers (no cluster)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig

from tests.kube.conftest import free_port
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.process.controller import Controller
from torchjob.kube.machinery.client import Api, to_dict
from torchjob.kube.machinery.informer import Informer, metadata_only, pod_summary


def pod(rv: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a-master-0", "namespace": "ns", "resourceVersion": rv,
                     "labels": {"torchjob.dev/job-name": "a"},
                     "managedFields": [{"manager": "torchjob-operator", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"containers": [{"name": "pytorch", "image": "x", "env": [{"name": "RANK", "value": "0"}]}]},
        "status": {"phase": phase},
    }


def unreachable_api() -> Api:
    """An API server address where nothing listens: every call is refused."""
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x",
    })
    return Api(AsyncClient(config=config))


def test_an_object_written_by_the_controller_never_replaces_a_newer_cached_one() -> None:
    informer = Informer(unreachable_api(), "Pod", None, lambda o: None, transform=pod_summary)
    informer.cache[("ns", "a-master-0")] = pod_summary(pod("20", "Running"))
    # A create's answer that arrives after the watch already delivered a newer version:
    kept = informer.remember(pod("10", "Pending"))
    assert kept["status"]["phase"] == "Running"
    assert informer.remember(pod("30", "Failed"))["status"]["phase"] == "Failed"
    assert informer.cache[("ns", "a-master-0")]["metadata"]["resourceVersion"] == "30"


def test_cached_pods_keep_metadata_and_status_only() -> None:
    cached = pod_summary(to_dict(pod("1", "Running")))
    assert set(cached) == {"apiVersion", "kind", "metadata", "status"}
    assert "managedFields" not in cached["metadata"]
    assert cached["metadata"]["labels"] == {"torchjob.dev/job-name": "a"}
    assert set(metadata_only(pod("1", "Running"))) == {"apiVersion", "kind", "metadata"}


def test_a_failed_first_list_is_retried_instead_of_ending_the_informer() -> None:
    async def scenario() -> None:
        informer = Informer(unreachable_api(), "Pod", None, lambda o: None)
        task = asyncio.create_task(informer.run())
        await asyncio.sleep(1.5)  # connection refused, at least twice
        assert not task.done() and not informer.synced.is_set()
        task.cancel()

    asyncio.run(scenario())


def test_the_controller_stops_with_the_error_of_an_informer_that_died_before_syncing() -> None:
    async def scenario() -> None:
        controller = Controller(unreachable_api(), OperatorConfig())

        async def broken() -> None:
            raise RuntimeError("the pod informer broke")

        controller.pods.run = broken  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="pod informer broke"):
            await asyncio.wait_for(controller.run(), timeout=10)
        assert not controller.ready.is_set()

    asyncio.run(scenario())
