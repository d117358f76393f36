"""A write decided on a job never lands on another job of its name (deleted and made again since
it was read): kube/machinery/guarded_patch.py, against the real API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError

from tests.jobs import job_data
from torchjob.kube.controller.process.controller import job_gone
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


def test_the_refusal_needs_no_right_the_operator_s_roles_lack(kubeconfig: str, kube: Client, namespace: str) -> None:
    """The same refusal made as a ServiceAccount bound to the operator's job rules (install.JOB_RULES, the
    chart's too), which grant list on the jobs and not get: the job made again is looked up by a list of
    its name (a get was refused 403, so the write did not read as the job gone)."""
    from lightkube import KubeConfig
    from lightkube.core.async_client import AsyncClient
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ServiceAccount

    from torchjob.kube.objects.install import JOB_RULES, apply

    role = f"guarded-patch-{namespace}"
    apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op", "namespace": namespace}},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": role, "namespace": namespace}, "rules": JOB_RULES},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace}]}], kubeconfig)
    request = ServiceAccount.Token(metadata=ObjectMeta(name="op", namespace=namespace),
                                   spec=TokenRequestSpec(audiences=[], expirationSeconds=600))
    token = kube.create(request, "op", namespace=namespace).status.token
    admin = KubeConfig.from_file(kubeconfig).get().cluster
    cluster = {"server": admin.server, "certificate-authority": admin.certificate_auth,
               "certificate-authority-data": admin.certificate_auth_data, "insecure-skip-tls-verify": admin.insecure}
    as_operator = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {k: v for k, v in cluster.items() if v}}],
        "users": [{"name": "op", "user": {"token": token}}],
        "contexts": [{"name": "op", "context": {"cluster": "c", "user": "op"}}], "current-context": "op"})
    data = job_data("again-op", workers=1)
    data["metadata"]["namespace"] = namespace
    old = to_dict(kube.create(TorchJobRes.from_dict(data)))
    kube.delete(TorchJobRes, "again-op", namespace=namespace)
    kube.create(TorchJobRes.from_dict(data))

    async def on_the_new_one() -> None:
        api = Api(AsyncClient(config=as_operator))
        await api.patch_status("again-op", namespace, {"state": "Running"}, seen=old)

    with pytest.raises(ApiError) as refused:
        asyncio.run(on_the_new_one())
    assert job_gone(refused.value, (namespace, "again-op")), refused.value.status
