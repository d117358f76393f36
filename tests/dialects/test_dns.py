"""Every host a pod is told resolves (case 7): over every document the readers accept, each host in
MASTER_ADDR, PET_MASTER_ADDR and PET_RDZV_ENDPOINT of `render --kube` resolves by Kubernetes DNS
rules against the objects rendered: a Service's name, or `hostname.subdomain` of a pod whose
subdomain is a headless Service selecting it (each optionally followed by `.NAMESPACE`,
`.NAMESPACE.svc` or `.NAMESPACE.svc.cluster.local`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.dialects.strategies import DOCUMENTS
from tests.dialects.util import SEEDS, read, read_data
from torchjob.api.errors import InvalidJob
from torchjob.kube.objects.workload.pods import manifests

HOST_VARS = ("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT")


def _selects(svc: dict[str, Any], pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in (svc["spec"].get("selector") or {}).items())


def resolves(host: str, objects: list[dict[str, Any]]) -> bool:
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    pods = [o for o in objects if o["kind"] == "Pod"]
    namespaces = {o["metadata"]["namespace"] for o in objects}
    suffixes = [""] + [s.format(ns) for ns in namespaces for s in (".{}", ".{}.svc", ".{}.svc.cluster.local")]
    for suffix in suffixes:
        if suffix and not host.endswith(suffix):
            continue
        short = host[: len(host) - len(suffix)] if suffix else host
        if short in services:
            return True
        label, _, subdomain = short.partition(".")
        svc = services.get(subdomain)
        if svc is None or svc["spec"].get("clusterIP") != "None":
            continue
        if any(p["spec"].get("hostname") == label and p["spec"].get("subdomain") == subdomain and _selects(svc, p)
               for p in pods):
            return True
    return False


def told_hosts(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for pod in (o for o in objects if o["kind"] == "Pod"):
        for c in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
            for e in c.get("env", []):
                if e["name"] in HOST_VARS and "value" in e:
                    out.append((pod["metadata"]["name"], e["name"], e["value"].rsplit(":", 1)[0]
                                if e["name"] == "PET_RDZV_ENDPOINT" else e["value"]))
    return out


def check(objects: list[dict[str, Any]]) -> None:
    hosts = told_hosts(objects)
    assert hosts, "no pod was told a host"
    bad = [h for h in hosts if not resolves(h[2], objects)]
    assert not bad, f"hosts that do not resolve: {bad}"


def test_the_resolver_is_strict() -> None:
    objects = manifests(read((SEEDS / "004-kubeflow-simple.yaml").read_text()).job)
    assert resolves("pytorch-simple-001-master-0.pytorch-simple-001", objects)
    assert resolves("pytorch-simple-001", objects)
    assert resolves("pytorch-simple-001-worker-1.pytorch-simple-001.kubeflow.svc.cluster.local", objects)
    assert not resolves("pytorch-simple-001-worker-0", objects)  # Kubeflow's bare name: a Service per pod there
    assert not resolves("pytorch-simple-001-worker-9.pytorch-simple-001", objects)
    assert not resolves("pytorch-simple-001-master-0.other", objects)


@pytest.mark.parametrize("seed", sorted(p.name for p in SEEDS.glob("*.yaml")))
def test_seed_hosts_resolve(seed: str) -> None:
    check(manifests(read((SEEDS / seed).read_text()).job))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
def test_every_host_a_pod_is_told_resolves(data: dict[str, Any]) -> None:
    try:
        job = read_data(data).job
    except InvalidJob:
        return  # not accepted: nothing is rendered
    check(manifests(job))


def test_a_bare_rendezvous_host_naming_a_replica_resolves() -> None:
    text = yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "el"},
        "spec": {"elasticPolicy": {"rdzvHost": "el-worker-0", "rdzvBackend": "c10d"},
                 "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
                     {"name": "pytorch", "command": ["torchrun", "t.py"]}]}}}}}})
    objects = manifests(read(text).job)
    assert {h[2] for h in told_hosts(objects) if h[1] == "PET_RDZV_ENDPOINT"} == {"el-worker-0.el"}
    check(objects)


def test_seeds_directory_is_not_empty() -> None:
    assert len(list(Path(SEEDS).glob("*.yaml"))) == 5
