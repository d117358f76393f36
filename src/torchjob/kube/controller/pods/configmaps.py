"""The ConfigMaps of torchjob's that a job namespace's pods project (the progress endpoint's CA, the
entry point of pods restarting in place): made, or brought up to date, before the pods. Per namespace,
not per job: they outlive the jobs that made them. Whoever may write ConfigMaps in the namespace may
change them; one that is not exactly torchjob's (its data, nothing else: no other key, no binaryData)
is replaced whole (deleted and made again: an immutable one cannot be patched), and looked at again
before pods are made, at most every RECHECK_S."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code

log = logging.getLogger("torchjob.kube")

RECHECK_S = 10.0  # how long a ConfigMap, once made current, is not looked at again (pods made meanwhile)


class ConfigMaps:
    """`publish` a ConfigMap; `create` makes one (the reconciler's: a 409 is a ConfigMap made meanwhile)."""

    def __init__(self, api: ApiProtocol, create: Callable[[dict[str, Any]], Awaitable[bool]]) -> None:
        self.api, self.create = api, create
        # by namespace and name: the data made current, until when that is trusted
        self.published: dict[tuple[str, str], tuple[dict[str, str], float]] = {}

    async def publish(self, configmap: dict[str, Any], optional: bool = False) -> None:
        """Looked at again only when its data changed (the CAs renewed) or after RECHECK_S (someone may
        have changed or deleted it). `optional`: the pods mount it optionally (the stacks' front): one the
        operator may not read or write (403) is said, not a failed round; the pods start without it."""
        try:
            await self._publish(configmap)
        except Exception as e:
            if not optional or status_code(e) != 403:
                raise
            log.warning("ConfigMap %s/%s: forbidden (%s): the pods start without its programs",
                        configmap["metadata"]["namespace"], configmap["metadata"]["name"], e)

    async def _publish(self, configmap: dict[str, Any]) -> None:
        meta, data = configmap["metadata"], configmap["data"]
        where = (meta["namespace"], meta["name"])
        published = self.published.get(where)
        if published is not None and published[0] == data and published[1] > time.monotonic():
            return
        found = await self.api.find("ConfigMap", meta["name"], meta["namespace"])
        if found is not None and ((found.get("data") or {}) != data or found.get("binaryData")):
            log.warning("ConfigMap %s/%s is not torchjob's as it made it: made again", *where)
            await self.api.delete("ConfigMap", meta["name"], meta["namespace"])
            found = None
        if found is None:
            await self.create(configmap)
        self.published[where] = (data, time.monotonic() + RECHECK_S)
