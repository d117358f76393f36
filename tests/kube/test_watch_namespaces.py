"""`torchjob operator --namespace a --namespace b` (the chart's watchNamespaces): its informers list and
watch those namespaces only, against the real API server, and are synced once every one is listed."""

from __future__ import annotations

import asyncio
import uuid

from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service

from torchjob.kube.machinery.client import Api, connect
from torchjob.kube.machinery.informer import Informer


def test_an_informer_on_two_namespaces_sees_those_and_no_other(kubeconfig: str, kube: Client) -> None:
    a, b, c = (f"wn-{uuid.uuid4().hex[:6]}" for _ in range(3))
    for ns in (a, b, c):
        kube.create(Namespace(metadata=ObjectMeta(name=ns)))

    def service(ns: str, name: str) -> None:
        kube.create(Service(metadata=ObjectMeta(name=name, namespace=ns), spec={"ports": [{"port": 80}]}))

    for ns in (a, b, c):
        service(ns, "before")

    async def scenario() -> set[tuple[str, str]]:
        api = Api(connect(kubeconfig))
        informer = Informer(api, "Service", (a, b), lambda o: None)
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
            assert set(informer.cache) == {(a, "before"), (b, "before")}
            for ns in (b, c):
                await asyncio.to_thread(service, ns, "after")
            for _ in range(200):
                if (b, "after") in informer.cache:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # c's, were it watched, would have come by now too
            return set(informer.cache)
        finally:
            task.cancel()
            await api.client.close()

    try:
        assert asyncio.run(scenario()) == {(a, "before"), (b, "before"), (b, "after")}
    finally:
        for ns in (a, b, c):
            kube.delete(Namespace, ns)


def test_the_operator_takes_the_namespace_flag_repeated() -> None:
    from click.testing import CliRunner

    from torchjob.cli.main import cli

    out = CliRunner().invoke(cli, ["operator", "--help"])
    assert "--namespace NAMESPACE" in out.output and "repeat it" in out.output
