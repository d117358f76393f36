"""What reading a stored object of a served kind shares: its own fields, and the error that says it
is not a job torchjob can run (core refuses it with the message)."""

from __future__ import annotations

from typing import Any

META_FIELDS = ("name", "namespace", "labels", "annotations", "uid", "generation", "resourceVersion")


class Unreadable(Exception):
    """A stored object that is not a job torchjob can run; the message says why (core refuses it)."""


def stored(raw: dict[str, Any]) -> dict[str, Any]:
    """The stored object's own fields: server-managed metadata (managedFields, timestamps) left out."""
    meta = {k: raw["metadata"][k] for k in META_FIELDS if k in raw["metadata"]}
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": meta,
            "spec": raw.get("spec")}
