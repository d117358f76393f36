"""Playing a pod that reports progress: the token the kubelet would project (a TokenRequest for the
pod's service account, bound to the pod, with the job's audience), the endpoint's CA from the
namespace's ConfigMap, and torchjob.report's Reporter posting to the operator over HTTPS."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, ServiceAccount

from torchjob.progress.server import audience, status_path
from torchjob.report import Reporter

SERVICE_ACCOUNT = "trainer"


def make_service_account(kube: Client, namespace: str) -> None:
    try:
        kube.create(ServiceAccount(metadata=ObjectMeta(name=SERVICE_ACCOUNT, namespace=namespace)))
    except ApiError as e:
        if e.status.code != 409:
            raise


def pod_token(kube: Client, pod: Any, job: str, aud: str | None = None) -> str:
    """What the kubelet projects into `pod`: a token of its service account bound to it, for the job."""
    ns = pod.metadata.namespace
    spec = TokenRequestSpec(audiences=[aud or audience(ns, job)], expirationSeconds=3600,
                            boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1", name=pod.metadata.name,
                                                                uid=pod.metadata.uid))
    sa = pod.spec.serviceAccountName or SERVICE_ACCOUNT
    got = kube.create(ServiceAccount.Token(metadata=ObjectMeta(name=sa, namespace=ns), spec=spec), name=sa,
                      namespace=ns)
    return str(got.status.token)


def unbound_token(kube: Client, namespace: str, aud: str) -> str:
    got = kube.create(ServiceAccount.Token(metadata=ObjectMeta(name=SERVICE_ACCOUNT, namespace=namespace),
                                           spec=TokenRequestSpec(audiences=[aud], expirationSeconds=3600)),
                      name=SERVICE_ACCOUNT, namespace=namespace)
    return str(got.status.token)


def ca_file(kube: Client, namespace: str, where: Path, timeout: float = 30) -> Path:
    """The endpoint's CA as the pods project it (the operator publishes it before the first pod)."""
    end = time.monotonic() + timeout
    while True:
        try:
            cm = kube.get(ConfigMap, "torchjob-progress-ca", namespace=namespace)
            break
        except ApiError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
    path = where / f"{namespace}-ca.crt"
    path.write_text((cm.data or {})["ca.crt"])
    return path


def url(base: str, namespace: str, job: str) -> str:
    return base + status_path(namespace, job)


class PodReporter:
    """A pod's reporting, on a thread: torchjob.report.Reporter with the pod's token, every `every` s,
    until stopped (then quiet, as a rank stuck in a collective is)."""

    def __init__(self, endpoint: str, token: str, ca: Path, where: Path, every: float = 0.2) -> None:
        token_file = where / f"token-{id(self)}"
        token_file.write_text(token)
        self.reporter = Reporter(url=endpoint, token_file=str(token_file), ca_file=str(ca), interval=every)
        self.every = every
        self.stop = threading.Event()
        self.step = 0
        self.last = 0.0  # time.monotonic() of the latest report() (what the operator receives is no older)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.step += 1
            self.last = time.monotonic()
            self.reporter.report(step=self.step, total=1000, loss=1.0 / self.step)

    def quiet(self) -> None:
        self.stop.set()


def post(endpoint: str, body: bytes, token: str | None, ca: Path) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def flood(endpoint: str, body: bytes, token: str, ca: Path, n: int) -> list[int]:
    """`n` reports as fast as one keep-alive connection sends them; the answers' codes."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(ca)))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    codes = []
    for _ in range(n):
        conn.request("POST", parts.path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        codes.append(resp.status)
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
    conn.close()
    return codes
