"""What `torchjob uninstall` deletes: of the objects `torchjob install` applies (whatever its flags:
the candidates are handed in), those the cluster has and that are this install's. Pure: the cluster's
copies are handed in through `found`.

What is this install's, and what is not (the same names as owner.py tells them apart):
- an object another install made under a name torchjob also uses for a foreign API (Kubeflow Trainer's
  CRDs and runtime, T9k's CRD, the training-operator's PyTorchJob CRD) lacks torchjob's label or
  annotation (owner.ours): left alone;
- a namespace is deleted only when `torchjob install` created it (it marks those: `mark_created`): one
  made beforehand (`kubectl create namespace`, Helm's `--create-namespace`, Trainer's `kubeflow-system`)
  is kept, and so is what else lives there;
- an object Helm made (its `app.kubernetes.io/managed-by: Helm` label or `meta.helm.sh/*` annotations)
  belongs to a release of the chart: the uninstall refuses, naming `helm uninstall`, and deletes nothing;
  but for a CRD, which `helm uninstall` keeps (with those annotations still on it): left, saying so;
- a binding that binds another namespace's operator belongs to the install there: refused likewise.
The CRDs are kept unless asked (`--crds`): deleting one deletes every object of its kind, the jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchjob.api.errors import UserError
from torchjob.kube.objects.install import LEASE, NAME, TLS_SECRET
from torchjob.kube.objects.install.owner import BINDINGS, HELM_NAMESPACE, HELM_RELEASE, bound_namespace, installer, ours

# On a namespace `torchjob install` created (not on one it found): uninstall deletes those only
CREATED = ("torchjob.dev/created-by", "torchjob-install")
HELM_LABEL = ("app.kubernetes.io/managed-by", "Helm")
CRD = "CustomResourceDefinition"
# Deleted in this order: the operator first (it stops acting), the namespaced objects, the runtimes
# (objects of a kept CRD), the cluster-wide roles, the namespaces, the CRDs (and with them the jobs) last.
ORDER = {"Deployment": 0, "ClusterTrainingRuntime": 2, "ClusterRoleBinding": 3, "ClusterRole": 4,
         "Namespace": 5, CRD: 6}


def operator_made(namespace: str) -> list[dict[str, Any]]:
    """What the operator makes in its own namespace (not applied by the install, but of it): its Lease
    and its progress endpoint's TLS Secret."""
    return [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": LEASE, "namespace": namespace}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TLS_SECRET, "namespace": namespace}}]


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], str(meta.get("namespace") or ""), str(meta["name"])


def what(obj: dict[str, Any]) -> str:
    """`Kind/name`, and ` -n NAMESPACE` for a namespaced object."""
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']}/{obj['metadata']['name']}" + (f" -n {ns}" if ns else "")


