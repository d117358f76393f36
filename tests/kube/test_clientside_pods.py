"""The client side (`--kube`'s describe and logs, the dashboard, a handle's result) shows a job's own
pods only: those whose controlling owner is the job (its uid), as the operator counts them. A pod
anyone may create with the job's labels, and a label that is not a number, change nothing (issue 30,
item 5). Against a real kube-apiserver and the operator, the pods on a KWOK node."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import ConfigMap, Pod

from tests.kube.conftest import Operator
from tests.kube.test_cli_kube import running_on_kwok
from tests.kube.test_operator import pods_of
from torchjob.kube.clientside.kube_runtime import KubeRuntime, pods
from torchjob.kube.objects.labels import LABEL_INDEX, LABEL_TYPE

pytestmark = pytest.mark.kube
LINES = ["fake container output from KWOK (scripts/dev-cluster.sh)", "second line"]


def impostor(real: Any, name: str, labels: dict[str, str], owner: dict[str, Any] | None) -> Pod:
    """A pod made by someone else, with the job's labels, on the node the job's pods run on."""
    data = real.to_dict()
    meta: dict[str, Any] = {"name": name, "namespace": data["metadata"]["namespace"],
                            "labels": {**data["metadata"]["labels"], **labels}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": data["spec"]})


def test_a_pod_labelled_as_the_jobs_by_someone_else_is_not_shown(kubeconfig: str, kube: Client, namespace: str,
                                                                  operator: Operator) -> None:
    running_on_kwok(kube, "own", namespace)
    real = sorted(p.metadata.name for p in pods_of(kube, "own", namespace))
    assert real == ["own-master-0", "own-worker-0"]
    master = next(p for p in pods_of(kube, "own", namespace) if p.metadata.name == "own-master-0")
    decoy = kube.create(ConfigMap.from_dict({"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "decoy", "namespace": namespace}}))
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "decoy", "uid": decoy.metadata.uid,
             "controller": True}
    kube.create(impostor(master, "x-no-owner", {LABEL_INDEX: "x"}, None))  # not a number: no crash
    kube.create(impostor(master, "x-other-owner", {LABEL_TYPE: "worker", LABEL_INDEX: "0"}, other))
    job = kube.get(Pod, "own-master-0", namespace=namespace).metadata.ownerReferences[0]
    kube.create(impostor(master, "x-not-controller", {LABEL_INDEX: "7"},  # owned, but not as its controller
                         {"apiVersion": job.apiVersion, "kind": job.kind, "name": job.name, "uid": job.uid}))
    assert len(pods_of(kube, "own", namespace)) == 5  # what a selection by label alone finds

    rt = KubeRuntime(kubeconfig, namespace=namespace)
    view = rt.describe("own")
    assert [(a.replica, a.pod) for a in view.attempts] == [("master-0", "own-master-0"), ("worker-0", "own-worker-0")]
    assert [p["metadata"]["name"] for p in view.raw["pods"]] == ["own-master-0", "own-worker-0"]
    assert list(rt.logs("own")) == [f"[{r}] {line}" for r in ("master-0", "worker-0") for line in LINES]
    assert list(rt.logs("own", "worker-0")) == [f"[worker-0] {line}" for line in LINES]
    data = {"kind": "TorchJob", "metadata": {"name": "own", "namespace": namespace}}  # no uid: no pod is its
    assert pods(kube, data) == []


def pod(name: str, rtype: str, index: str) -> Pod:
    return Pod.from_dict({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "labels": {LABEL_TYPE: rtype, LABEL_INDEX: index}}})


def test_pods_are_ordered_master_first_by_index_and_a_label_not_a_number_goes_last() -> None:
    from torchjob.kube.clientside.job_pods import _order

    found = [pod("w10", "worker", "10"), pod("wx", "worker", "x"), pod("w2", "worker", "2"),
             pod("m", "master", "0"), pod("w-arabic", "worker", "\u0663"), pod("none", "", "")]
    assert [p.metadata.name for p in sorted(found, key=_order)] == ["m", "none", "w2", "w10", "w-arabic", "wx"]


def test_an_attempt_annotation_that_is_not_a_number_is_attempt_0() -> None:
    """A pod anyone made may carry any annotation: describe (and the operator's observe) read 0, no crash."""
    from torchjob.kube.clientside.kube_runtime import attempt_of as view_of_attempt
    from torchjob.kube.objects.labels import ANNOTATION_ATTEMPT, attempt_of

    for given, read in (("3", 3), ("x", 0), ("-1", 0), ("\u0663", 0), ("", 0)):
        assert attempt_of({"metadata": {"annotations": {ANNOTATION_ATTEMPT: given}}}) == read
    bad = Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "labels": {LABEL_TYPE: "worker", LABEL_INDEX: "x"}, "annotations": {ANNOTATION_ATTEMPT: "x"}}})
    assert view_of_attempt(bad).attempt == 0 and view_of_attempt(bad).replica == "worker-x"
