"""The progress endpoint's certificate (issue 19, finding 5): short-lived, made again by the kept CA
before it ends, swapped into the running endpoint without a restart; the CA ConfigMap of a namespace
looked at again (not once per process). Pure and against the recording fake API, in milliseconds."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from cryptography import x509

from tests.controller.fakeapi import FakeApi
from tests.controller.test_sequencing import NS, one_round, run, torchjob
from torchjob.kube.controller.pods import configmaps as configmaps_module
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.process.controller import Controller
from torchjob.kube.controller.process.operator import _swap_in
from torchjob.kube.controller.round.round_parts import ProgressLink
from torchjob.kube.objects.workload.reporting import CA_CONFIGMAP, CA_KEY
from torchjob.kube.progress import tls
from torchjob.kube.progress.books import Books
from torchjob.progress.server import ProgressServer

OPS = "torchjob-system"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def secret_data(api: FakeApi) -> dict[str, str]:
    data = api.objects[("Secret", OPS, tls.SECRET)]["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_the_serving_certificate_is_short_lived_and_made_again_by_the_kept_ca_before_it_ends() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPS}})
        first = await tls.ensure(api, OPS, "torchjob-operator", now=NOW)
        life = cert(first.cert_pem).not_valid_after_utc - NOW
        assert dt.timedelta(days=80) < life <= dt.timedelta(days=tls.CERT_VALID_DAYS)
        assert secret_data(api)[tls.CA_KEY_KEY] == first.ca_key_pem != ""  # the CA can sign again
        patches = len(api.writes(("Secret",)))
        assert await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=30)) == first
        assert len(api.writes(("Secret",))) == patches  # not due: nothing written
        second = await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=70))
        assert second.cert_pem != first.cert_pem and second.ca_pem == first.ca_pem  # the pods' trust unchanged
        assert cert(second.cert_pem).not_valid_after_utc > NOW + dt.timedelta(days=150)
        assert secret_data(api)["tls.crt"] == second.cert_pem

    run(scenario)


def test_a_pair_made_without_its_ca_key_gets_a_new_ca_and_the_pods_trust_both_meanwhile() -> None:
    async def scenario() -> None:
        api = FakeApi()
        legacy = tls.generate(tls.hosts_for("torchjob-operator", OPS), now=NOW)
        api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": tls.SECRET, "namespace": OPS},
                 "data": {k: base64.b64encode(v.encode()).decode() for k, v in
                          (("ca.crt", legacy.ca_pem), ("tls.crt", legacy.cert_pem), ("tls.key", legacy.key_pem))}})
        made = await tls.ensure(api, OPS, "torchjob-operator", now=NOW)
        assert made.ca_pem != legacy.ca_pem and made.ca_key_pem
        trusted = {c.serial_number for c in x509.load_pem_x509_certificates(made.trusted.encode())}
        assert trusted == {cert(made.ca_pem).serial_number, cert(legacy.ca_pem).serial_number}

    run(scenario)


def handshake(port: int, ca_pem: str) -> int:
    """The serial number of the certificate the endpoint serves now."""
    client = ssl.create_default_context(cadata=ca_pem)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            client.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


class Nobody:
    def authorize(self, *a: Any) -> None:
        return None

    def book(self, *a: Any) -> None:
        return None

    def received(self, *a: Any) -> None:
        pass


def test_a_renewed_certificate_is_served_by_the_running_endpoint_and_trusted_in_the_namespaces() -> None:
    first = tls.generate(tls.hosts_for("torchjob-operator", OPS))
    second = tls.generate(tls.hosts_for("torchjob-operator", OPS), (first.ca_pem, first.ca_key_pem))
    endpoint = ProgressServer(("127.0.0.1", 0), Nobody(), first.context()).start()  # type: ignore[arg-type]
    link = ProgressLink(Books(), tls.Trust(first.trusted))
    try:
        assert handshake(endpoint.port, first.ca_pem) == cert(first.cert_pem).serial_number
        _swap_in(second, (None, endpoint), link)
        assert handshake(endpoint.port, first.ca_pem) == cert(second.cert_pem).serial_number  # no restart
        assert link.trust.pem == second.trusted
    finally:
        endpoint.stop()


def test_keep_hands_a_renewed_pair_over(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        api = FakeApi()
        current = await tls.ensure(api, OPS, "torchjob-operator")
        got: list[tls.Tls] = []
        monkeypatch.setattr(tls, "_now", lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=75))
        task = asyncio.create_task(tls.keep(api, OPS, "torchjob-operator", (), current, got.append, every_s=0.01))
        await asyncio.wait_for(handed_over(got), 3)  # its timer's first turns
        task.cancel()
        assert got[0].cert_pem != current.cert_pem and got[0].ca_pem == current.ca_pem

    run(scenario)


async def handed_over(got: list[tls.Tls]) -> None:
    while not got:
        await asyncio.sleep(0.01)


@asynccontextmanager
async def running_with(api: FakeApi, link: ProgressLink) -> AsyncIterator[Controller]:
    """The controller with the progress link, no worker: the test runs each round."""
    controller = Controller(api, OperatorConfig(progress_port=8443, workers=0), progress=link)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.ready.wait(), 3)
    try:
        yield controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await controller.drain(1.0)


def test_a_namespaces_ca_configmap_is_looked_at_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configmaps_module, "RECHECK_S", 0.0)
    made = tls.generate(tls.hosts_for("torchjob-operator", OPS), now=NOW)

    async def scenario() -> None:
        api = FakeApi()
        link = ProgressLink(Books(), tls.Trust(made.trusted))
        api.put(torchjob("one"))
        async with running_with(api, link) as c:
            await one_round(api, c, (NS, "one"))
            assert api.objects[("ConfigMap", NS, CA_CONFIGMAP)]["data"][CA_KEY] == made.trusted
            # someone changes it (or an older operator wrote another CA): the next job's pods are made
            # only after it is brought back
            await api.patch_data("ConfigMap", CA_CONFIGMAP, NS, {CA_KEY: "stale"})
            api.put(torchjob("two"))
            await one_round(api, c, (NS, "two"))
            assert api.objects[("ConfigMap", NS, CA_CONFIGMAP)]["data"][CA_KEY] == made.trusted
            before = [str(w) for w in api.writes(("ConfigMap", "Pod"))]
            # made again whole (controller/configmaps.py), before the pods
            assert before.index("delete ConfigMap " + CA_CONFIGMAP) < before.index("create Pod two-master-0")
            # the CAs renewed: the next job's namespace gets them
            link.trust.pem = "renewed"
            api.put(torchjob("three"))
            await one_round(api, c, (NS, "three"))
            assert api.objects[("ConfigMap", NS, CA_CONFIGMAP)]["data"][CA_KEY] == "renewed"

    run(scenario)


def test_the_key_of_the_in_place_seal_is_made_once_kept_through_renewals_and_added_to_an_older_secret() -> None:
    """The operator's seal of what it writes on pods restarting in place (objects/inplace.py) holds
    across its restarts and its certificate's renewals: its key is kept in the Secret, never renewed."""
    async def scenario() -> None:
        api = FakeApi()
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPS}})
        first = await tls.ensure(api, OPS, "torchjob-operator", now=NOW)
        assert len(first.seal_key) == 32 and secret_data(api)[tls.SEAL_KEY_KEY] == first.seal_hex
        renewed = await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=70))
        ca_renewed = await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=3600))
        assert renewed.cert_pem != first.cert_pem and ca_renewed.ca_pem != first.ca_pem
        assert renewed.seal_hex == ca_renewed.seal_hex == first.seal_hex
        # a Secret an earlier version made: the key is added, once
        stored = api.objects[("Secret", OPS, tls.SECRET)]
        del stored["data"][tls.SEAL_KEY_KEY]
        added = await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=3600))
        assert added.seal_hex not in ("", first.seal_hex) and added.cert_pem == ca_renewed.cert_pem
        assert (await tls.ensure(api, OPS, "torchjob-operator", now=NOW + dt.timedelta(days=3600))) == added

    run(scenario)
