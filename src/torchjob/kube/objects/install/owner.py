"""Whose install the cluster-wide objects of `torchjob install` are (kube/objects/install/), so that an
install into another namespace is refused before it applies anything. Pure: the objects' copies on the
cluster are handed in.

The ClusterRoles and ClusterRoleBindings have fixed names (and the Roles of watched namespaces too): a
second install into another namespace would apply them over the first one's, re-pointing each binding at
its own ServiceAccount and taking the first operator's rights away (Helm refuses the same case: the
objects belong to another release). Whose install an object is, is told by what the binding binds: the
operator's ServiceAccount, in the namespace it was installed into; so an install by the chart, or by an
older torchjob, is told too, and nothing else need be written on the objects.

The objects of a foreign API that torchjob serves (`--trainer-api`: Kubeflow Trainer's CRDs, its
`torch-distributed` runtime and `kubeflow-trainer-public` ConfigMap; `--t9k-api`: T9k's CRD) have the
names that API's own install gives them. Where the cluster has one that torchjob did not make (Kubeflow
Trainer's manifests or chart, T9k's), applying ours would take it over: the CRD relabelled as torchjob's,
so that torchjob's operator serves its jobs beside their own controller. `foreign` finds them (torchjob
marks its own with OURS_LABEL, or OURS_ANNOTATION where Helm rewrites that label), `installer` says who
made each from its labels, annotations and field managers, and `take_over_refusal` is the error: an
install goes on over them only when told to (`torchjob install --take-over`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchjob.api.errors import UserError
from torchjob.kube.objects.install import NAME

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
BINDINGS = ("ClusterRoleBinding", "RoleBinding")
# What says an object is torchjob's: the label (`torchjob install`), or the annotation (the chart's:
# Helm sets the label to its own name)
OURS_LABEL = ("app.kubernetes.io/managed-by", "torchjob")
OURS_ANNOTATION = ("torchjob.dev/installed-by", "torchjob")
# Labels and annotations that tell who made an object, as the installs that make them write them
WHO_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "app.kubernetes.io/name",
              "app.kubernetes.io/instance", "app.kubernetes.io/version")
WHO_ANNOTATIONS = ("controller-gen.kubebuilder.io/version",)  # on the CRDs Kubebuilder projects generate
WHO_SUFFIXES = (".kubeflow.org", ".tensorstack.dev")  # Kubeflow's and T9k's own label prefixes


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


def ours(obj: dict[str, Any]) -> bool:
    """Whether torchjob made `obj` (its label, or its annotation where Helm relabelled it)."""
    meta = obj.get("metadata") or {}
    return ((meta.get("labels") or {}).get(OURS_LABEL[0]) == OURS_LABEL[1]
            or (meta.get("annotations") or {}).get(OURS_ANNOTATION[0]) == OURS_ANNOTATION[1])


@dataclass(frozen=True)
class Foreign:
    """An object an install would apply over one that another install (not torchjob's) made."""

    kind: str
    name: str
    namespace: str | None
    by: str  # who made it, as its labels, annotations and field managers say

    @property
    def what(self) -> str:
        return f"{self.kind} {self.name}" + (f" in {self.namespace}" if self.namespace else "")


def installer(obj: dict[str, Any]) -> str:
    """Who made `obj`, in words, from what its metadata says: a Helm release, the labels of its install
    (app.kubernetes.io/*, Kubeflow's and T9k's own), a generator's annotation, its field managers."""
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    said = []
    if annotations.get(HELM_RELEASE):
        said.append(f"Helm release {annotations[HELM_RELEASE]} in namespace {annotations.get(HELM_NAMESPACE, '?')}")
    said += [f"label {k}={v}" for k, v in sorted(labels.items())
             if k in WHO_LABELS or k.split("/")[0].endswith(WHO_SUFFIXES)]
    said += [f"annotation {k}={annotations[k]}" for k in WHO_ANNOTATIONS if k in annotations]
    # of the object itself: a status is written by its controller (a CRD's, by the API server)
    managers = list(dict.fromkeys(str(m["manager"]) for m in meta.get("managedFields") or []
                                  if m.get("manager") and m.get("subresource") != "status"))
    if managers:
        said.append("field manager" + ("s " if len(managers) > 1 else " ") + ", ".join(managers))
    return "; ".join(said) or "nothing on it says who"


def to_take_over(objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects of `objs` whose names another install may have made too: those torchjob marks as its
    own (the foreign APIs' CRDs and objects; torchjob's own objects have torchjob's names)."""
    return [o for o in objs if ours(o)]


def foreign(objs: Sequence[dict[str, Any]], found: Callable[[dict[str, Any]], dict[str, Any] | None]
            ) -> list[Foreign]:
    """Which of `objs` the cluster has already, made by another install than torchjob's: `found(obj)` is
    the object's copy on the cluster (None: there is none)."""
    out = []
    for obj in to_take_over(objs):
        there = found(obj)
        if there is not None and not ours(there):
            meta = obj["metadata"]
            out.append(Foreign(obj["kind"], meta["name"], meta.get("namespace"), installer(there)))
    return out


def take_over_refusal(found: Sequence[Foreign], flags: str = "--trainer-api/--t9k-api") -> UserError:
    """The error of an install (`flags`: those that add the objects) that would take over another install's
    objects (`found`: not empty)."""
    names = "; ".join(f"{f.what} ({f.by})" for f in found)
    crds = [f.name for f in found if f.kind == "CustomResourceDefinition"]
    two = (f"the CRDs ({', '.join(crds)}) would be marked torchjob's, and torchjob's operator would act on their "
           "jobs beside that install's controller" if crds else "torchjob's would replace that install's own")
    return UserError(
        f"another install (not torchjob's) made what {flags} would apply over: {names}. Applying torchjob's "
        f"would take them over: {two}; nothing was applied",
        fix=f"leave that install alone (install without {flags}), or uninstall it first, or pass --take-over "
            "to make these objects torchjob's (stop the other install's controller first: two controllers must "
            "not act on the same jobs)")
