"""Whose install the cluster-wide objects of `torchjob install` are (kube/objects/install.py), so that an
install into another namespace is refused before it applies anything. Pure: the objects' copies on the
cluster are handed in.

The ClusterRoles and ClusterRoleBindings have fixed names (and the Roles of watched namespaces too): a
second install into another namespace would apply them over the first one's, re-pointing each binding at
its own ServiceAccount and taking the first operator's rights away (Helm refuses the same case: the
objects belong to another release). Whose install an object is, is told by what the binding binds: the
operator's ServiceAccount, in the namespace it was installed into; so an install by the chart, or by an
older torchjob, is told too, and nothing else need be written on the objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchjob.api.errors import UserError
from torchjob.kube.objects.install import NAME

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
BINDINGS = ("ClusterRoleBinding", "RoleBinding")


@dataclass(frozen=True)
class Taken:
    """An object an install would apply that belongs to an install in another namespace."""

    kind: str
    name: str
    namespace: str | None  # a RoleBinding's own namespace (a ClusterRoleBinding has none)
    owner: str  # the namespace of the install it belongs to
    release: str | None = None  # the Helm release that made it, if Helm did

    @property
    def what(self) -> str:
        return f"{self.kind} {self.name}" + (f" in {self.namespace}" if self.namespace else "")


def bound_namespace(binding: dict[str, Any]) -> str | None:
    """The namespace of the ServiceAccount a binding binds (None: it binds none, e.g. a Group)."""
    for subject in binding.get("subjects") or []:
        if subject.get("kind") == "ServiceAccount" and subject.get("namespace"):
            return str(subject["namespace"])
    return None


def to_check(objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects whose copies on the cluster say whose install they are: the bindings of a ServiceAccount."""
    return [o for o in objs if o["kind"] in BINDINGS and bound_namespace(o) is not None]


def taken(objs: Sequence[dict[str, Any]], namespace: str,
          found: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[Taken]:
    """Which of `objs` (an install into `namespace`) are there already as another namespace's install's:
    `found(obj)` is the object's copy on the cluster (None: there is none). Re-installing into the same
    namespace (an upgrade) takes nothing."""
    out = []
    for obj in to_check(objs):
        there = found(obj)
        owner = bound_namespace(there) if there is not None else None
        if there is None or owner is None or owner == namespace:
            continue
        meta = there.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        release = annotations.get(HELM_RELEASE) if annotations.get(HELM_NAMESPACE, owner) == owner else None
        out.append(Taken(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"), owner, release))
    return out


def refusal(found: Sequence[Taken], namespace: str) -> UserError:
    """The error of an install into `namespace` over another namespace's (`found`: not empty)."""
    owner = found[0].owner
    names = ", ".join(t.what for t in found)
    others = sorted({t.owner for t in found} - {owner})
    also = f" (and {', '.join(others)})" if others else ""
    helm = next((t.release for t in found if t.release), None)
    remove = (f"helm uninstall -n {owner} {helm}" if helm else
              f"kubectl delete namespace {owner}, then its cluster-scoped objects: "
              + "; ".join(f"kubectl delete {t.kind.lower()} {t.name}" + (f" -n {t.namespace}" if t.namespace else "")
                          for t in found))
    verb = "belongs" if len(found) == 1 else "belong"
    return UserError(
        f"{names} {verb} to the torchjob install in namespace {owner}{also} (bound to its ServiceAccount "
        f"{NAME}): installing into {namespace} would bind them to {namespace}'s instead and take that operator's "
        "rights away; nothing was applied",
        fix=f"install into {owner} (torchjob install --namespace {owner}: an upgrade), or remove that install "
            f"first ({remove})")
