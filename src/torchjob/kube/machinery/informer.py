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
import sys
from collections.abc import Callable
from typing import Any

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code, to_dict

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


OWNED_META = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # the whole object again, as JSON
POD_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
POD_ANNOTATIONS = "torchjob.dev/"  # the annotations a cached pod keeps
OWNER = ("apiVersion", "kind", "name", "uid", "controller")  # of a cached pod's controller
TERMINATED = ("exitCode", "reason", "message", "finishedAt")


def interned(obj: Any) -> Any:
    """`obj` rebuilt with every dict key and every short string interned: the same keys and values
    (field names, label keys, namespaces, "True") repeat in every cached object, and a watch
    event's JSON gives each object its own copies."""
    if isinstance(obj, dict):
        return {_intern(k): interned(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [interned(v) for v in obj]
    if isinstance(obj, str) and len(obj) <= 64:
        return _intern(obj)
    return obj


def _intern(s: str) -> str:
    return sys.intern(s) if type(s) is str else s  # a str subclass (an enum written as is) cannot be


def metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """For caches that only tell whether an object exists, and whose it is (by its labels)."""
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": interned({k: meta[k] for k in OWNED_META if k in meta})}


def whole(obj: dict[str, Any]) -> dict[str, Any]:
    """For caches of whole objects (jobs): all of it but kubectl's last-applied annotation (a
    second copy of the object), interned."""
    annotations = obj.get("metadata", {}).get("annotations")
    if annotations and LAST_APPLIED in annotations:
        obj = {**obj, "metadata": {**obj["metadata"],
                                   "annotations": {k: v for k, v in annotations.items() if k != LAST_APPLIED}}}
    return dict(interned(obj))


def pod_cached(pod: dict[str, Any]) -> dict[str, Any]:
    """A job's pod as the operator caches it: only what is read from it (what core observes, the
    controller's index and force deletes, the progress receiver), built anew so that the parsed
    event (spec, conditions, IPs, managedFields...) is freed: name, namespace, uid, resourceVersion,
    creation and deletion times, labels, torchjob's annotations, its controller (apiVersion, kind,
    name, uid); its node's name; status phase, reason, message, a DisruptionTarget condition (why
    Kubernetes deletes it) and each container's name and state.terminated."""
    meta, status = pod["metadata"], pod.get("status") or {}
    m: dict[str, Any] = {k: meta[k] for k in POD_META if meta.get(k) is not None}
    m["labels"] = meta.get("labels") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(POD_ANNOTATIONS)}
    if annotations:
        m["annotations"] = annotations
    owners = [{k: r[k] for k in OWNER if k in r} for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if owners:
        m["ownerReferences"] = owners
    st: dict[str, Any] = {k: status[k] for k in ("phase", "reason", "message") if status.get(k) is not None}
    disrupted = [{k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                 for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
    if disrupted:
        st["conditions"] = disrupted
    containers = []
    for cs in status.get("containerStatuses") or []:
        entry: dict[str, Any] = {"name": cs.get("name")}
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            entry["state"] = {"terminated": {k: terminated[k] for k in TERMINATED if k in terminated}}
        containers.append(entry)
    if containers:
        st["containerStatuses"] = containers
    node = (pod.get("spec") or {}).get("nodeName")
    return interned({"apiVersion": "v1", "kind": "Pod", "metadata": m, "status": st,  # type: ignore[no-any-return]
                     **({"spec": {"nodeName": node}} if node else {})})


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """An object read for its status (a PodGroup) as a cache keeps it: metadata and status."""
    return {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "metadata": pod["metadata"],
            "status": pod.get("status") or {}}


Namespaces = str | tuple[str, ...] | None  # one, several (one list and watch each), or all (None)


class Informer:
    def __init__(self, api: ApiProtocol, kind: str, namespace: Namespaces, on_change: Callable[[dict[str, Any]], None],
                 labels: dict[str, Any] | None = None,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """`transform` trims each object before it is cached (controller-runtime's TransformFunc):
        at thousands of pods, the fields nobody reads are most of the operator's memory."""
        self.api, self.kind, self.namespace, self.labels = api, kind, namespace, labels
        self.on_change = on_change
        self.transform = transform or (lambda obj: obj)
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    def _namespaces(self) -> tuple[str | None, ...]:
        return self.namespace if isinstance(self.namespace, tuple) else (self.namespace,)

    async def _relist(self, namespace: str | None = None) -> str:
        """List one namespace (None: the only one watched, or all) and diff the cache's part for it."""
        if namespace is None and len(self._namespaces()) == 1:
            namespace = self._namespaces()[0]
        items, rv = await self.api.list(self.kind, namespace, self.labels)
        fresh = {key_of(o): self.transform(o) for o in items}
        mine = [k for k in self.cache if namespace is None or k[0] == namespace]
        gone = [self.cache.pop(k) for k in mine if k not in fresh]
        # The same dict, refilled: readers hold it (progress reads the caches through a view of them).
        for k in mine:
            self.cache.pop(k, None)
        self.cache.update(fresh)
        for obj in [*fresh.values(), *gone]:
            self.on_change(obj)
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
        namespaces = self._namespaces()
        rvs = [await self._relist_retrying(ns) for ns in namespaces]
        await asyncio.gather(*(self.watch_from(rv, ns) for rv, ns in zip(rvs, namespaces, strict=True)))

    async def watch_from(self, rv: str, namespace: str | None = None) -> None:
        """Watch one namespace (None: the only one watched, or all) from resourceVersion `rv` forever,
        re-listing it whenever the watch ends."""
        if namespace is None and len(self._namespaces()) == 1:
            namespace = self._namespaces()[0]
        while True:
            try:
                async for kind, obj in self.api.watch(self.kind, namespace, rv, self.labels):
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
                rv = await self._relist_retrying(namespace)

    async def _relist_retrying(self, namespace: str | None = None) -> str:
        delay = 0.5
        while True:
            try:
                rv = await self._relist(namespace)
                if not self.synced.is_set() and namespace == self._namespaces()[-1]:
                    self.synced.set()  # every namespace listed once (they are listed in order)
                return rv
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("%s list failed: %s; retrying in %.1fs", self.kind, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
