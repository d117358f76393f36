"""List-then-watch caches of raw objects, and a work queue keyed by job (controller-runtime's
pattern, in asyncio).

The informer lists (capturing resourceVersion), then watches from there; an expired watch
(410 Gone) or a dropped connection re-lists and diffs against the cache, so no change is lost.
The queue holds each key once; a key re-added while it is being processed is processed again
right after (controller-runtime's "dirty" set), and keys can be added after a delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from torchjob.kube.machinery.client import Api, status_code, to_dict

log = logging.getLogger("torchjob.kube")
Key = tuple[str, str]  # (namespace, name)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "default", meta["name"]


def _rv(obj: dict[str, Any] | None) -> int:
    """resourceVersion as a number (etcd's revision; 0 when absent or opaque)."""
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """For caches that only tell whether an object exists, and whose it is."""
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj["metadata"]}


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod (or any object read for its status) as a cache keeps it: metadata and status. The spec
    (containers, env, volumes) is the bulk of a pod and nobody reads it from the cache."""
    return {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "metadata": pod["metadata"],
            "status": pod.get("status") or {}}


class Informer:
    def __init__(self, api: Api, kind: str, namespace: str | None, on_change: Callable[[dict[str, Any]], None],
                 labels: dict[str, Any] | None = None,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """`transform` trims each object before it is cached (controller-runtime's TransformFunc):
        at thousands of pods, the fields nobody reads are most of the operator's memory."""
        self.api, self.kind, self.namespace, self.labels = api, kind, namespace, labels
        self.on_change = on_change
        self.transform = transform or (lambda obj: obj)
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    async def _relist(self) -> str:
        items, rv = await self.api.list(self.kind, self.namespace, self.labels)
        fresh = {key_of(o): self.transform(o) for o in items}
        gone = [o for k, o in self.cache.items() if k not in fresh]
        # The same dict, refilled: readers hold it (progress reads the caches through a view of them).
        self.cache.clear()
        self.cache.update(fresh)
        for obj in [*fresh.values(), *gone]:
            self.on_change(obj)
        self.synced.set()
        return rv

    def remember(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Cache an object the controller just wrote (its watch event comes later), unless the cache
        already holds a newer version of it. Returns what the cache holds."""
        key, obj = key_of(obj), self.transform(obj)
        cached = self.cache.get(key)
        if cached is None or _rv(obj) >= _rv(cached):
            self.cache[key] = obj
            return obj
        return cached

    async def run(self) -> None:
        # Retried: right after a CRD is created its list answers 429 while storage initialises.
        await self.watch_from(await self._relist_retrying())

    async def watch_from(self, rv: str) -> None:
        """Watch from resourceVersion `rv` forever, re-listing whenever the watch ends."""
        while True:
            try:
                async for kind, obj in self.api.watch(self.kind, self.namespace, rv, self.labels):
                    data = self.transform(to_dict(obj))
                    rv = data["metadata"].get("resourceVersion", rv)
                    if kind == "DELETED":
                        self.cache.pop(key_of(data), None)
                    elif _rv(data) < _rv(self.cache.get(key_of(data))):
                        continue  # older than what we wrote ourselves and cached already
                    else:
                        self.cache[key_of(data)] = data
                    self.on_change(data)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # 410 Gone, a dropped connection: re-list and diff
                code = status_code(e)
                log.info("%s watch ended (%s); re-listing", self.kind, code or type(e).__name__)
                await asyncio.sleep(0.2 if code == 410 else 1.0)
                rv = await self._relist_retrying()

    async def _relist_retrying(self) -> str:
        delay = 0.5
        while True:
            try:
                return await self._relist()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("%s list failed: %s; retrying in %.1fs", self.kind, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
