"""`torchjob operator`: the controller with leader election on a Lease, `/healthz`, `/readyz` and
`/metrics` on one HTTP port, and structured (JSON) logs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from torchjob.api.errors import UserError
from torchjob.kube.controller.controller import Controller
from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import Api, connect, status_code
from torchjob.kube.progress import tls as progress_tls
from torchjob.kube.progress.hub import ProgressHub, register
from torchjob.kube.served.kinds import PYTORCHJOB
from torchjob.kube.served.kubeflow_api import should_serve
from torchjob.progress.server import ProgressServer

log = logging.getLogger("torchjob.kube")
LEASE_NAME = "torchjob-operator"
DRAIN_S = 5.0  # on SIGTERM: how long reconciles in flight and their events may take to finish


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
        expired = (not spec.holderIdentity or spec.renewTime is None  # released, or never renewed
                   or spec.renewTime + timedelta(seconds=spec.leaseDurationSeconds or 15) < now)
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

    async def release(self) -> None:
        """On a clean stop, give the Lease up so that another replica leads at once rather than after
        it expires (client-go's ReleaseOnCancel): no holder, a one-second duration."""
        client = self.api.client
        try:
            lease = await client.get(Lease, LEASE_NAME, namespace=self.namespace)
            if lease.spec is None or lease.spec.holderIdentity != self.identity:
                return
            now = datetime.now(UTC)
            lease.spec.holderIdentity, lease.spec.leaseDurationSeconds = None, 1
            lease.spec.renewTime = lease.spec.acquireTime = now
            await client.replace(lease)
            metrics.LEADER.labels(LEASE_NAME).set(0)
            log.info("gave up the lease")
        except ApiError as e:  # it expires by itself
            log.warning("could not give up the lease: %s", e)

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
                       lease_duration_s: int = 15, gang_scheduler: str | None = None,
                       force_delete_after_s: float = 60.0, progress_port: int = 0, progress_url: str | None = None,
                       progress_service: str = "torchjob-operator", progress_write_s: float = 5.0,
                       kubeflow_api: str = "auto") -> None:
    """Run until SIGTERM or SIGINT (then stop cleanly: drain, give the lease up) or a fatal error.
    With `progress_port`, the leader also serves the progress endpoint (HTTPS) there; pods are told
    `progress_url` (default: the `progress_service` Service in `lease_namespace`)."""
    health = Health()
    server = serve_http(port, health)
    api = Api(connect(kubeconfig))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        signals.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    tasks: list[asyncio.Task[Any]] = []
    elector: LeaderElector | None = None
    endpoint: ProgressServer | None = None
    try:
        stopping = asyncio.create_task(stop.wait())
        tasks.append(stopping)
        if leader_elect:
            elector = LeaderElector(api, lease_namespace, f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                                    duration_s=lease_duration_s, renew_s=lease_duration_s / 3)
            acquire = asyncio.create_task(elector.acquire())
            await asyncio.wait([acquire, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not acquire.done():
                acquire.cancel()
                log.info("stopped (%s) before leading", ", ".join(signals))
                return
            acquire.result()
            tasks.append(asyncio.create_task(elector.keep()))
        url = progress_url or f"https://{progress_service}.{lease_namespace}.svc:{progress_port}"
        controller = Controller(api, namespace, workers, init_image=init_image, wait_for_master=wait_for_master,
                                gang_scheduler=gang_scheduler, force_delete_after_s=force_delete_after_s,
                                progress_url=url if progress_port else None)
        controllers = [controller]
        serve_kubeflow, why = await should_serve(api, kubeflow_api, datetime.now(UTC))
        log.info("Kubeflow's PyTorchJob API: %s (%s)", "served" if serve_kubeflow else "not served", why)
        if serve_kubeflow:  # the same controller code and core, for the second kind
            controllers.append(Controller(api, namespace, workers, init_image=init_image,
                                          wait_for_master=wait_for_master, gang_scheduler=gang_scheduler,
                                          force_delete_after_s=force_delete_after_s, kind=PYTORCHJOB,
                                          progress_url=url if progress_port else None))
        if progress_port:
            # Served by the leader only: the stall decision reads the reports where it reconciles (and
            # only the leader is ready, so the Service sends the pods' reports to it).
            told = urlsplit(url).hostname  # the certificate must name what the pods are told
            tls = await progress_tls.ensure(api, lease_namespace, progress_service, (told,) if told else ())
            hub = ProgressHub(api, controllers, loop, progress_write_s)  # one hub for every kind served
            for c in controllers:
                c.progress, c.progress_ca = hub, tls.ca_pem
            register(hub)
            try:
                endpoint = ProgressServer(("0.0.0.0", progress_port), hub, tls.context()).start()
            except OSError as e:
                raise UserError(f"the progress endpoint cannot listen on port {progress_port}: {e.strerror}",
                                fix="pass another --progress-port, or --progress-port 0 to run without it") from e
            tasks.append(asyncio.create_task(hub.write_loop()))
            log.info("progress endpoint on :%d (pods report to %s)", progress_port, url)
        tasks += [asyncio.create_task(c.run()) for c in controllers]

        async def mark_ready() -> None:
            for c in controllers:
                await c.ready.wait()
            health.ready = True

        ready = asyncio.create_task(mark_ready())
        # The controller and the lease keeper end only by an error; a signal sets the stop event.
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            exc = None if t is stopping else t.exception()
            if exc is not None:
                raise exc
        # Stop taking work; let what is in flight finish while the lease is still ours (renewed at
        # most a third of its duration ago); then give the lease up.
        health.ready = False
        for t in tasks:
            t.cancel()
        ready.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        budget = min(DRAIN_S, lease_duration_s / 3) if leader_elect else DRAIN_S
        cut = sum(await asyncio.gather(*(c.drain(budget) for c in controllers)))
        if elector is not None:
            await elector.release()
        log.info("stopped (%s)%s", ", ".join(signals), f"; {cut} writes cut short" if cut else "")
    finally:
        for t in tasks:
            t.cancel()
        if endpoint is not None:
            endpoint.stop()
        server.shutdown()
        await api.client.close()


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("torchjob")
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("TORCHJOB_LOG_LEVEL", level))
