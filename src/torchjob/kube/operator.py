"""`torchjob operator`: the controller with leader election on a Lease, `/healthz`, `/readyz` and
`/metrics` on one HTTP port, and structured (JSON) logs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from torchjob.kube import metrics
from torchjob.kube.client import Api, connect, status_code
from torchjob.kube.controller import Controller

log = logging.getLogger("torchjob.kube")
LEASE_NAME = "torchjob-operator"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": datetime.now(UTC).isoformat(), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()})


class Health:
    def __init__(self) -> None:
        self.ready = False


def serve_http(port: int, health: Health) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, ctype, code = generate_latest(), CONTENT_TYPE_LATEST, 200
            elif self.path == "/healthz":
                body, ctype, code = b"ok", "text/plain", 200
            elif self.path == "/readyz":
                body, ctype, code = (b"ok", "text/plain", 200) if health.ready else (b"not ready", "text/plain", 503)
            else:
                body, ctype, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class LeaderElector:
    """coordination.k8s.io/v1 Lease: take it when free or expired, renew it while leading."""

    def __init__(self, api: Api, namespace: str, identity: str, duration_s: int = 15, renew_s: float = 5.0) -> None:
        self.api, self.namespace, self.identity = api, namespace, identity
        self.duration_s, self.renew_s = duration_s, renew_s

    async def _try(self) -> bool:
        client = self.api.client
        now = datetime.now(UTC)
        try:
            lease = await client.get(Lease, LEASE_NAME, namespace=self.namespace)
        except ApiError as e:
            if status_code(e) != 404:
                raise
            spec = LeaseSpec(holderIdentity=self.identity, leaseDurationSeconds=self.duration_s,
                             acquireTime=now, renewTime=now, leaseTransitions=0)
            try:
                await client.create(Lease(metadata=ObjectMeta(name=LEASE_NAME, namespace=self.namespace), spec=spec))
                return True
            except ApiError as e2:
                if status_code(e2) == 409:
                    return False
                raise
        if lease.spec is None:
            lease.spec = LeaseSpec()
        spec = lease.spec
        mine = spec.holderIdentity == self.identity
        expired = spec.renewTime is None or spec.renewTime + timedelta(seconds=spec.leaseDurationSeconds or 15) < now
        if not mine and not expired:
            return False
        if not mine:
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            spec.acquireTime = now
        spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds = self.identity, now, self.duration_s
        try:
            await client.replace(lease)  # carries resourceVersion: a 409 means someone else won
            return True
        except ApiError as e:
            if status_code(e) == 409:
                return False
            raise

    async def acquire(self) -> None:
        while not await self._try():
            await asyncio.sleep(self.renew_s / 2)
        metrics.LEADER.labels(LEASE_NAME).set(1)
        log.info("became the leader as %s", self.identity)

    async def keep(self) -> None:
        """Renew until renewal fails; then return (the caller stops leading)."""
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                if not await self._try():
                    break
            except ApiError as e:
                log.warning("lease renewal failed: %s", e)
                break
        metrics.LEADER.labels(LEASE_NAME).set(0)
        log.error("lost the lease")
        raise RuntimeError("lost leadership: another operator holds the lease")


async def run_operator(kubeconfig: str | None, namespace: str | None, workers: int, port: int,
                       leader_elect: bool, lease_namespace: str, init_image: str, wait_for_master: bool,
                       lease_duration_s: int = 15, gang_scheduler: str | None = None) -> None:
    health = Health()
    server = serve_http(port, health)
    api = Api(connect(kubeconfig))
    try:
        if leader_elect:
            elector = LeaderElector(api, lease_namespace, f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                                    duration_s=lease_duration_s, renew_s=lease_duration_s / 3)
            await elector.acquire()
        controller = Controller(api, namespace, workers, init_image=init_image, wait_for_master=wait_for_master,
                                gang_scheduler=gang_scheduler)
        run = asyncio.create_task(controller.run())

        async def mark_ready() -> None:
            await controller.ready.wait()
            health.ready = True

        tasks = [run, asyncio.create_task(mark_ready())]
        if leader_elect:
            tasks.append(asyncio.create_task(elector.keep()))
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in pending:
            t.cancel()
        for t in done:
            exc = t.exception()
            if exc is not None:
                raise exc
    finally:
        server.shutdown()
        await api.client.close()


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("torchjob")
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("TORCHJOB_LOG_LEVEL", level))