def helm_release(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(release, its namespace) when Helm made `obj` ('?' where its metadata does not say), else None."""
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if annotations.get(HELM_RELEASE) or labels.get(HELM_LABEL[0]) == HELM_LABEL[1]:
        return str(annotations.get(HELM_RELEASE) or "?"), str(annotations.get(HELM_NAMESPACE) or "?")
    return None


def install_made(namespace: dict[str, Any]) -> bool:
    """Whether `torchjob install` made a namespace (it marks those it creates: `mark_created`)."""
    return ((namespace.get("metadata") or {}).get("annotations") or {}).get(CREATED[0]) == CREATED[1]


def mark_created(objs: Sequence[dict[str, Any]], found: Callable[[dict[str, Any]], dict[str, Any] | None]
                 ) -> list[dict[str, Any]]:
    """`objs` (an install's) with each Namespace that the cluster lacks, or that an earlier install made,
    marked CREATED: what `torchjob uninstall` deletes. A namespace made beforehand stays unmarked (the
    apply writes nothing the cluster's copy lacks; one it wrote before and now left out, SSA would remove)."""
    out = []
    for obj in objs:
        if obj["kind"] == "Namespace":
            there = found(obj)
            if there is None or install_made(there):
                meta = obj["metadata"]
                obj = {**obj, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                                   CREATED[0]: CREATED[1]}}}
        out.append(obj)
    return out


def watched(deployment: dict[str, Any] | None) -> list[str]:
    """The namespaces an installed operator watches (its Deployment's `--namespace` flags; none: all)."""
    if deployment is None:
        return []
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    command = next((c.get("command") or [] for c in containers if c.get("name") == "operator"), [])
    return [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "--namespace"]


@dataclass(frozen=True)
class Removal:
    """`delete`: this install's objects, in the order to delete them; `crds`: its CRDs (the cluster's
    copies), kept unless --crds; `left`: objects of the same names that are not this install's, each
    with why (who made them)."""

    delete: list[dict[str, Any]] = field(default_factory=list)
    crds: list[dict[str, Any]] = field(default_factory=list)
    left: list[tuple[dict[str, Any], str]] = field(default_factory=list)


def plan(candidates: Sequence[dict[str, Any]], namespace: str,
         found: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Removal:
    """What uninstalling the install in `namespace` deletes, of `candidates` (all an install there may have
    applied or made); `found(obj)` is the cluster's copy (None: none). Raises UserError, having decided
    nothing, where Helm or the install of another namespace owns one of them."""
    out = Removal()
    helm: list[tuple[dict[str, Any], tuple[str, str]]] = []
    others: list[tuple[dict[str, Any], str]] = []
    seen: set[tuple[str, str, str]] = set()
    for obj in candidates:
        if key(obj) in seen:
            continue
        seen.add(key(obj))
        there = found(obj)
        if there is None or (there.get("metadata") or {}).get("deletionTimestamp"):  # none, or going already
            continue
        if obj["kind"] == "Namespace":
            if install_made(there):
                out.delete.append(obj)
            else:
                out.left.append((obj, f"torchjob install did not make it (no {CREATED[0]} annotation): kept, "
                                      "with what else it holds"))
            continue
        if ours(obj) and not ours(there):  # a foreign API's object that its own install made
            out.left.append((obj, f"not torchjob's: {installer(there)}"))
            continue
        release = helm_release(there)
        owner = bound_namespace(there) if obj["kind"] in BINDINGS else None
        if release is not None and obj["kind"] == CRD:  # kept by `helm uninstall`, or its release's
            name = obj["metadata"]["name"]
            out.left.append((obj, f"made by Helm (release {release[0]} in namespace {release[1]}), which keeps it "
                                  f"on uninstall: once that release is gone, kubectl delete crd {name}"))
        elif release is not None:
            helm.append((obj, release))
        elif owner is not None and owner != namespace:
            others.append((obj, owner))
        elif obj["kind"] == CRD:
            out.crds.append(there)
        else:
            out.delete.append(obj)
    if helm:
        raise helm_refusal(helm)
    if others:
        raise other_install_refusal(others, namespace)
    out.delete.sort(key=lambda o: ORDER.get(o["kind"], 1))
    return out


def helm_refusal(found: Sequence[tuple[dict[str, Any], tuple[str, str]]]) -> UserError:
    release, ns = found[0][1]
    names = ", ".join(what(o) for o, _ in found)
    helm = f"helm uninstall -n {ns} {release}" if "?" not in (release, ns) else "helm uninstall the release"
    return UserError(
        f"{names} {'was' if len(found) == 1 else 'were'} made by Helm (release {release} in namespace {ns}): "
        "torchjob uninstall removes only what `torchjob install` made, and would break that release; "
        "nothing was deleted",
        fix=f"remove the release with Helm ({helm}; its CRDs are kept, and so the jobs: docs/operator/install.md)")


def other_install_refusal(found: Sequence[tuple[dict[str, Any], str]], namespace: str) -> UserError:
    owner = found[0][1]
    names = ", ".join(what(o) for o, _ in found)
    return UserError(
        f"{names} {'belongs' if len(found) == 1 else 'belong'} to the torchjob install in namespace {owner} "
        f"(bound to its ServiceAccount {NAME}), not to one in {namespace}; nothing was deleted",
        fix=f"uninstall that install: torchjob uninstall --namespace {owner}")


def confirm_refusal(crds: Sequence[dict[str, Any]], counted: str) -> UserError:
    """--crds without --yes where no one can be asked (no terminal: CI, a pipe)."""
    names = ", ".join(c["metadata"]["name"] for c in crds)
    return UserError(
        f"--crds deletes the CRDs {names} and with them every object of their kinds (now: {counted}); not "
        "confirmed (no terminal to ask on), nothing was deleted",
        fix="add --yes to confirm (torchjob uninstall --crds --dry-run lists it all first), or drop --crds to keep "
            "the CRDs and the jobs")
