"""Who holds a name a job's pod or Service needs, after the API server answered 409 for it."""

from __future__ import annotations

from typing import Any

from torchjob.kube.machinery.api_protocol import ApiProtocol


class NameTaken(Exception):
    """A pod or Service name this job needs is held by another job's (or nobody's) object."""


async def check_taken(api: ApiProtocol, obj: dict[str, Any]) -> None:
    """After a 409 for a pod or Service of a job: one this job owns, or an earlier job of the same
    name and kind (its garbage collection frees the name), is left as it is; one that another job
    owns, or none, holds the name, and the job cannot start while it does: an error that says
    whose (a TorchJob and a PyTorchJob of one name in a namespace want the same names)."""
    meta = obj["metadata"]
    ours = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if ours is None:
        return
    found = await api.find(obj["kind"], meta["name"], meta.get("namespace", "default"))
    if found is None:
        return
    owner = next((r for r in found["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if owner is not None and (owner.get("uid") == ours["uid"] or
                              (owner.get("kind"), owner.get("name")) == (ours["kind"], ours["name"])):
        return
    whose = f"{owner.get('kind')} {owner.get('name')}" if owner else "nothing of torchjob's (it has no owner)"
    raise NameTaken(f"{obj['kind']} {meta['name']} exists and belongs to {whose}, so this {ours['kind']} cannot "
                    f"make its own; delete or rename one of them (a TorchJob and a PyTorchJob of the same name "
                    f"in a namespace want the same pod and Service names); this job starts once the name is free")
