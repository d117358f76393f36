"""What a refusal to create one of a job's pods means: final, so the job fails with it at once (a
fact for the next round, `World.refused`), or one that can pass, so the runtime tries again with
a backoff. Pure: the runtime hands over the API server's status code and message as it got them.

Final (the same request would be refused again until someone edits the job):
- 422 Invalid: the pod rendered from the template is not a valid pod (InvalidSpec).
- Pod Security admission (`violates PodSecurity "restricted:latest": ...`): the namespace's
  `pod-security.kubernetes.io/enforce` level forbids what the template asks for (PodRefused).
- An admission webhook's denial (`admission webhook "x" denied the request: ...`): a policy engine
  (Kyverno, Gatekeeper) said no to this pod (PodRefused). A webhook that could not be called
  (`failed calling webhook`, a 500) can pass.
- A ResourceQuota that requires what the pod does not say (`failed quota: q: must specify
  limits.cpu`), a LimitRange's bounds (`maximum cpu usage per Container is 1, but limit is 2`).

Can pass: a ResourceQuota's `exceeded quota` (pods end and free it), the operator's own RBAC (`User
... cannot create resource`: an administrator fixes it), a namespace being deleted, anything else.
"""

from __future__ import annotations

import re

from torchjob.api.model import TorchJob
from torchjob.api.status import Reason
from torchjob.core.round.world import Refusal

POD_SECURITY = "violates PodSecurity"
WEBHOOK_DENIED = re.compile(r'admission webhook "[^"]*" denied the request')
QUOTA_REQUIRES = re.compile(r"failed quota: .*must specify")
LIMIT_RANGE = re.compile(r"(maximum|minimum) \S+ usage per (Container|Pod)|"
                         r"(limit|request) to (request|limit) ratio")
# One clause of Pod Security's message: `(container "a" must set securityContext.x=...)`,
# `(containers "a", "b" must set ...)`, `(pod or container "a" must set ...)`, `(pod must not set ...)`.
CLAUSE = re.compile(r'\((pod or )?(?:containers? ((?:"[^"]+"(?:, | and )?)+)|pod) must (?:not )?set ([A-Za-z.]+)')


def judge_create(code: int | None, message: str, job: TorchJob, rtype: str, pod: str) -> Refusal | None:
    """A refusal of pod `pod` (of replica type `rtype`) as a fact of the job when retrying cannot cure
    it, with the API server's words and the field to change; None when it can pass."""
    if code == 422:
        return Refusal(Reason.INVALID_SPEC, f"a pod of this job is invalid: {message}")
    if code is None or not 400 <= code < 500 or code in (404, 409, 429):
        return None
    template = f"spec.pytorchReplicaSpecs.{rtype}.template"
    if POD_SECURITY in message:
        fields = pod_security_fields(message, job, rtype)
        fix = (f"change {', '.join(fields)}" if fields else f"change {template} to what the level allows")
        why = ("the namespace enforces a Pod Security level (its label pod-security.kubernetes.io/enforce): "
               f"{fix}, or run the job in a namespace that allows it")
    elif WEBHOOK_DENIED.search(message):
        why = f"an admission webhook denied it: change {template} to what its policy allows (its message says what)"
    elif QUOTA_REQUIRES.search(message) or LIMIT_RANGE.search(message):
        why = (f"the namespace's ResourceQuota or LimitRange requires other resources: change "
               f"{template}.spec.containers[*].resources (requests and limits)")
    else:
        return None
    return Refusal(Reason.POD_REFUSED, f"the API server refused pod {pod}, and will refuse it again until the "
                                       f"job changes: {message}; {why}")


def pod_security_fields(message: str, job: TorchJob, rtype: str) -> list[str]:
    """The template fields Pod Security's message asks to change, by path: a field it asks of the
    "pod or container" is named on the pod (one setting covers every container, torchjob's too)."""
    spec = job.spec.pytorchReplicaSpecs.get(rtype)
    mains = {c.name for c in spec.template.spec.containers} if spec else set()
    inits = {c.name for c in (spec.template.spec.initContainers or [])} if spec else set()
    base = f"spec.pytorchReplicaSpecs.{rtype}.template.spec"
    fields: list[str] = []
    for pod_or, names, field in CLAUSE.findall(message):
        field = field.rstrip(".")
        if not field.startswith("securityContext."):  # `must not set runAsUser=0`
            field = f"securityContext.{field}"
        if pod_or or not names:
            paths = [f"{base}.{field}"]
        else:
            paths = [_container_path(base, n, field, mains, inits) for n in re.findall(r'"([^"]+)"', names)]
        fields += [p for p in paths if p not in fields]
    return fields


def _container_path(base: str, name: str, field: str, mains: set[str], inits: set[str]) -> str:
    if name in mains:
        return f"{base}.containers[{name}].{field}"
    if name in inits:
        return f"{base}.initContainers[{name}].{field}"
    # One torchjob adds (wait-for-master): it follows the pod's securityContext where that names a user
    return f"{base}.{field} (container {name} is torchjob's: it runs as the pod says)"
