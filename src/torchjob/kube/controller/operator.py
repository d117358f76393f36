"""`torchjob operator`: the controllers (one per kind served) with leader election on a Lease,
`/healthz`, `/readyz` and `/metrics` (for authorized scrapers) on one HTTP port, the progress
endpoint, and JSON logs. The
wiring of one process, from one `OperatorConfig`."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from torchjob.api.errors import UserError
from torchjob.kube.controller.config import OperatorConfig
from torchjob.kube.controller.controller import Controller
from torchjob.kube.controller.reconciler import ProgressLink
from torchjob.kube.machinery.client import Api, connect, outlasting
from torchjob.kube.machinery.health import Health, serve_http
from torchjob.kube.machinery.leader import LeaderElector
from torchjob.kube.machinery.scrapers import ScraperAuth
from torchjob.kube.progress import gauges, tls
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.receiver import ProgressReceiver
from torchjob.kube.progress.writer import ProgressWriter
from torchjob.kube.served.kinds import PYTORCHJOB, TORCHJOB, ServedKind
from torchjob.kube.served.kubeflow_api import should_serve
from torchjob.progress.server import ProgressServer

log = logging.getLogger("torchjob.kube")
LEASE_NAME = "torchjob-operator"
DRAIN_S = 5.0  # on SIGTERM: how long reconciles in flight and their events may take to finish


async def run_operator(config: OperatorConfig) -> None:
    """Run until SIGTERM or SIGINT (then stop cleanly: drain, give the lease up) or a fatal error.
    With a progress port, the leader also serves the progress endpoint (HTTPS) there."""
    health = Health()
    api = Api(connect(config.kubeconfig))
    loop = asyncio.get_running_loop()
    server = serve_http(config.metrics_port, health, ScraperAuth(api, loop).check if config.metrics_auth else None)
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
        if config.leader_elect:
            elector = LeaderElector(api, LEASE_NAME, config.lease_namespace,
                                    f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                                    duration_s=config.lease_duration_s, renew_s=config.lease_duration_s / 3)
            acquire = asyncio.create_task(elector.acquire())
            await asyncio.wait([acquire, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not acquire.done():
                acquire.cancel()
                log.info("stopped (%s) before leading", ", ".join(signals))
                return
            acquire.result()
            tasks.append(asyncio.create_task(elector.keep()))
        kinds: list[ServedKind] = [TORCHJOB]
        serve_kubeflow, why = await outlasting(lambda: should_serve(api, config.kubeflow_api, datetime.now(UTC)),
                                               "asking whether to serve Kubeflow's API")
        log.info("Kubeflow's PyTorchJob API: %s (%s)", "served" if serve_kubeflow else "not served", why)
        if serve_kubeflow:  # the same controller code and core, for the second kind
            kinds.append(PYTORCHJOB)
        link: ProgressLink | None = None
        url = config.reported_url
        if url is not None:
            # Served by the leader only: the stall decision reads the reports where it reconciles (and
            # only the leader is ready, so the Service sends the pods' reports to it).
            told = urlsplit(url).hostname  # the certificate must name what the pods are told
            extra = (told,) if told else ()
            made = await outlasting(lambda: tls.ensure(api, config.lease_namespace, config.progress_service, extra),
                                    "the progress endpoint's certificate")
            link = ProgressLink(Books(), tls.Trust(made.trusted))
        controllers = {k.plural: Controller(api, config, kind=k, progress=link) for k in kinds}
        if link is not None:
            endpoint = _serve_progress(api, config, controllers, link.books, made.context(), loop, tasks)
            log.info("progress endpoint on :%d (pods report to %s)", config.progress_port, url)
            tasks.append(asyncio.create_task(tls.keep(api, config.lease_namespace, config.progress_service, extra,
                                                      made, _renewed(endpoint, link))))
        tasks += [asyncio.create_task(c.run()) for c in controllers.values()]

        async def mark_ready() -> None:
            for c in controllers.values():
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
        budget = min(DRAIN_S, config.lease_duration_s / 3) if config.leader_elect else DRAIN_S
        cut = sum(await asyncio.gather(*(c.drain(budget) for c in controllers.values())))
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


def _renewed(endpoint: ProgressServer, link: ProgressLink) -> Callable[[tls.Tls], None]:
    """What a renewed certificate changes, without a restart: the endpoint's next handshakes, and the
    CAs each namespace's ConfigMap is brought to (the reconciler looks again: its trust changed)."""

    def swap(made: tls.Tls) -> None:
        endpoint.tls = made.context()
        link.trust.pem = made.trusted

    return swap


def _serve_progress(api: Api, config: OperatorConfig, controllers: dict[str, Controller], books: Books,
                    context: Any, loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[Any]]) -> ProgressServer:
    """The endpoint, its receiver and writer, wired to the controllers' caches and queues."""
    caches = {plural: c.caches() for plural, c in controllers.items()}
    receiver = ProgressReceiver(api, caches, books, loop,
                                on_first_report=lambda plural, key: controllers[plural].queue.add(key))
    writer = ProgressWriter(api, caches, books, config.progress_write_s,
                            on_written=lambda plural, stored: controllers[plural].remember(stored))
    gauges.register(books, caches)
    try:
        endpoint = ProgressServer(("0.0.0.0", config.progress_port), receiver, context).start()
    except OSError as e:
        raise UserError(f"the progress endpoint cannot listen on port {config.progress_port}: {e.strerror}",
                        fix="pass another --progress-port, or --progress-port 0 to run without it") from e
    tasks.append(asyncio.create_task(writer.run()))
    return endpoint
