"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import SETTLE_S, Api, Outage, api_message, status_code

log = logging.getLogger("torchjob.kube")


class LostLease(Exception):
    """The leader could not keep its Lease: it must stop acting (the process exits, and starts again
    as a candidate). Said in one log line, not a traceback: it is an event of the cluster, not a bug."""


class LeaderElector:
    """coordination.k8s.io/v1 Lease: take it when free or expired, renew it while leading.

    As client-go: a candidate rides out an API server it cannot reach (and, for SETTLE_S, one that
    refuses it: a restarted one does for a moment); a leader keeps retrying its renewal until the
    renew deadline (two thirds of the lease's duration since it last renewed), so that a dropped
    call or an API server restart does not cost the leadership, and stops leading before the lease
    can expire for the others."""

    def __init__(self, api: Api, name: str, namespace: str, identity: str, duration_s: int = 15,
                 renew_s: float = 5.0, settle_s: float = SETTLE_S,
                 on_contact: Callable[[], None] | None = None) -> None:
        self.api, self.name, self.namespace, self.identity = api, name, namespace, identity
        self.on_contact = on_contact  # called whenever the API server answered about the Lease (readiness)
        self.duration_s, self.renew_s = duration_s, renew_s
        self.deadline_s = duration_s * 2 / 3
        self.settle_s = settle_s

    async def _try(self) -> bool:
        taken = await self._attempt()
        if self.on_contact is not None:
            self.on_contact()
        return taken

    async def _attempt(self) -> bool:
        client = self.api.client
        now = datetime.now(UTC)
        try:
            lease = await client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as e:
            if status_code(e) != 404:
                raise
            spec = LeaseSpec(holderIdentity=self.identity, leaseDurationSeconds=self.duration_s,
                             acquireTime=now, renewTime=now, leaseTransitions=0)
            try:
                await client.create(Lease(metadata=ObjectMeta(name=self.name, namespace=self.namespace), spec=spec))
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
        """Poll the Lease every half renew period, and watch it meanwhile: a Lease given up (a leader
        handing over on SIGTERM) is taken at once, not at the next poll, so that no operator leads
        for as short a while as can be."""
        outage = Outage(self.settle_s)
        changed = asyncio.Event()
        watcher = asyncio.create_task(self._watch(changed))
        try:
            while True:
                changed.clear()
                try:
                    if await self._try():
                        break
                except Exception as e:
                    if not outage.bearable(e):
                        raise
                    log.warning("could not reach the lease (%s); trying again", api_message(e) or type(e).__name__)
                try:
                    await asyncio.wait_for(changed.wait(), self.renew_s / 2)
                except TimeoutError:
                    pass
        finally:
            watcher.cancel()
        metrics.LEADER.labels(self.name).set(1)
        log.info("became the leader as %s", self.identity)

    async def _watch(self, changed: asyncio.Event) -> None:
        """Set `changed` whenever the Lease changes to one with no holder (given up)."""
        while True:
            try:
                async for _, lease in self.api.client.watch(Lease, namespace=self.namespace,
                                                            fields={"metadata.name": self.name}, server_timeout=60):
                    if lease.spec is None or not lease.spec.holderIdentity:
                        changed.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # the poll goes on meanwhile
                pass
            await asyncio.sleep(self.renew_s / 2)

    async def release(self) -> None:
        """On a clean stop, give the Lease up so that another replica leads at once rather than after
        it expires (client-go's ReleaseOnCancel): no holder, a one-second duration."""
        client = self.api.client
        try:
            lease = await client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec is None or lease.spec.holderIdentity != self.identity:
                return
            now = datetime.now(UTC)
            lease.spec.holderIdentity, lease.spec.leaseDurationSeconds = None, 1
            lease.spec.renewTime = lease.spec.acquireTime = now
            await client.replace(lease)
            metrics.LEADER.labels(self.name).set(0)
            log.info("gave up the lease")
        except ApiError as e:  # it expires by itself
            log.warning("could not give up the lease: %s", e)

    async def keep(self) -> None:
        """Renew until another holds the lease or the renew deadline passes without a renewal; then
        raise LostLease (the caller stops leading), having logged why."""
        renewed = time.monotonic()
        wait = self.renew_s
        while True:
            await asyncio.sleep(wait)
            try:
                if not await self._try():
                    why = "another operator holds the lease"
                    break
                renewed, wait = time.monotonic(), self.renew_s
            except Exception as e:  # any error, as client-go: the deadline bounds it
                late, wait = time.monotonic() - renewed, min(1.0, self.renew_s / 2)
                if late + wait >= self.deadline_s:
                    why = (f"not renewed for {late:.1f}s (the renew deadline is {self.deadline_s:.0f}s): "
                           f"{api_message(e)}")
                    break
                log.warning("lease renewal failed (%s); trying again", api_message(e) or type(e).__name__)
        metrics.LEADER.labels(self.name).set(0)
        log.error("lost the lease: %s", why)
        raise LostLease(why)


class LeaderMark:
    """The leader's label on its own pod (`label`=true), which the progress Service selects: every
    replica is Ready (readiness says the process works), so the Service finds the leader by this.

    `claim` (on becoming the leader) labels this pod and takes the label off any other pod of the
    namespace (a leader that died or lost its Lease without taking it off); `drop` (on handing the
    Lease over, on losing it, and on start: a container restarted in its pod) takes it off this one.
    Without a pod name (an operator run outside a pod) both do nothing."""

    def __init__(self, api: Api, namespace: str, pod: str | None, label: str) -> None:
        self.api, self.namespace, self.pod, self.label = api, namespace, pod, label

    async def _set(self, pod: str, value: str | None) -> None:
        await self.api.client.patch(Pod, pod, {"metadata": {"labels": {self.label: value}}},
                                    namespace=self.namespace, patch_type=PatchType.MERGE)

    async def claim(self) -> None:
        if self.pod is None:
            return
        await self._set(self.pod, "true")
        stale, _ = await self.api.list("Pod", self.namespace, labels={self.label: "true"})
        for pod in stale:
            name = pod["metadata"]["name"]
            if name != self.pod:
                try:
                    await self._set(name, None)
                    log.info("took the leader label off pod %s (it no longer leads)", name)
                except ApiError as e:
                    if status_code(e) != 404:
                        raise
        log.info("labelled pod %s %s=true: the progress Service sends reports here", self.pod, self.label)

    async def drop(self, timeout_s: float = 3.0) -> None:
        """Best effort, bounded: a leader that cannot reach the API server to take its label off is
        cleaned up by the next leader's claim."""
        if self.pod is None:
            return
        try:
            await asyncio.wait_for(self._set(self.pod, None), timeout_s)
        except Exception as e:
            log.warning("could not take the leader label off pod %s: %s", self.pod, api_message(e) or type(e).__name__)
