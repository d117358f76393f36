"""A recording fake of the operator's `Api`, for millisecond tests of the controller's sequencing
(what is written before what, what a 409, 422 or 403 leads to), as controller-runtime keeps a fake
client beside envtest. It stands beside the real-API-server suite (tests/kube), never instead of it:
it holds objects in memory, serves lists and watches from them, records every call in order, and
fails the calls a test tells it to. It does not validate, default or garbage-collect anything.

It implements the protocol the real `Api` implements (kube/machinery/api_protocol.py) and does not
inherit from it: a call it lacks is an error, never the real client's code run against nothing.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from torchjob.kube.machinery.api_protocol import ApiProtocol
from torchjob.kube.machinery.client import kind_of, status_code

ObjKey = tuple[str, str | None, str]  # (kind as Api names it, namespace, name)


@dataclass(frozen=True)
class Call:
    verb: str  # create | delete | patch_status | patch_spec | patch_data | apply_status | event | get | review_*
    kind: str
    name: str
    namespace: str | None
    body: Any = None

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.name}"


def api_error(code: int, message: str = "", kind: str = "", name: str = "") -> ApiError:
    """What lightkube raises for a failed call: the API server's Status, with its code."""
    reasons = {403: "Forbidden", 404: "NotFound", 409: "AlreadyExists", 422: "Invalid", 500: "InternalError"}
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
              "reason": reasons.get(code, ""), "message": message or reasons.get(code, ""),
              "details": {"name": name, "kind": kind}}
    return ApiError(response=httpx2.Response(code, json=status, request=httpx2.Request("POST", "https://fake")))


