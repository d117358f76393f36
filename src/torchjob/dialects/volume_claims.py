"""A JobSet's `volumeClaimPolicies` (Kubeflow Trainer's runtimes give a TrainJob its workspace so:
the torchtune ones claim `initializer`, mounted at /workspace by the initializers and the node).

JobSet makes each template's claim once per JobSet, `{template}-{jobset}` (the JobSet is named as
the TrainJob), labelled `jobset.sigs.k8s.io/jobset-name`, owned by the JobSet when the policy's
`retentionPolicy.whenDeleted` is Delete (its webhook's default), and adds to each Job's pod template
whose containers mount the template's name a volume of that name on the claim (jobset
pkg/controllers/volume_claim_policy.go). Its webhook refuses duplicate or non-DNS-1123 names, a
namespace in a template, a claim name over 63 characters, a template no container mounts, and a pod
volume of a template's name (pkg/webhooks/jobset_webhook.go validateVolumeClaimPolicies). Facts
from kubernetes-sigs/jobset @08dfbdf. torchjob reads them into the native `volumeClaims` (the
operator makes them) and the pods' volumes; locally each claim is a directory.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from torchjob.dialects import Notes

Path = list[str | int]
WHEN_DELETED = ("Delete", "Retain")
CLAIM_NAME_MAX = 63  # jobset_webhook.go maxVolumeClaimLength
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _mounts(pod: dict[str, Any]) -> set[str]:
    """The volume names the pod's containers mount (what is not a list or a mapping, the model refuses later)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    names = set()
    for group in ("containers", "initContainers"):
        for c in _list((spec or {}).get(group)):
            for m in _list(c.get("volumeMounts")) if isinstance(c, dict) else []:
                if isinstance(m, dict) and isinstance(m.get("name"), str):
                    names.add(m["name"])
    return names


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _volumes(pod: dict[str, Any]) -> list[Any]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    volumes = (spec or {}).get("volumes")
    return volumes if isinstance(volumes, list) else []


def read(notes: Notes, jobset: dict[str, Any], pods: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The templates of `jobset`'s volumeClaimPolicies (refused as JobSet's webhook refuses them), each
    {name, spec, labels?, annotations?, whenDeleted}; `pods` are the pod templates of the jobs run."""
    claims: list[dict[str, Any]] = []
    mounted = set().union(*(_mounts(p) for p in pods)) if pods else set()
    for i, policy in notes.items(jobset, "volumeClaimPolicies", [*path, "volumeClaimPolicies"]):
        ppath: Path = [*path, "volumeClaimPolicies", i]
        notes.unknown(policy, {"templates", "retentionPolicy"}, ppath)
        retention = notes.section(policy, "retentionPolicy", ppath)
        notes.unknown(retention, {"whenDeleted"}, [*ppath, "retentionPolicy"])
        when = retention.get("whenDeleted", "Delete")
        if when not in WHEN_DELETED:
            notes.error([*ppath, "retentionPolicy", "whenDeleted"], f"must be Delete or Retain, got {when!r}",
                        "Delete (the claim goes with the TrainJob) or Retain (it stays)")
        for j, template in notes.items(policy, "templates", ppath):
            tpath: Path = [*ppath, "templates", j]
            notes.unknown(template, {"apiVersion", "kind", "metadata", "spec"}, tpath)
            meta = notes.section(template, "metadata", tpath)
            notes.unknown(meta, {"name", "labels", "annotations", "namespace"}, [*tpath, "metadata"])
            name = notes.typed(meta, "name", [*tpath, "metadata"], str, "the claim's volume name, e.g. initializer")
            if meta.get("namespace"):
                notes.error([*tpath, "metadata", "namespace"], "cannot be set: the claim is made in the TrainJob's "
                            "namespace (JobSet refuses it too)", "remove metadata.namespace")
            if not name:
                notes.error([*tpath, "metadata", "name"], "is missing", "name the claim as its volumeMounts do")
                continue
            if not _DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
                notes.error([*tpath, "metadata", "name"], f"{name!r} is not a DNS-1123 name (JobSet refuses it too)",
                            "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit")
            if any(c["name"] == name for c in claims):
                notes.error([*tpath, "metadata", "name"], f"{name!r} is a second template of that name",
                            "give each claim template its own name")
            if name not in mounted:
                notes.error([*tpath, "metadata", "name"], f"no container of the runtime's jobs mounts {name!r} "
                            "(JobSet refuses a claim no one mounts)", f"add a volumeMount named {name} where it is "
                            "used, or remove the template")
            for k, pod in enumerate(pods):
                if any(isinstance(v, dict) and v.get("name") == name for v in _volumes(pod)):
                    notes.error([*path, "replicatedJobs"], f"a job's pod has a volume named {name!r}, which the "
                                f"claim template of that name gives (JobSet refuses it too; pod {k})",
                                f"remove that volume: the claim {name} is mounted by its name")
            claim: dict[str, Any] = {"name": name, "spec": copy.deepcopy(notes.section(template, "spec", tpath)),
                                     "whenDeleted": when}
            for key in ("labels", "annotations"):
                if isinstance(meta.get(key), dict):
                    claim[key] = {str(k): str(v) for k, v in meta[key].items()}
            claims.append(claim)
    return claims


def claim_name(template: str, job: str) -> str:
    """The claim JobSet makes of `template` for the JobSet (the TrainJob) `job` (GeneratePVCName)."""
    return f"{template}-{job}"


def native(notes: Notes, claims: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    """The native `volumeClaims` of a TrainJob named `job`: each claim named and labelled as JobSet does."""
    out = []
    for c in claims:
        name = claim_name(c["name"], job)
        if len(name) > CLAIM_NAME_MAX:
            notes.error(["metadata", "name"], f"the workspace claim {name!r} would be {len(name)} characters, over "
                        f"{CLAIM_NAME_MAX} (JobSet names it TEMPLATE-TRAINJOB and refuses it too)",
                        "shorten the TrainJob's name")
        labels = {**(c.get("labels") or {}), JOBSET_NAME_LABEL: job}
        out.append({"name": name, "labels": labels, "spec": c["spec"], "whenDeleted": c["whenDeleted"],
                    **({"annotations": c["annotations"]} if c.get("annotations") else {})})
    return out


def mount(pod: dict[str, Any], claims: list[dict[str, Any]], job: str) -> None:
    """Adds to `pod` (a pod template) a volume on each claim its containers mount, as JobSet adds it."""
    mounted = _mounts(pod)
    wanted = [c["name"] for c in claims if c["name"] in mounted]
    if not wanted:
        return
    spec = pod.setdefault("spec", {})
    spec["volumes"] = [*(spec.get("volumes") or []),
                       *({"name": n, "persistentVolumeClaim": {"claimName": claim_name(n, job)}} for n in wanted)]
