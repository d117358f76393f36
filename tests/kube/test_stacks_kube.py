"""`torchjob stacks --kube`'s side of the API (kube/clientside/stacks.py) against a real kube-apiserver and the
operator, the pods on a KWOK node (whose logs never answer): a job's running pods (by default made with the front) are
each asked through their annotation torchjob.dev/stacks-request, and a pod that does not answer is said, after the
bound it was given; a job whose pods cannot give stacks, or that opted out, is refused, saying why and what to do.
Real pods answering: tests/e2e/test_stacks_real.py."""

from __future__ import annotations

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.jobs import job_data
from tests.kube.conftest import Operator, wait_job
from tests.kube.test_operator import create, pods_of
from torchjob.api.errors import UserError
from torchjob.kube.clientside.kube_runtime import KubeRuntime
from torchjob.kube.objects.front import stacks as pod_stacks

pytestmark = pytest.mark.kube
KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]


def on_kwok(kube: Client, namespace: str, name: str, command: list[str], annotation: str | None = None) -> None:
    data = job_data(name, workers=1, command=command)
    if annotation is not None:
        data["metadata"]["annotations"] = {pod_stacks.ANNOTATION: annotation}
    for spec in data["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["tolerations"] = KWOK
    create(kube, data, namespace)
    wait_job(kube, name, namespace, lambda s: s.get("state") == "Running")


def test_each_running_pod_is_asked_and_one_that_does_not_answer_is_said(kubeconfig: str, kube: Client,
                                                                         namespace: str, operator: Operator) -> None:
    on_kwok(kube, namespace, "asked", ["python", "train.py"])
    on_kwok(kube, namespace, "nofront", ["bash", "-c", "python train.py"])
    on_kwok(kube, namespace, "optout", ["python", "train.py"], annotation="false")
    rt = KubeRuntime(kubeconfig, namespace=namespace)
    taken = rt.stacks("asked", wait_s=1.0)
    assert taken.processes == [] and 1.0 <= taken.seconds < 10, taken
    assert taken.missing == ["master-0 (its pod did not answer within 1 s)",
                             "worker-0 (its pod did not answer within 1 s)"]
    requests = {p.metadata.name: (p.metadata.annotations or {}).get(pod_stacks.ANNOTATION_REQUEST)
                for p in pods_of(kube, "asked", namespace)}
    assert set(requests) == {"asked-master-0", "asked-worker-0"} and len(set(requests.values())) == 1, requests
    assert all(requests.values())  # one request, written on each pod
    assert all(pod_stacks.container_of(p.to_dict()) == "pytorch" for p in pods_of(kube, "asked", namespace))

    # its command is not Python's: its pods were made without the front
    with pytest.raises(UserError) as refused:
        rt.stacks("nofront", wait_s=1.0)
    assert "pods run without torchjob's front, which gives their stacks" in refused.value.message
    assert "python -m torch.distributed.run" in (refused.value.fix or "")
    # opted out (torchjob.dev/stacks: "false"): made without the front, and said so
    with pytest.raises(UserError) as opted:
        rt.stacks("optout", wait_s=1.0)
    assert 'opted out of stacks (its annotation torchjob.dev/stacks: "false")' in opted.value.message
    assert "remove the job's metadata.annotations torchjob.dev/stacks" in (opted.value.fix or "")
    for job in ("nofront", "optout"):
        assert not any((p.metadata.annotations or {}).get(pod_stacks.ANNOTATION_REQUEST)
                       for p in kube.list(Pod, namespace=namespace, labels={"torchjob.dev/job-name": job}))
