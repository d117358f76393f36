"""A write decided on a job never lands on another job of its name (deleted and made again since
it was read): kube/machinery/guarded_patch.py, against the real API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError

from tests.jobs import job_data
from torchjob.kube.controller.controller import job_gone
from torchjob.kube.machinery.client import Api, TorchJobRes, connect, to_dict
from torchjob.kube.machinery.guarded_patch import guarded_ops


def test_a_merge_patch_becomes_ops_that_merge_into_what_was_seen() -> None:
    seen = {"metadata": {"uid": "u"}, "status": {"torchjob": {"progress": {"step": 3}, "state": "Running"},
                                                 "conditions": [{"type": "Created"}]}}
    ops = guarded_ops("u", "status", {"torchjob": {"state": "Failed", "gone": None, "new": {"a": None, "b": 1}},
                                      "conditions": [], "a/b": 1}, seen)
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "add", "path": "/status/torchjob/state", "value": "Failed"},
        {"op": "add", "path": "/status/torchjob/gone", "value": None},
        {"op": "remove", "path": "/status/torchjob/gone"},
        {"op": "add", "path": "/status/torchjob/new", "value": {"b": 1}},
        {"op": "add", "path": "/status/conditions", "value": []},
        {"op": "add", "path": "/status/a~1b", "value": 1},
    ]
    assert guarded_ops("u", "status", {"state": "Created", "x": None}, {"metadata": {"uid": "u"}}) == [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "add", "path": "/status", "value": {"state": "Created"}}]


def run(kubeconfig: str, scenario: Any) -> Any:
    async def with_api() -> Any:
        api = Api(connect(kubeconfig))
        return await scenario(api)

    return asyncio.run(with_api())


def test_a_status_or_spec_write_on_a_job_made_again_since_it_was_read_is_refused_as_gone(
        kubeconfig: str, kube: Client, namespace: str) -> None:
    data = job_data("again", workers=1)
    data["metadata"]["namespace"] = namespace
    old = to_dict(kube.create(TorchJobRes.from_dict(data)))

    async def writes_on_the_old_one(api: Api) -> dict[str, Any]:
        stored = await api.patch_status("again", namespace, {"state": "Created",
                                                              "replicaStatuses": {"Master": {"active": 1}}}, seen=old)
        merged = await api.patch_status("again", namespace, {"replicaStatuses": {"Worker": {"active": 1}},
                                                             "restartCount": 0}, seen=stored)
        return merged

    merged = run(kubeconfig, writes_on_the_old_one)
    assert merged["status"]["replicaStatuses"] == {"Master": {"active": 1}, "Worker": {"active": 1}}  # merged
    kube.delete(TorchJobRes, "again", namespace=namespace)
    kube.create(TorchJobRes.from_dict(data))

    for write in ("status", "spec"):
        async def on_the_new_one(api: Api, write: str = write) -> None:
            if write == "status":
                await api.patch_status("again", namespace, {"state": "Running"}, seen=merged)
            else:
                await api.patch_spec("again", namespace, {"runPolicy": {"suspend": True}}, seen=merged)

        with pytest.raises(ApiError) as refused:
            run(kubeconfig, on_the_new_one)
        assert job_gone(refused.value, (namespace, "again"))
    new = kube.get(TorchJobRes, "again", namespace=namespace)
    assert not new.status and not (new.spec.get("runPolicy") or {}).get("suspend")
