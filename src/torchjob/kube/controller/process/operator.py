"""`torchjob operator`: the controllers (one per kind served) with leader election on a Lease (the
leader labels its pod, which the progress Service selects), `/healthz` and `/readyz` on the health
port (every working replica is ready), `/metrics` (for authorized scrapers, over TLS) on its own
port, the progress endpoint, and JSON logs. The wiring of one process, from one `OperatorConfig`."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from torchjob.api.errors import UserError
from torchjob.kube.controller.process.config import OperatorConfig
from torchjob.kube.controller.process.controller import Controller
from torchjob.kube.controller.round.round_parts import ProgressLink
from torchjob.kube.machinery.client import Api, connect, outlasting
from torchjob.kube.machinery.health import GuardedHttp, Health, serve_health, serve_metrics
from torchjob.kube.machinery.leader import LeaderElector, LeaderMark, LostLease
from torchjob.kube.machinery.scrapers import ScraperAuth
from torchjob.kube.objects.front import inplace
from torchjob.kube.objects.install import LEADER_LABEL
from torchjob.kube.progress import gauges, tls
from torchjob.kube.progress.books import Books
from torchjob.kube.progress.receiver import ProgressReceiver
from torchjob.kube.progress.writer import ProgressWriter
from torchjob.kube.served import t9k, trainer_api
from torchjob.kube.served.kinds import PYTORCHJOB, T9K, TORCHJOB, TRAINJOB, ServedKind
from torchjob.kube.served.kubeflow_api import should_serve
from torchjob.progress.server import ProgressServer

log = logging.getLogger("torchjob.kube")
LEASE_NAME = "torchjob-operator"
DRAIN_S = 5.0  # on SIGTERM: how long reconciles in flight and their events may take to finish


async def run_operator(config: OperatorConfig) -> None:
    """Run until SIGTERM or SIGINT (then stop cleanly: hand over, drain, give the lease up) or a fatal
    error; a lost Lease ends the process with exit code 1 and one log line. With a progress port, the
    leader also serves the progress endpoint (HTTPS) there."""
    health = Health(contact_window_s=config.lease_duration_s if config.leader_elect else None)
    api = Api(connect(config.kubeconfig))
    loop = asyncio.get_running_loop()
    servers = [_listen("--health-port", config.health_port, lambda: serve_health(config.health_port, health))]
    stop = asyncio.Event()
    signals: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        signals.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    tasks: list[asyncio.Task[Any]] = []
    elector: LeaderElector | None = None
    mark = LeaderMark(api, config.lease_namespace, config.pod_name, LEADER_LABEL) if config.leader_elect else None
    endpoint: ProgressServer | None = None
    writer: ProgressWriter | None = None
    try:
        stopping = asyncio.create_task(stop.wait())
        tasks.append(stopping)
        health.waiting = config.leader_elect  # ready while it waits for the Lease (once the API server answers)
        url = config.reported_url
        told = urlsplit(url).hostname if url is not None else None  # the certificate must name what pods are told
        extra = ((told,) if told else ()) + tuple(tls.hosts_for(f"{config.progress_service}-metrics",
                                                                 config.lease_namespace))
        made: tls.Tls | None = None
        if url is not None or config.metrics_tls:  # every replica serves its /metrics with the same pair
            made = await outlasting(lambda: tls.ensure(api, config.lease_namespace, config.progress_service, extra),
                                    "the operator's certificate")
        auth = ScraperAuth(api, loop).check if config.metrics_auth else None
        metrics = _listen("--metrics-port", config.metrics_port, lambda: serve_metrics(
            config.metrics_port, auth, made.context() if made is not None and config.metrics_tls else None))
        servers.append(metrics)
        link: ProgressLink | None = None
        if made is not None:
            link = ProgressLink(Books(), tls.Trust(made.trusted), inplace.Seal(made.seal_key))

            def swap(renewed: tls.Tls) -> None:
                _swap_in(renewed, (metrics if config.metrics_tls else None, endpoint), link)

            tasks.append(asyncio.create_task(tls.keep(api, config.lease_namespace, config.progress_service, extra,
                                                      made, swap)))
        if config.leader_elect:
            elector = LeaderElector(api, LEASE_NAME, config.lease_namespace,
                                    f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                                    duration_s=config.lease_duration_s, renew_s=config.lease_duration_s / 3,
                                    on_contact=health.contact)
            if mark is not None:
                await mark.drop()  # a container restarted in its pod: the label of its last life
            acquire = asyncio.create_task(elector.acquire())
            await asyncio.wait([acquire, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not acquire.done():
                acquire.cancel()
                log.info("stopped (%s) before leading", ", ".join(signals))
                return
            acquire.result()
            health.waiting = False  # leading: ready again once its caches are synced
            tasks.append(asyncio.create_task(elector.keep()))
        kinds: list[ServedKind] = [TORCHJOB]
        serve_kubeflow, why = await outlasting(lambda: should_serve(api, config.kubeflow_api, datetime.now(UTC)),
                                               "asking whether to serve Kubeflow's API")
        log.info("Kubeflow's PyTorchJob API: %s (%s)", "served" if serve_kubeflow else "not served", why)
        if serve_kubeflow:  # the same controller code and core, for the second kind
            kinds.append(PYTORCHJOB)
        # Trainer v2's TrainJob and T9k's PyTorchTrainingJob: each served when its CRD is torchjob's
        for title, ask, foreign in (("Kubeflow Trainer's TrainJob", trainer_api.should_serve, TRAINJOB),
                                    ("T9k's PyTorchTrainingJob", t9k.should_serve, T9K)):
            serve, why = await outlasting(functools.partial(ask, api), f"asking whether to serve the {title} API")
            log.info("%s API: %s (%s)", title, "served" if serve else "not served", why)
            if serve:
                kinds.append(foreign)
        # Reports are taken by the leader only (the stall decision reads them where it reconciles): the
        # progress Service selects the pod it labels.
        controllers = {k.plural: Controller(api, config, kind=k, progress=link if url is not None else None)
                       for k in kinds}
        if url is not None and link is not None and made is not None:
            endpoint, writer = _serve_progress(api, config, controllers, link, made.context(), loop, tasks)
            log.info("progress endpoint on :%d (pods report to %s)", config.progress_port, url)
        if mark is not None:
            await outlasting(mark.claim, "labelling this pod as the leader's")
        tasks += [asyncio.create_task(c.run()) for c in controllers.values()]

        async def mark_ready() -> None:
            for c in controllers.values():
                await c.ready.wait()
            health.synced = True

        ready = asyncio.create_task(mark_ready())
        # The controller and the lease keeper end only by an error; a signal sets the stop event.
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            exc = None if t is stopping else t.exception()
            if exc is not None:
                raise exc
        # Hand over: the Service stops sending reports here, no report is taken any more, those taken
        # are written; what is in flight finishes while the lease is still ours (renewed at most a
        # third of its duration ago); then the lease is given up.
        health.stopping = True
        if mark is not None:
            await mark.drop()
        if endpoint is not None:
            endpoint.stop()
            endpoint = None
        for t in tasks:
            t.cancel()
        ready.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if writer is not None:
            await _flush(writer)
        budget = min(DRAIN_S, config.lease_duration_s / 3) if config.leader_elect else DRAIN_S
        cut = sum(await asyncio.gather(*(c.drain(budget) for c in controllers.values())))
        if elector is not None:
            await elector.release()
        log.info("stopped (%s)%s", ", ".join(signals), f"; {cut} writes cut short" if cut else "")
    except LostLease:  # said in one line by the elector; another replica leads now
        health.stopping = True
        if endpoint is not None:
            endpoint.stop()
            endpoint = None
        if mark is not None:
            await mark.drop()
        raise SystemExit(1) from None
    finally:
        for t in tasks:
            t.cancel()
        if endpoint is not None:
            endpoint.stop()
        for server in servers:
            server.stop()
        await api.client.close()


async def _flush(writer: ProgressWriter, timeout_s: float = 2.0) -> None:
    """The reports taken since the last write, written before the Lease is handed over."""
    try:
        await asyncio.wait_for(writer.write_changed(), timeout_s)
    except Exception as e:
        log.warning("the last progress reports were not written: %s", e)


def _listen(flag: str, port: int, serve: Callable[[], GuardedHttp]) -> GuardedHttp:
    try:
        return serve()
    except OSError as e:
        raise UserError(f"the operator cannot listen on port {port} ({flag}): {e.strerror}",
                        fix=f"pass another {flag}, or {flag} 0 for any free port") from e


def _swap_in(renewed: tls.Tls, listeners: Iterable[Any], link: ProgressLink | None) -> None:
    """A renewed certificate, without a restart: the listeners' next handshakes (None: not serving
    TLS), and the CAs each namespace's ConfigMap is brought to (the reconciler looks again: its trust
    changed)."""
    for listener in listeners:
        if listener is not None:
            listener.tls = renewed.context()
    if link is not None:
        link.trust.pem = renewed.trusted
        link.seal.key = renewed.seal_key or link.seal.key  # another operator made it (an upgrade)


def _serve_progress(api: Api, config: OperatorConfig, controllers: dict[str, Controller], link: ProgressLink,
                    context: Any, loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[Any]]
                    ) -> tuple[ProgressServer, ProgressWriter]:
    """The endpoint, its receiver and writer, wired to the controllers' caches and queues."""
    books, seal = link.books, link.seal
    caches = {plural: c.caches() for plural, c in controllers.items()}
    receiver = ProgressReceiver(api, caches, books, loop,
                                on_first_report=lambda plural, key: controllers[plural].queue.add(key), seal=seal,
                                waits=link.waits)
    writer = ProgressWriter(api, caches, books, config.progress_write_s,
                            on_written=lambda plural, stored: controllers[plural].remember(stored))
    gauges.register(books, caches)
    try:
        endpoint = ProgressServer(("0.0.0.0", config.progress_port), receiver, context).start()
    except OSError as e:
        raise UserError(f"the progress endpoint cannot listen on port {config.progress_port}: {e.strerror}",
                        fix="pass another --progress-port, or --progress-port 0 to run without it") from e
    tasks.append(asyncio.create_task(writer.run()))
    return endpoint, writer
