"""What the operator reads of a stored job of each kind it serves (kube/served/kinds.py), pure."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.jobs import job_data
from tests.kube.test_kubeflow_crd import seed
from torchjob.kube.served import kinds as served


def as_a_go_client_writes_it(data: dict[str, Any]) -> dict[str, Any]:
    """The job after a Go client updated it through its typed struct, as Kueue's PyTorchJob
    integration does on admission: its flavor and podset label in each template, and
    metav1.ObjectMeta's zero time serialized as `creationTimestamp: null`."""
    out = copy.deepcopy(data)
    out["metadata"].update(namespace="ns", uid="u1")
    for rtype, rspec in out["spec"]["pytorchReplicaSpecs"].items():
        rspec["template"]["metadata"] = {"creationTimestamp": None, "labels": {"kueue.x-k8s.io/podset": rtype.lower()}}
        rspec["template"]["spec"]["nodeSelector"] = {"example.com/pool": "a"}
    out.setdefault("spec", {}).setdefault("runPolicy", {})["suspend"] = False
    return out


def test_a_pytorchjob_kueue_resumed_reads_with_kueues_flavor_and_labels() -> None:
    job = served.read_pytorchjob(as_a_go_client_writes_it(seed("mnist")))
    master = job.spec.pytorchReplicaSpecs["Master"].template
    assert master.metadata is not None and master.metadata.labels == {"kueue.x-k8s.io/podset": "master"}
    assert master.spec.nodeSelector == {"example.com/pool": "a"}


def test_a_torchjob_a_go_client_wrote_reads_too() -> None:
    job = served.read_torchjob(as_a_go_client_writes_it(job_data("tj", workers=1)))
    assert job.spec.pytorchReplicaSpecs["Worker"].template.spec.nodeSelector == {"example.com/pool": "a"}


def test_a_creation_time_written_in_a_template_is_still_refused() -> None:
    data = as_a_go_client_writes_it(seed("mnist"))
    data["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(served.Unreadable, match="creationTimestamp"):
        served.read_pytorchjob(data)


def test_the_client_names_the_torchjob_resource_as_its_crd_does() -> None:
    from torchjob.kube.machinery.client import TorchJobRes
    from torchjob.kube.objects.install.crd import GROUP, PLURAL, VERSION

    info = TorchJobRes._api_info
    assert (info.resource.group, info.resource.version, info.resource.kind, info.plural) == (
        GROUP, VERSION, "TorchJob", PLURAL)
