"""A TrainJob's `runtimePatches` (Trainer v2.3): what its managers add to the runtime's pod template.

Only the trainer's job is patched here (its other jobs are refused with the runtime). Lists keyed
by name merge by name (`volumes`, `imagePullSecrets`, containers' `env` and `volumeMounts`), as
server-side apply merges them; `nodeSelector` merges by key; the other fields replace. A container
patch must name a container the runtime has, and the `node` container's env comes from the trainer
only (Trainer's own rules, trainjob_types.go ContainerPatch).
"""

from __future__ import annotations

import copy
from typing import Any

from torchjob.dialects import Notes
from torchjob.dialects.trainer_runtime import NODE

Path = list[str | int]
POD_FIELDS = {"serviceAccountName", "volumes", "initContainers", "containers", "imagePullSecrets", "securityContext",
              "nodeSelector", "affinity", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"}
REPLACED = ("serviceAccountName", "securityContext", "affinity", "tolerations", "terminationGracePeriodSeconds")
CONVERT_MANAGER = "torchjob.dev/convert"


def _by_name(into: list[Any], items: list[Any]) -> list[Any]:
    out = {i.get("name"): i for i in into if isinstance(i, dict)}
    out.update({i.get("name"): copy.deepcopy(i) for i in items if isinstance(i, dict)})
    return list(out.values())


def _containers(notes: Notes, patch: dict[str, Any], key: str, pod: dict[str, Any], path: Path) -> None:
    existing = {c.get("name"): c for c in pod.get(key) or [] if isinstance(c, dict)}
    for i, cp in notes.items(patch, key, path):
        notes.unknown(cp, {"name", "env", "volumeMounts", "securityContext"}, [*path, key, i])
        target = existing.get(cp.get("name"))
        if target is None:
            notes.error([*path, key, i, "name"], f"the runtime's pod has no {key[:-1]} {cp.get('name')!r}",
                        f"patch one of {sorted(str(n) for n in existing)}")
            continue
        if cp.get("env") and cp.get("name") == NODE and key == "containers":
            notes.error([*path, key, i, "env"], f"the {NODE} container's env comes from spec.trainer.env only "
                        "(Trainer's rule)", "move these entries to spec.trainer.env")
        for field in ("env", "volumeMounts"):
            if isinstance(cp.get(field), list):
                target[field] = _by_name(target.get(field) or [], cp[field])
        if "securityContext" in cp:
            target["securityContext"] = copy.deepcopy(cp["securityContext"])


def apply_patches(notes: Notes, spec: dict[str, Any], pod: dict[str, Any], job_name: str) -> None:
    """spec.runtimePatches onto the trainer's pod template `pod` (in place)."""
    for pi, patch in notes.items(spec, "runtimePatches", ["spec"]):
        path: Path = ["spec", "runtimePatches", pi]
        notes.unknown(patch, {"manager", "time", "trainingRuntimeSpec"}, path)
        rts = notes.section(patch, "trainingRuntimeSpec", path)
        notes.unknown(rts, {"template"}, [*path, "trainingRuntimeSpec"])
        path = [*path, "trainingRuntimeSpec", "template"]
        jobset = notes.section(rts, "template", [*path[:-1]])
        notes.unknown(jobset, {"metadata", "spec"}, path)
        if "metadata" in jobset:
            notes.warn([*path, "metadata"], "the JobSet's labels and annotations are not used; ignored")
        jspec = notes.section(jobset, "spec", path)
        notes.unknown(jspec, {"replicatedJobs"}, [*path, "spec"])
        for ji, rj in notes.items(jspec, "replicatedJobs", [*path, "spec"]):
            rpath: Path = [*path, "spec", "replicatedJobs", ji]
            notes.unknown(rj, {"name", "template"}, rpath)
            if rj.get("name") != job_name:
                notes.warn(rpath, f"patches job {rj.get('name')!r}, which torchjob does not run; ignored")
                continue
            _job_patch(notes, notes.section(rj, "template", rpath), pod, [*rpath, "template"])


def _job_patch(notes: Notes, job: dict[str, Any], pod: dict[str, Any], path: Path) -> None:
    notes.unknown(job, {"metadata", "spec"}, path)
    if "metadata" in job:
        notes.warn([*path, "metadata"], "the Job's labels and annotations are not used; ignored")
    jspec = notes.section(job, "spec", path)
    notes.unknown(jspec, {"template"}, [*path, "spec"])
    tpl = notes.section(jspec, "template", [*path, "spec"])
    path = [*path, "spec", "template"]
    notes.unknown(tpl, {"metadata", "spec"}, path)
    meta = notes.section(tpl, "metadata", path)
    notes.unknown(meta, {"labels", "annotations"}, [*path, "metadata"])
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), dict):
            pod.setdefault("metadata", {}).setdefault(key, {}).update(meta[key])
    ps = notes.section(tpl, "spec", path)
    notes.unknown(ps, POD_FIELDS, [*path, "spec"])
    target = pod.setdefault("spec", {})
    for key in REPLACED:
        if key in ps:
            target[key] = copy.deepcopy(ps[key])
    for key in ("volumes", "imagePullSecrets"):
        if isinstance(ps.get(key), list):
            target[key] = _by_name(target.get(key) or [], ps[key])
    if isinstance(ps.get("nodeSelector"), dict):
        target["nodeSelector"] = {**(target.get("nodeSelector") or {}), **ps["nodeSelector"]}
    if ps.get("schedulingGates"):
        notes.warn([*path, "spec", "schedulingGates"], "not supported by torchjob's pods; ignored")
    for key in ("containers", "initContainers"):
        _containers(notes, ps, key, target, [*path, "spec"])


def write_patches(pod: dict[str, Any], node: dict[str, Any],
                  others: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """What of a native pod template a runtime patch can carry onto torch-distributed, and what not.
    `node` is the training container less the trainer's fields; `others` the pod's other containers."""
    lost: list[str] = []
    ps: dict[str, Any] = {}
    spec = pod.get("spec", {})
    for key in (*REPLACED, "volumes", "imagePullSecrets", "nodeSelector"):
        if key in spec:
            ps[key] = spec[key]
    patch = {k: node.pop(k) for k in ("volumeMounts", "securityContext") if k in node}
    if patch:
        ps["containers"] = [{"name": NODE, **patch}]
    node.pop("name", None)
    node.pop("ports", None)
    lost += [f"the training container's {k} has no TrainJob field" for k in node]
    lost += [f"container {c.get('name')!r}: torch-distributed's pod has no such container" for c in others]
    lost += [f"pod spec {k} has no TrainJob field" for k in spec
             if k not in ps and k not in ("containers", "restartPolicy")]
    tpl: dict[str, Any] = {"spec": ps} if ps else {}
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k in ("labels", "annotations")}
    if meta:
        tpl["metadata"] = meta
    if not tpl:
        return [], lost
    return [{"manager": CONVERT_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": NODE, "template": {"spec": {"template": tpl}}}]}}}}], lost
