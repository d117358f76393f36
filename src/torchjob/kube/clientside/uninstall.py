"""`torchjob uninstall`'s side of the cluster: what `torchjob install` into a namespace may have applied
(with any of its flags), the cluster's copies of it, how many objects the CRDs hold, and the deletes.
What is deleted is decided by kube/objects/install/uninstall.py (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchjob.kube.objects.install import CA_CONFIGMAP, DEFAULT_IMAGE, INPLACE_CONFIGMAP, NAME, manifests
from torchjob.kube.objects.install.uninstall import Removal, operator_made, plan, watched
from torchjob.kube.served.t9k_objects import t9k_api_objects
from torchjob.kube.served.trainer_objects import trainer_api_objects


def candidates(namespace: str, watch_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Every object an install into `namespace` may have applied, whichever flags it had (two replicas:
    the disruption budget too), and what its operator made there."""
    objs = manifests(DEFAULT_IMAGE, namespace, replicas=2, kubeflow_api=True, watch_namespaces=watch_namespaces)
    return [*objs, *trainer_api_objects(namespace, watch_namespaces), *t9k_api_objects(namespace, watch_namespaces),
            *operator_made(namespace)]


def found(kube: Any, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The cluster's copy of `obj`, or None (none; or its kind is not served, as a CRD's kind before the CRD
    is made: a 404 without a Status, not an ApiError). `torchjob install` asks it too."""
    from lightkube.core.resource_registry import resource_registry

    import torchjob.kube.machinery.client  # noqa: F401 (registers the generic kinds, ClusterTrainingRuntime's)
    from torchjob.kube.machinery.client import status_code

    meta = obj["metadata"]
    res = resource_registry.load(obj["apiVersion"], obj["kind"])
    if res is None:
        raise ValueError(f"{obj['apiVersion']} {obj['kind']}: a kind the client does not know")
    try:
        there = kube.get(res, meta["name"], namespace=meta.get("namespace"))
    except Exception as e:
        if status_code(e) == 404:
            return None
        raise
    data: dict[str, Any] = there.to_dict()
    return data


def operator_configmaps(kube: Any) -> list[dict[str, Any]]:
    """What the operator made in the jobs' namespaces: the progress endpoint's CA and the in-place entry point
    (ConfigMaps of torchjob's names, one list each)."""
    from lightkube import ALL_NS
    from lightkube.resources.core_v1 import ConfigMap

    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": cm.metadata.namespace}}
            for name in (CA_CONFIGMAP, INPLACE_CONFIGMAP)
            for cm in kube.list(ConfigMap, namespace=ALL_NS, fields={"metadata.name": name})]


def removal(kube: Any, namespace: str) -> Removal:
    """What uninstalling the install in `namespace` deletes (UserError where Helm or another install owns it)."""
    deployment = found(kube, {"apiVersion": "apps/v1", "kind": "Deployment",
                              "metadata": {"name": NAME, "namespace": namespace}})
    objs = [*candidates(namespace, watched(deployment)), *operator_configmaps(kube)]
    return plan(objs, namespace, lambda obj: found(kube, obj))


def held(kube: Any, crds: Sequence[dict[str, Any]]) -> list[tuple[str, int]]:
    """(kind, how many objects of it the cluster holds) for each CRD: what deleting it deletes."""
    import time

    from lightkube import ALL_NS
    from lightkube.generic_resource import create_global_resource, create_namespaced_resource

    from torchjob.kube.machinery.client import status_code

    out = []
    for crd in crds:
        spec = crd["spec"]
        names = spec["names"]
        version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
        make = create_global_resource if spec.get("scope") == "Cluster" else create_namespaced_resource
        res: Any = make(spec["group"], version, names["kind"], names["plural"])
        where = {} if spec.get("scope") == "Cluster" else {"namespace": ALL_NS}
        end = time.monotonic() + 10
        while True:
            try:
                count = sum(1 for _ in kube.list(res, **where))
                break
            except Exception as e:  # a CRD just made: 429, its storage is (re)initializing, for a moment
                if status_code(e) != 429 or time.monotonic() > end:
                    raise
                time.sleep(0.3)
        out.append((str(names["kind"]), count))
    return out


def counted(held_: Sequence[tuple[str, int]]) -> str:
    """`3 TorchJobs and 1 TrainJob`; `none` where the kinds hold no object."""
    parts = [f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in held_ if n]
    if not parts:
        return "none"
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def delete(kube: Any, objs: Sequence[dict[str, Any]]) -> list[str]:
    """Delete each of `objs` (gone meanwhile: skipped); what was deleted, as `Kind/name [-n NS]`."""
    from lightkube.core.resource_registry import resource_registry

    import torchjob.kube.machinery.client  # noqa: F401
    from torchjob.kube.machinery.client import status_code
    from torchjob.kube.objects.install.uninstall import what

    done = []
    for obj in objs:
        res: Any = resource_registry.load(obj["apiVersion"], obj["kind"])
        try:
            kube.delete(res, obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        except Exception as e:
            if status_code(e) == 404:
                continue
            raise
        done.append(what(obj))
    return done

