"""Pod Security `restricted` and quotas on a real API server: the containers torchjob adds pass its
admission (a dry-run create of every pod and of TensorBoard's pod template, in a namespace that
enforces `restricted` and whose ResourceQuota requires limits); a job the admission refuses fails at
once with the server's message and the field to change, and the operator asks for each pod once
(counted by the API server's own metrics); a pod refused by an exceeded quota is retried and made
once the quota frees. The real pods of a restricted job run in tests/e2e/test_restricted_real.py."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Namespace, Pod, ResourceQuota
from lightkube.types import PatchType

from tests.docs.blocks import tested as blocks
from tests.kube.conftest import Operator, apiserver_metrics, finished, wait_job
from torchjob.api.load import job_from_data
from torchjob.api.model import TensorBoardSpec, TorchJob
from torchjob.core.shape.topology import ReplicaId
from torchjob.kube.machinery.client import TorchJobRes
from torchjob.kube.objects.labels.ownership import owner_reference
from torchjob.kube.objects.workload import pods as pod_objects

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "operator" / "restricted.md"
E2E = "test_a_restricted_job_trains_to_success_in_a_restricted_namespace"  # the page's example runs there
ENFORCE = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}


def restricted_namespace(kube: Client, quota: dict[str, str] | None = None) -> str:
    """A namespace that enforces Pod Security `restricted`, with a ResourceQuota when asked for (its
    status filled in as kube-controller-manager's quota controller would: this control plane has none)."""
    name = f"r-{uuid.uuid4().hex[:8]}"
    kube.create(Namespace(metadata=ObjectMeta(name=name, labels=ENFORCE)))
    if quota is not None:
        set_quota(kube, name, quota, create=True)
    return name


def set_quota(kube: Client, namespace: str, hard: dict[str, str], create: bool = False) -> None:
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": namespace},
            "spec": {"hard": hard}}
    if create:
        kube.create(ResourceQuota.from_dict(body))
        used = {k: "0" for k in hard}
    else:
        kube.patch(ResourceQuota, "compute", {"spec": {"hard": hard}}, namespace=namespace, patch_type=PatchType.MERGE)
        used = dict(kube.get(ResourceQuota, "compute", namespace=namespace).status.used or {})
    kube.patch(ResourceQuota.Status, "compute", {"status": {"hard": hard, "used": used}}, namespace=namespace,
               patch_type=PatchType.MERGE)


def example(namespace: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page's namespace (with its quota) and its restricted-compliant job, in `namespace`."""
    setup, job = (b.replace("team-a", namespace) for b in blocks(PAGE, E2E))
    return list(yaml.safe_load_all(setup)), yaml.safe_load(job)


def example_job(namespace: str, name: str) -> TorchJob:
    data = example(namespace)[1]
    data["metadata"].update(name=name, uid="0d4c6a3e-uid")
    return job_from_data(data)


def test_the_page_shows_the_wait_for_master_container_as_made() -> None:
    shown = yaml.safe_load(blocks(PAGE, "test_the_page_shows_the_wait_for_master_container_as_made")[0])
    pod = pod_objects.pod(example_job("team-a", "ddp-restricted"), ReplicaId("Worker", 0), 0)
    made = pod["spec"]["initContainers"][0]
    assert made["command"][:2] == ["sh", "-c"]
    assert {**made, "command": ["sh", "-c", "..."]} == shown


def test_every_container_torchjob_adds_passes_restricted_and_a_quota_that_requires_limits(kube: Client) -> None:
    ns = restricted_namespace(kube, {"limits.cpu": "64", "limits.memory": "64Gi", "requests.cpu": "64",
                                     "requests.memory": "64Gi"})
    job = example_job(ns, "ok")
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"tensorboard": TensorBoardSpec(
        logDirs=["t9k://pvc/runs/logs"])})})
    made = pod_objects.manifests(job, init_image="busybox:1.36")
    pods = [o for o in made if o["kind"] == "Pod"]
    assert any(p["spec"].get("initContainers") for p in pods)  # the workers wait for the master
    deployment = next(o for o in made if o["kind"] == "Deployment")
    board = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "board", "namespace": ns},
             "spec": deployment["spec"]["template"]["spec"]}
    for obj in [*pods, board]:
        obj["metadata"].pop("ownerReferences", None)  # a dry run of the pod alone: no owner to find
        kube.create(Pod.from_dict(obj), dry_run=True)  # raises 403 with the server's words when refused


def pod_security_denials(kubeconfig: str) -> float:
    """Pod creates Pod Security `restricted` has denied (the API server's own metric): unlike every
    POST on pods, no other test's job adds to it (their namespaces enforce nothing, or admit)."""
    found = re.findall(r'^pod_security_evaluations_total\{(.*)\} (\S+)$', apiserver_metrics(kubeconfig), re.M)
    want = ('decision="deny"', 'mode="enforce"', 'policy_level="restricted"', 'request_operation="create"',
            'resource="pod"')
    return sum(float(v) for labels, v in found if all(w in labels for w in want))


