"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from torchjob.kube.machinery import metrics
from torchjob.kube.machinery.client import Api, status_code

log = logging.getLogger("torchjob.kube")


class LeaderElector:
    """coordination.k8s.io/v1 Lease: take it when free or expired, renew it while leading."""

    def __init__(self, api: Api, name: str, namespace: str, identity: str, duration_s: int = 15,
                 renew_s: float = 5.0) -> None:
        self.api, self.name, self.namespace, self.identity = api, name, namespace, identity
        self.duration_s, self.renew_s = duration_s, renew_s

    async def _try(self) -> bool:
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
        while not await self._try():
            await asyncio.sleep(self.renew_s / 2)
        metrics.LEADER.labels(self.name).set(1)
        log.info("became the leader as %s", self.identity)

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
        """Renew until renewal fails; then return (the caller stops leading)."""
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                if not await self._try():
                    break
            except ApiError as e:
                log.warning("lease renewal failed: %s", e)
                break
        metrics.LEADER.labels(self.name).set(0)
        log.error("lost the lease")
        raise RuntimeError("lost leadership: another operator holds the lease")
