"""core.refusals: which refusals of a pod are final (the job fails with them at once, naming the field
to change) and which can pass (retried with a backoff). The messages are the API server's own, as
kube-apiserver v1.36 wrote them for these pods (Pod Security's taken from a dry-run create)."""

from __future__ import annotations

import pytest

from tests.jobs import job_data
from torchjob.api.load import job_from_data
from torchjob.api.status import Reason
from torchjob.core.policies.refusals import judge_create

JOB = job_from_data(job_data("demo"))
POD_SECURITY = (
    'pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
    '(container "pytorch" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
    '(container "pytorch" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
    'container "pytorch" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "pytorch" '
    'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
WEBHOOK = ('admission webhook "validate.kyverno.svc-fail" denied the request: policy Pod/team/demo-worker-0 for '
           'resource violation: require-labels: the label team is required')
BASE = "spec.pytorchReplicaSpecs.Worker.template.spec"


def test_pod_security_is_final_and_names_each_field_to_change() -> None:
    refused = judge_create(403, POD_SECURITY, JOB, "Worker", "demo-worker-0")
    assert refused is not None and refused.reason == Reason.POD_REFUSED
    assert POD_SECURITY in refused.message  # the server's words, whole
    for field in (f"{BASE}.containers[pytorch].securityContext.allowPrivilegeEscalation",
                  f"{BASE}.containers[pytorch].securityContext.capabilities.drop",
                  f"{BASE}.securityContext.runAsNonRoot",  # "pod or container": once, on the pod
                  f"{BASE}.securityContext.seccompProfile.type"):
        assert field in refused.message, field
    assert "pod-security.kubernetes.io/enforce" in refused.message


def test_pod_security_naming_several_containers_and_the_pod() -> None:
    data = job_data("demo")
    spec = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["initContainers"] = [{"name": "fetch", "image": "x"}]
    message = ('pods "demo-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
               '!= false (containers "pytorch", "fetch" must set securityContext.allowPrivilegeEscalation=false), '
               'runAsUser=0 (pod must not set runAsUser=0)')
    refused = judge_create(403, message, job_from_data(data), "Worker", "demo-worker-0")
    assert refused is not None
    assert f"{BASE}.containers[pytorch].securityContext.allowPrivilegeEscalation" in refused.message
    assert f"{BASE}.initContainers[fetch].securityContext.allowPrivilegeEscalation" in refused.message
    assert f"{BASE}.securityContext.runAsUser" in refused.message


@pytest.mark.parametrize(("code", "message", "reason"), [
    (403, WEBHOOK, Reason.POD_REFUSED),
    (400, WEBHOOK, Reason.POD_REFUSED),  # a webhook may answer with its own code
    (403, 'pods "demo-worker-0" is forbidden: failed quota: compute: must specify limits.cpu for: pytorch',
     Reason.POD_REFUSED),
    (403, 'pods "demo-worker-0" is forbidden: maximum cpu usage per Container is 1, but limit is 2',
     Reason.POD_REFUSED),
    (422, 'Pod "demo-worker-0" is invalid: spec.containers[0].image: Required value', Reason.INVALID_SPEC),
])
def test_final_refusals(code: int, message: str, reason: Reason) -> None:
    refused = judge_create(code, message, JOB, "Worker", "demo-worker-0")
    assert refused is not None and refused.reason == reason and message in refused.message


@pytest.mark.parametrize(("code", "message"), [
    (403, 'pods "demo-worker-0" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=2, '
          'limited: pods=2'),
    (403, 'pods is forbidden: User "system:serviceaccount:torchjob-system:torchjob" cannot create resource "pods" '
          'in API group "" in the namespace "team"'),
    (403, 'pods "demo-worker-0" is forbidden: unable to create new content in namespace team because it is being '
          'terminated'),
    (500, 'Internal error occurred: failed calling webhook "validate.kyverno.svc-fail": context deadline exceeded'),
    (429, "the server has received too many requests"),
    (None, "connection refused"),
])
def test_refusals_that_can_pass_are_left_to_the_backoff(code: int | None, message: str) -> None:
    assert judge_create(code, message, JOB, "Worker", "demo-worker-0") is None
