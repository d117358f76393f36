"""Every seed document, read by its dialect and submitted to a real kube-apiserver: the operator
makes one pod per replica with the right rank and rendezvous env, the headless Service, and the
PodGroup where the document asks for Volcano."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Service

from tests.kube.conftest import Operator, admit_podgroup
from tests.kube.test_operator import create, wait_pods
from torchjob.core.shape.topology import node_rank, replicas
from torchjob.dialects.convert import explicit
from torchjob.dialects.load import load
from torchjob.kube.machinery.client import VolcanoPodGroup
from torchjob.kube.objects.admission import gang
from torchjob.kube.objects.labels import pod_name
from torchjob.kube.objects.workload import pods as pod_objects

pytestmark = pytest.mark.kube
SEEDS = sorted((Path(__file__).resolve().parents[1] / "dialects" / "seeds").glob("*.yaml"))


def env(pod: Any) -> dict[str, str]:
    c = pod.spec.containers[0]  # every seed has one container
    names = [e.name for e in c.env]
    assert len(names) == len(set(names)), f"duplicated env in {pod.metadata.name}: {names}"
    return {e.name: e.value for e in c.env if e.value is not None}


@pytest.mark.parametrize("seed", SEEDS, ids=[s.stem for s in SEEDS])
def test_seed_reconciles_to_its_pods_service_and_env(seed: Path, kube: Client, namespace: str, operator: Operator,
                                                     scheduling_crds: list[str]) -> None:
    job = load(seed).job
    create(kube, explicit(job), namespace)
    if gang.awaits_admission(job):
        admit_podgroup(kube, job.name, namespace)
    expected = replicas(job)
    pods = {p.metadata.name: p for p in wait_pods(kube, job.name, namespace, len(expected))}
    assert set(pods) == {pod_name(job, r) for r in expected}
    where = pod_objects.placement(job)
    for rid in expected:
        e = env(pods[pod_name(job, rid)])
        assert e["RANK"] == str(node_rank(job, rid)) and e["WORLD_SIZE"] == str(len(expected))
        assert e["MASTER_ADDR"] == where.master_addr and e["MASTER_PORT"] == str(where.master_port)
        assert pods[pod_name(job, rid)].spec.subdomain == job.name
    svc = kube.get(Service, job.name, namespace=namespace)
    assert svc.spec is not None and svc.spec.clusterIP == "None" and svc.spec.publishNotReadyAddresses
    if gang.podgroup_kind(job) is gang.VOLCANO_PG:
        assert kube.get(VolcanoPodGroup, job.name, namespace=namespace)["spec"]["minMember"] == gang.min_member(job)
