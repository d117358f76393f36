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
import zlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import msgspec

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import status_code, to_dict

log = logging.getLogger("torchjob.kube")
Key = tuple[str, str]  # (namespace, name)


def key_of(obj: dict[str, Any]) -> Key:
    """(namespace, name); the namespace interned: thousands of keys share it."""
    meta = obj["metadata"]
    return sys.intern(meta.get("namespace") or "default"), meta["name"]


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


def only_status_changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether `after` (an object as a status write stored it) is `before` (as the writer read it)
    but for its status: no one else changed its spec or metadata in between, so its watch event
    brings nothing the writer has not seen (their own event, older than the write, is skipped)."""
    if before.get("spec") != after.get("spec"):
        return False
    b, a = before.get("metadata") or {}, after.get("metadata") or {}
    if any(b.get(k) != a.get(k) for k in (set(b) | set(a)) - {"resourceVersion", "managedFields", "annotations"}):
        return False
    return _annotations(b) == _annotations(a)


def _annotations(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}


def metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """For caches that only tell whether an object exists, and whose it is (by its labels)."""
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in OWNED_META if k in meta}}


def whole(obj: dict[str, Any]) -> dict[str, Any]:
    """For caches of whole objects (jobs): all of it but kubectl's last-applied annotation (a
    second copy of the object)."""
    annotations = obj.get("metadata", {}).get("annotations")
    if annotations and LAST_APPLIED in annotations:
        obj = {**obj, "metadata": {**obj["metadata"],
                                   "annotations": {k: v for k, v in annotations.items() if k != LAST_APPLIED}}}
    return dict(obj)


def pod_cached(pod: dict[str, Any]) -> dict[str, Any]:
    """A job's pod as the operator caches it: only what is read from it (what core observes, the
    controller's index and force deletes, the progress receiver), so that what is packed leaves
    out the rest of the event (spec, conditions, IPs, managedFields...): name, namespace, uid,
    resourceVersion, creation and deletion times, labels, torchjob's annotations, its controller (apiVersion, kind,
    name, uid); its node's name; status phase, reason, message, a DisruptionTarget condition (why
    Kubernetes deletes it), a PodScheduled one while False (why no node takes it) and each
    container's name and state.terminated."""
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
                 for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"
                 or (c.get("type") == "PodScheduled" and c.get("status") == "False")]
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
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "status": st,
            **({"spec": {"nodeName": node}} if node else {})}


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """An object read for its status (a PodGroup) as a cache keeps it: metadata and status."""
    return {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "metadata": pod["metadata"],
            "status": pod.get("status") or {}}


class Packed(MutableMapping[Key, dict[str, Any]]):
    """An informer's cache, each object kept packed: its resourceVersion and its compact JSON in
    one bytes value (b"<rv>|<json>", the JSON deflated where it is longer than DEFLATE_OVER bytes;
    bench/operator_memory.py reads them by field), unpacked into a fresh dict when read. At 10,000
    jobs and 40,000 pods, the dicts of every cached field were most of the operator's memory (a job
    6.8 kB, a trimmed pod 1.9 kB as dicts; 0.7 kB and 0.4 kB packed); an object is read a few times
    a round, and unpacking it costs a small part of what its watch event's parse did. A reader gets
    its own copy: what it changes stays its own."""

    DEFLATE_OVER = 256  # bytes of JSON; zlib at level 1 (a job's 1.8 kB -> 0.7 kB, in microseconds)

    def __init__(self) -> None:
        self._blobs: dict[Key, bytes] = {}

    def __getitem__(self, key: Key) -> dict[str, Any]:
        return unpack(self._blobs[key])

    def __setitem__(self, key: Key, obj: dict[str, Any]) -> None:
        text = _encode(obj)
        self._blobs[key] = b"%d|%s" % (_rv(obj), zlib.compress(text, 1) if len(text) > self.DEFLATE_OVER else text)

    def __delitem__(self, key: Key) -> None:
        del self._blobs[key]

    def __contains__(self, key: object) -> bool:
        return key in self._blobs

    def __iter__(self) -> Iterator[Key]:
        return iter(self._blobs)

    def __len__(self) -> int:
        return len(self._blobs)

    def version(self, key: Key) -> int:
        """The cached object's resourceVersion as a number (0: none cached, or opaque), unpacking nothing."""
        packed = self._blobs.get(key)
        return version_of(packed) if packed is not None else 0

    def blob(self, key: Key) -> bytes | None:
        """The cached object still packed (`unpack` reads it): kept by a reader that reads it later as it
        was now, sharing the cache's bytes while the object does not change."""
        return self._blobs.get(key)


# msgspec's JSON (lightkube parses every answer with it): the same compact JSON as the json module's
# (non-ASCII as UTF-8, not escaped), encoded ~10x and parsed ~2.5x faster; every watch event is one
# encode, every read of a cached object one parse.
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def version_of(blob: bytes) -> int:
    """A packed object's resourceVersion (0: opaque)."""
    return int(blob[:blob.index(b"|")])


def unpack(blob: bytes) -> dict[str, Any]:
    """A packed object (Packed) as a dict: JSON starts with `{`, deflated JSON never does."""
    body = blob[blob.index(b"|") + 1:]
    return _decode(body if body[:1] == b"{" else zlib.decompress(body))


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
        self.cache = Packed()
        # Our own writes already acted on (`remember(quiet=True)`): the resourceVersion whose watch
        # event is only their echo, which then updates nothing and calls no `on_change`.
        self._echoes: dict[Key, int] = {}
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
        # The same mapping, refilled: readers hold it (progress reads the caches through a view of them).
        for k in mine:
            self.cache.pop(k, None)
            self._echoes.pop(k, None)
        self.cache.update(fresh)
        for obj in [*fresh.values(), *gone]:
            self.on_change(obj)
        return rv

    def remember(self, obj: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
        """Cache an object the controller just wrote (its watch event comes later), unless the cache
        already holds a newer version of it. Returns what the cache holds. `quiet`: the writer has
        acted on it already, so its watch event (the same resourceVersion) is not a change: no
        `on_change` for it (a status write's echo was a round of its own for every write)."""
        key, obj = key_of(obj), self.transform(obj)
        if key not in self.cache or _rv(obj) >= self.cache.version(key):
            self.cache[key] = obj
            if quiet and _rv(obj):
                self._echoes[key] = _rv(obj)
            return obj
        return self.cache[key]

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
                    key, version = key_of(data), _rv(data)
                    echo = self._echoes.pop(key, None) if self._echoes else None
                    if kind == "DELETED":
                        self.cache.pop(key, None)
                    elif version < self.cache.version(key):
                        continue  # older than what we wrote ourselves and cached already
                    elif version and version == echo and key in self.cache:
                        continue  # our own write, cached and acted on already
                    else:
                        self.cache[key] = data
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