def matches(labels: dict[str, str], selector: dict[str, Any] | None) -> bool:
    """A lightkube label selector (None: exists; a string: equal; an operator) against labels."""
    for key, want in (selector or {}).items():
        if want is None or getattr(want, "op_name", None) == "exists":
            ok = key in labels
        elif getattr(want, "op_name", None) == "not_exists":
            ok = key not in labels
        elif getattr(want, "op_name", None) == "in_":
            ok = labels.get(key) in want.value
        else:
            ok = labels.get(key) == (want.value if hasattr(want, "op_name") else want)
        if not ok:
            return False
    return True


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[ObjKey, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.failures: list[tuple[Callable[[Call], bool], ApiError]] = []
        self.missing_kinds: set[str] = set()  # kinds whose CRD is not installed: every call answers 404
        self.logs: dict[tuple[str, str, str], list[str]] = {}  # (namespace, pod, container) -> its log's lines
        self._rv = itertools.count(1)
        self._watchers: list[tuple[str, str | None, dict[str, Any] | None, asyncio.Queue[tuple[str, Any]]]] = []
        self._uids = itertools.count(1)

    # --- what tests set up and look at ---

    def fail(self, when: Callable[[Call], bool], code: int, message: str = "") -> None:
        """Every call `when` accepts fails with `code` (until `heal`)."""
        self.failures.append((when, api_error(code, message)))

    def heal(self) -> None:
        self.failures.clear()

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as if someone else made it (a user's `kubectl apply`): watchers see it."""
        return self._store(copy.deepcopy(obj), "ADDED")

    def kubelet(self, name: str, namespace: str, phase: str, exit_code: int | None = None,
                container: str = "pytorch") -> None:
        """Play the kubelet: a pod's phase (and its container's exit), seen by the watches, not recorded."""
        pod = copy.deepcopy(self.objects[("Pod", namespace, name)])
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            status["containerStatuses"] = [{"name": container, "state": {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "finishedAt": "2026-01-01T00:00:01Z"}}}]
        pod["status"] = status
        if phase != "Pending":  # a pod a kubelet runs is bound to its node
            pod.setdefault("spec", {}).setdefault("nodeName", "node-0")
        self._store(pod, "MODIFIED")

    def writes(self, kinds: tuple[str, ...] = ()) -> list[Call]:
        """The calls that changed something, in order (those of `kinds` only, when given)."""
        return [c for c in self.calls if c.verb != "get" and (not kinds or c.kind in kinds)]

    def unseen(self) -> bool:
        """Whether a change is published that a watcher has not taken yet."""
        return any(not queue.empty() for *_, queue in self._watchers)

    def named(self, kind: str, namespace: str | None = None) -> list[str]:
        return sorted(n for (k, ns, n) in self.objects if k == kind and (namespace is None or ns == namespace))

    # --- the Api ---

    async def list(self, kind: str, namespace: str | None, labels: dict[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]:
        self._check(Call("list", kind, "", namespace))
        items = [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                 if k == kind and (namespace is None or ns == namespace)
                 and matches(o["metadata"].get("labels") or {}, labels)]
        return items, str(next(self._rv))

    async def watch(self, kind: str, namespace: str | None, resource_version: str,
                    labels: dict[str, Any] | None = None) -> AsyncIterator[tuple[str, Any]]:
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        watcher = (kind, namespace, labels, queue)
        self._watchers.append(watcher)
        try:
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(watcher)

    async def get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
        self._check(Call("get", kind, name, namespace))
        found = self.objects.get((kind, namespace, name))
        if found is None:
            raise api_error(404, f'{kind} "{name}" not found', kind.lower() + "s", name)
        return copy.deepcopy(found)

    async def find(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            return await self.get(kind, name, namespace)
        except Exception as e:  # as the real one: no such object, or no such kind
            if status_code(e) != 404:
                raise
            return None

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        call = Call("create", kind_of(obj), meta.get("name") or meta.get("generateName", ""), meta.get("namespace"),
                    copy.deepcopy(obj))
        self._check(call)
        if (call.kind, call.namespace, call.name) in self.objects:
            raise api_error(409, f'{call.kind} "{call.name}" already exists', call.kind.lower() + "s", call.name)
        return copy.deepcopy(self._store(copy.deepcopy(obj), "ADDED"))

    async def delete(self, kind: str, name: str, namespace: str, grace_s: int | None = None) -> None:
        self._check(Call("delete", kind, name, namespace, grace_s))
        found = self.objects.pop((kind, namespace, name), None)
        if found is not None:
            found["metadata"]["resourceVersion"] = str(next(self._rv))
            self._publish(kind, "DELETED", found)

    async def patch_status(self, name: str, namespace: str, status: dict[str, Any],
                           kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._merge(Call("patch_status", kind, name, namespace, copy.deepcopy(status)), {"status": status},
                           seen)

    async def patch_spec(self, name: str, namespace: str, spec: dict[str, Any],
                         kind: str = "TorchJob", seen: dict[str, Any] | None = None) -> dict[str, Any]:
        stored = self._merge(Call("patch_spec", kind, name, namespace, copy.deepcopy(spec)), {"spec": spec}, seen)
        return stored

    async def patch_annotations(self, kind: str, name: str, namespace: str, annotations: dict[str, str | None],
                                uid: str | None = None, resource_version: str | None = None) -> dict[str, Any]:
        found = self.objects.get((kind, namespace, name))
        if found is not None and resource_version and found["metadata"].get("resourceVersion") != resource_version:
            raise api_error(409, f'{kind} "{name}": the object has been modified', kind.lower() + "s", name)
        return self._merge(Call("patch_annotations", kind, name, namespace, copy.deepcopy(annotations)),
                           {"metadata": {"annotations": annotations}}, {"metadata": {"uid": uid}} if uid else None)

    async def log(self, pod: str, namespace: str, container: str, since_s: int, tail_lines: int) -> Sequence[str]:
        """What `logs` holds for the pod's container, `{request}` read as the pod's torchjob.dev/stacks-request
        annotation now (a test writes there what the pod's stacks watcher would answer to it)."""
        self._check(Call("log", "Pod", pod, namespace, container))
        obj = self.objects.get(("Pod", namespace, pod)) or {}
        request = ((obj.get("metadata") or {}).get("annotations") or {}).get("torchjob.dev/stacks-request", "")
        return [line.replace("{request}", request) for line in self.logs.get((namespace, pod, container), [])
                if request or "{request}" not in line][-tail_lines:]

    async def patch_data(self, kind: str, name: str, namespace: str, data: dict[str, Any]) -> None:
        self._merge(Call("patch_data", kind, name, namespace, copy.deepcopy(data)), {"data": data})

    async def apply_status(self, kind: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self._merge(Call("apply_status", kind, meta["name"], meta["namespace"], copy.deepcopy(body)),
                    {"status": body.get("status") or {}})

    async def review_token(self, token: str, audience: str | None) -> dict[str, Any]:
        self._check(Call("review_token", "TokenReview", "", None, audience))
        return {"authenticated": False}

    async def review_access(self, user: dict[str, Any], path: str, verb: str) -> bool:
        self._check(Call("review_access", "SubjectAccessReview", path, None, (user.get("username"), verb)))
        return False

    async def event(self, job: dict[str, Any], type_: str, reason: str, message: str,
                    at: datetime | None = None) -> None:
        meta = job["metadata"]
        self.calls.append(Call("event", "Event", meta["name"], meta.get("namespace"), (type_, reason, message)))

    # --- inside ---

    def _check(self, call: Call) -> None:
        if call.verb != "list":
            self.calls.append(call)
        if call.kind in self.missing_kinds:
            raise httpx2.HTTPStatusError("404 page not found", request=httpx2.Request("GET", "https://fake"),
                                         response=httpx2.Response(404))
        for when, error in self.failures:
            if when(call):
                raise error

    def _store(self, obj: dict[str, Any], event: str) -> dict[str, Any]:
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uids)}"
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self._rv))
        kind = kind_of(obj)
        self.objects[(kind, meta.get("namespace"), meta["name"])] = obj
        self._publish(kind, event, obj)
        return obj

    def _merge(self, call: Call, patch: dict[str, Any], seen: dict[str, Any] | None = None) -> dict[str, Any]:
        self._check(call)
        found = self.objects.get((call.kind, call.namespace, call.name))
        uid = (seen or {}).get("metadata", {}).get("uid")
        if found is None or (uid and found["metadata"].get("uid") != uid):  # as client.py's uid-guarded patch
            raise api_error(404, f'{call.kind} "{call.name}" not found', call.kind.lower() + "s", call.name)
        merged = merge(copy.deepcopy(found), patch)
        if "spec" in patch:
            merged["metadata"]["generation"] = merged["metadata"].get("generation", 1) + 1
        return copy.deepcopy(self._store(merged, "MODIFIED"))

    def _publish(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        for wkind, ns, labels, queue in self._watchers:
            if wkind == kind and (ns is None or ns == obj["metadata"].get("namespace")) and matches(
                    obj["metadata"].get("labels") or {}, labels):
                queue.put_nowait((event, copy.deepcopy(obj)))


def merge(into: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386): None deletes a key, mappings merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


_conforms: ApiProtocol = FakeApi()  # mypy: the fake implements what the operator may call
