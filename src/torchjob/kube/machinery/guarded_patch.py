"""A merge patch of a job's `spec` or `status`, sent as a JSON patch (RFC 6902) that first tests the
object's uid: a write decided on a job that has since been deleted and made again under its name
(its informer event not yet seen) fails instead of landing on the new job.

A merge patch cannot carry that precondition: a `metadata.uid` in it is refused on the main
resource ("field is immutable") but ignored on the status subresource, which keeps the stored
metadata. The ops keep merge-patch semantics against the object as this process last saw it:
a nested object it holds is merged into key by key, anything else is replaced, `None` removes.
Where the stored object differs in shape from that view, the patch fails (422) and the caller's
next round, on a fresh view, writes again. A nested object whose ops would be many (a job of thousands
of replicas: `status.replicas`, four ops each) is written whole instead, merged here with what was seen:
the API server refuses a JSON patch of more than 10,000 ops (413), and a job of 2,500 replicas or more
could never have its status written."""

from __future__ import annotations

from typing import Any

OPS_AT_MOST = 100  # of one nested object's key-by-key ops; more: the object merged here, written in one op


def _pointer(path: str, key: str) -> str:
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    return value


def _merged(patch: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """`seen` with the merge patch `patch` applied (RFC 7386): what the key-by-key ops would make of it."""
    out = dict(seen)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(value, out[key])
        else:
            out[key] = _without_nones(value)
    return out


def _merge_ops(patch: dict[str, Any], seen: dict[str, Any], path: str) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for key, value in patch.items():
        where = _pointer(path, key)
        if value is None:  # added first so that the removal holds whether or not the key is there
            ops += [{"op": "add", "path": where, "value": None}, {"op": "remove", "path": where}]
        elif isinstance(value, dict) and isinstance(seen.get(key), dict):
            inner = _merge_ops(value, seen[key], where)
            ops += inner if len(inner) <= OPS_AT_MOST else [{"op": "add", "path": where,
                                                              "value": _merged(value, seen[key])}]
        else:
            ops.append({"op": "add", "path": where, "value": _without_nones(value)})
    return ops


def guarded_ops(uid: str, field: str, patch: dict[str, Any], seen: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that applies `patch` (a merge patch of the object's `field`) to the object of
    `uid` only; `seen` is the object as last seen (where its `field` holds an object, it is merged into)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    current = seen.get(field)
    if isinstance(current, dict):
        return ops + _merge_ops(patch, current, f"/{field}")
    return [*ops, {"op": "add", "path": f"/{field}", "value": _without_nones(patch)}]