def test_a_job_pod_security_refuses_fails_at_once_with_the_field_to_change_and_is_not_retried(
        kube: Client, kubeconfig: str, operator: Operator) -> None:
    ns = restricted_namespace(kube)
    denied = pod_security_denials(kubeconfig)
    data = {"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": "plain", "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
                "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    start = time.monotonic()
    kube.create(TorchJobRes.from_dict(data))
    status = wait_job(kube, "plain", ns, finished, timeout=60)
    took = time.monotonic() - start
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PodRefused", status
    message = failed["message"]
    assert 'violates PodSecurity "restricted:latest"' in message  # the API server's words
    assert 'pods "plain-master-0" is forbidden' in message  # the master's, first in the plan, whichever came first
    assert "Master.template.spec.containers[pytorch].securityContext.allowPrivilegeEscalation" in message
    assert "wait-for-master" not in message  # torchjob's own container is not what is refused
    assert status["failure"]["reason"] == "PodRefused"
    time.sleep(3)  # the backoff's retries (0.25s, 0.5s, 1s...) would have come by now
    asked = pod_security_denials(kubeconfig) - denied
    assert asked == 2, f"{asked} pod creates denied: each of the two pods once"
    # Events are recorded beside the status write, on a task of their own: waited for, not read once
    end = time.monotonic() + 30
    while True:
        events = list(kube.list(Event, namespace=ns))
        refused = [e for e in events if e.reason == "PodRefused"]
        if refused or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert refused and refused[0].type == "Warning" and "violates PodSecurity" in (refused[0].message or "")
    assert not [e for e in events if e.reason == "ReconcileError"]
    # What the page shows is this condition (the namespace named as the page names it)
    shown = {k: failed[k] for k in ("type", "status", "reason", "message")}
    shown["message"] = shown["message"].replace(ns, "team-a")
    print(yaml.safe_dump(shown, sort_keys=False, width=100))
    page = blocks(PAGE, "test_a_job_pod_security_refuses_fails_at_once_with_the_field_to_change_and_is_not_retried")
    assert yaml.safe_load(page[0]) == shown
    print(f"refused job failed {took:.2f}s after its creation, after {asked:.0f} pod create(s)")


def test_a_pod_refused_by_an_exceeded_quota_is_retried_and_made_once_the_quota_frees(
        kube: Client, kubeconfig: str, operator: Operator) -> None:
    ns = restricted_namespace(kube, {"pods": "1"})
    data = example(ns)[1]
    data["metadata"]["name"] = "quota"
    kube.create(TorchJobRes.from_dict(data))
    wait = time.monotonic() + 60
    while not list(kube.list(Pod, namespace=ns)) and time.monotonic() < wait:
        time.sleep(0.1)
    time.sleep(3)  # the second pod is refused and retried with a backoff meanwhile
    assert len(list(kube.list(Pod, namespace=ns))) == 1
    status = wait_job(kube, "quota", ns, lambda s: bool(s.get("conditions")))
    assert not finished(status), status  # a quota can pass: not the job's end
    set_quota(kube, ns, {"pods": "4"})
    end = time.monotonic() + 60  # the backoff doubles from 0.25s: the next try is within seconds
    while len(list(kube.list(Pod, namespace=ns))) < 2:
        assert time.monotonic() < end, "the second pod was not made once the quota freed"
        time.sleep(0.2)
    assert not finished(wait_job(kube, "quota", ns, lambda s: True))


# --- what the added containers run as, against the pod's own securityContext (no cluster) ---------


def worker_init(pod_context: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    data = example("team-a")[1]
    template = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    template.pop("securityContext")
    if pod_context is not None:
        template["securityContext"] = pod_context
    template.update(spec)
    job = job_from_data({**data, "metadata": {**data["metadata"], "uid": "u"}})
    return dict(pod_objects.pod(job, ReplicaId("Worker", 0), 0)["spec"]["initContainers"][0])


RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def test_the_added_container_runs_as_65532_where_the_pod_names_no_user() -> None:
    init = worker_init(None)
    assert init["securityContext"] == {**RESTRICTED, "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert init["resources"] == {"requests": {"cpu": "10m", "memory": "16Mi"},
                                 "limits": {"cpu": "100m", "memory": "64Mi"}}


def test_the_added_container_follows_the_pods_user_group_and_seccomp_profile() -> None:
    localhost = {"type": "Localhost", "localhostProfile": "profiles/train.json"}
    init = worker_init({"runAsUser": 2000, "runAsGroup": 3000, "seccompProfile": localhost})
    assert init["securityContext"] == {**RESTRICTED, "runAsNonRoot": True}  # inherits 2000:3000 and Localhost
    init = worker_init({"runAsGroup": 3000})  # a group but no user: the user is ours, the group the pod's
    assert init["securityContext"]["runAsUser"] == 65532 and "runAsGroup" not in init["securityContext"]


def test_a_pod_that_runs_as_root_keeps_its_added_container_startable() -> None:
    init = worker_init({"runAsUser": 0})  # where the namespace allows it: no runAsNonRoot the kubelet would refuse
    assert init["securityContext"] == {**RESTRICTED, "seccompProfile": {"type": "RuntimeDefault"}}


def test_a_windows_pod_gets_only_what_windows_has() -> None:
    init = worker_init(None, os={"name": "windows"})
    assert init["securityContext"] == {"runAsNonRoot": True}


def test_tensorboard_runs_as_the_jobs_user_else_65532_with_a_writable_tmp() -> None:
    from torchjob.kube.objects.workload import tensorboard

    job = example_job("team-a", "tb")
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"tensorboard": TensorBoardSpec(
        logDirs=["t9k://pvc/runs/logs"])})})
    deployment = next(o for o in tensorboard.objects(job, owner_reference(job)) if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = spec["containers"]
    assert container["securityContext"] == RESTRICTED
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    plain = job_from_data({"apiVersion": "torchjob.dev/v1", "kind": "TorchJob", "metadata": {"name": "p"},
                           "spec": {"tensorboard": {"logDirs": ["s3://b/logs"]}, "pytorchReplicaSpecs": {
                               "Master": {"replicas": 1, "template": {"spec": {"containers": [
                                   {"name": "pytorch", "image": "x"}]}}}}}})
    board = next(o for o in tensorboard.objects(plain, {}) if o["kind"] == "Deployment")
    assert board["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532
