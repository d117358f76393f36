"""A Trainer runtime's volumeClaimPolicies (the workspace of its torchtune runtimes) read as JobSet
serves them: the native volumeClaims, named TEMPLATE-TRAINJOB and labelled with the JobSet's name,
the pods that mount the template's name given a volume on the claim, and JobSet's webhook refusals
(dialects/volume_claims.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trainjob_initializers import runtime, trainjob
from torchjob.api.errors import InvalidJob
from torchjob.api.model import MASTER, WORKER, TorchJob
from torchjob.dialects.load import load
from torchjob.kube.objects.workload import claims


def _load(tmp_path: Path, rt: dict[str, Any], name: str = "tune") -> TorchJob:
    path = tmp_path / "job.yaml"
    job = trainjob(name, "torchtune-like", "hf://tj/tiny-data", "hf://tj/tiny-model")
    path.write_text(yaml.safe_dump_all([job, rt], sort_keys=False))
    return load(path).job


def _runtime(**policy: Any) -> dict[str, Any]:
    rt = runtime("torchtune-like", None, node_image="train:1")
    rt["spec"]["template"]["spec"]["volumeClaimPolicies"][0].update(copy.deepcopy(policy))
    return rt


def _problems(tmp_path: Path, rt: dict[str, Any], name: str = "tune") -> list[tuple[str, str]]:
    with pytest.raises(InvalidJob) as err:
        _load(tmp_path, rt, name)
    return [(p.path, p.message) for p in err.value.problems]


def test_the_claim_is_made_per_trainjob_and_mounted_where_its_name_is(tmp_path: Path) -> None:
    job = _load(tmp_path, _runtime())
    (claim,) = job.spec.volumeClaims or []
    assert claim.name == "initializer-tune"  # jobset GeneratePVCName: <template>-<jobset>, the JobSet the TrainJob's
    assert claim.labels == {"jobset.sigs.k8s.io/jobset-name": "tune"}
    assert claim.spec == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}
    assert claim.whenDeleted == "Delete"  # JobSet's webhook's default: owned, deleted with the job
    pods = [job.spec.pytorchReplicaSpecs[t].template for t in (MASTER, WORKER)]
    pods += [s.template for s in job.spec.initializers or []]
    assert len(pods) == 4
    for pod in pods:
        assert [(v.name, v.persistentVolumeClaim) for v in pod.spec.volumes or []] == [
            ("initializer", {"claimName": "initializer-tune"})]
    kept = _load(tmp_path, _runtime(retentionPolicy={"whenDeleted": "Retain"}))
    assert [c.whenDeleted for c in kept.spec.volumeClaims or []] == ["Retain"]
    # the objects the operator makes: owned by the job (deleted with it) unless Retain
    (made,) = claims.claims(job)
    assert (made["metadata"]["name"], made["spec"]) == ("initializer-tune", claim.spec)
    assert [r["name"] for r in made["metadata"]["ownerReferences"]] == ["tune"]
    assert "ownerReferences" not in claims.claims(kept)[0]["metadata"]


def test_what_jobsets_webhook_refuses_is_refused_naming_the_runtimes_field(tmp_path: Path) -> None:
    base = "spec.template.spec.volumeClaimPolicies[0]"
    unmounted = _runtime(templates=[{"metadata": {"name": "cache"}, "spec": {}}])
    assert _problems(tmp_path, unmounted) == [(f"{base}.templates[0].metadata.name", "no container of the runtime's "
                                               "jobs mounts 'cache' (JobSet refuses a claim no one mounts)")]
    with_ns = _runtime(templates=[{"metadata": {"name": "initializer", "namespace": "x"}, "spec": {}}])
    assert _problems(tmp_path, with_ns)[0][0] == f"{base}.templates[0].metadata.namespace"
    assert _problems(tmp_path, _runtime(retentionPolicy={"whenDeleted": "Keep"})) == [
        (f"{base}.retentionPolicy.whenDeleted", "must be Delete or Retain, got 'Keep'")]
    both = runtime("torchtune-like", "/tmp/ws", node_image="train:1")  # a pod volume of the claim's name too
    both["spec"]["template"]["spec"]["volumeClaimPolicies"] = _runtime()["spec"]["template"]["spec"][
        "volumeClaimPolicies"]
    found = _problems(tmp_path, both)
    assert found and all(p == "spec.template.spec.replicatedJobs" and "a volume named 'initializer'" in m
                         for p, m in found), found
    (long_name,) = _problems(tmp_path, _runtime(), name="t" * 60)
    assert long_name[0] == "metadata.name" and "'initializer-" in long_name[1] and "over 63" in long_name[1]
