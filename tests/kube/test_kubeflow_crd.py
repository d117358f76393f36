"""Kubeflow's `pytorchjobs.kubeflow.org` CRD as torchjob serves it: the names and columns Kubeflow's
has (pure), and, against a real kube-apiserver, that what Kubeflow accepts is accepted and that
each check of Kubeflow's webhook, done here by CEL, refuses its bad case with a message that names
the field and the fix."""

from __future__ import annotations

import copy
import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, KubeConfig, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from tests.kube.conftest import wait_established
from torchjob.kube.objects.install import apply, kubeflow_crd

SEEDS = Path(__file__).resolve().parents[1] / "dialects" / "seeds"
PyTorchJobRes = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")


def seed(name: str = "pytorch-simple-001") -> dict[str, Any]:
    """tests/dialects/seeds/004: Kubeflow's simple PyTorchJob (a master, two workers)."""
    data: dict[str, Any] = yaml.safe_load((SEEDS / "004-kubeflow-simple.yaml").read_text())
    data["metadata"] = {"name": name}
    return data


# --- pure: the kind Kubeflow's clients know -------------------------------------------------


def test_names_scope_subresources_and_columns_are_kubeflows() -> None:
    crd = kubeflow_crd.crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    assert spec["group"] == "kubeflow.org" and spec["scope"] == "Namespaced"
    # training-operator v1.8.1's CRD: no short names
    assert spec["names"] == {"kind": "PyTorchJob", "listKind": "PyTorchJobList", "plural": "pytorchjobs",
                             "singular": "pytorchjob"}
    (version,) = spec["versions"]
    assert version["name"] == "v1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector"}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("State", ".status.conditions[-1:].type"), ("Age", ".metadata.creationTimestamp")]
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["required"] == ["pytorchReplicaSpecs"]
    run_policy = schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]
    assert run_policy["suspend"]["default"] is False
    assert run_policy["managedBy"]["enum"] == ["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"]


# --- against the API server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def pytorchjobs(kube: Client, kubeconfig: str) -> Client:
    apply([kubeflow_crd.crd()], kubeconfig)
    wait_established(kube, kubeflow_crd.CRD_NAME)
    return kube


def create(kube: Client, data: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj = kube.create(codecs.from_dict(copy.deepcopy(data)), namespace=namespace)
    out: dict[str, Any] = obj.to_dict()
    return out


def refusal(kube: Client, data: dict[str, Any], namespace: str) -> str:
    with pytest.raises(ApiError) as err:
        create(kube, data, namespace)
    assert err.value.status.code == 422, err.value.status
    return str(err.value.status.message)


def table(kubeconfig: str, namespace: str) -> dict[str, Any]:
    """What `kubectl get pytorchjobs` asks the API server for: the list as a Table."""
    config = KubeConfig.from_file(kubeconfig).get()
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # loopback, our own dev cluster
    req = urllib.request.Request(
        f"{config.cluster.server}/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs",
        headers={"Authorization": f"Bearer {config.user.token}",
                 "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out


def test_the_seed_is_accepted_as_written_and_listed_with_state_and_age(
        pytorchjobs: Client, kubeconfig: str, namespace: str) -> None:
    data = seed()
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    stored = create(pytorchjobs, data, namespace)
    # the pod template is kept as written: nothing of it is pruned
    assert stored["spec"]["pytorchReplicaSpecs"] == data["spec"]["pytorchReplicaSpecs"]
    got = table(kubeconfig, namespace)
    assert [c["name"] for c in got["columnDefinitions"]] == ["Name", "State", "Age"]
    assert got["rows"][0]["cells"][:2] == ["pytorch-simple-001", None]  # no status yet
    status = {"conditions": [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
        {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"}],
        "replicaStatuses": {"Worker": {"active": 2, "selector": "a=b"}}}
    pytorchjobs.patch(PyTorchJobRes.Status, "pytorch-simple-001", {"status": status}, namespace=namespace,
                      patch_type=PatchType.MERGE)
    assert table(kubeconfig, namespace)["rows"][0]["cells"][:2] == ["pytorch-simple-001", "Running"]
    # the scale subresource reads the workers (an HPA scales them)
    scale = pytorchjobs.get(PyTorchJobRes.Scale, "pytorch-simple-001", namespace=namespace)
    assert scale.spec.replicas == 2 and scale.status.replicas == 2 and scale.status.selector == "a=b"


def test_what_else_kubeflow_accepts_is_accepted(pytorchjobs: Client, namespace: str) -> None:
    nccl: dict[str, Any] = yaml.safe_load((SEEDS / "002-kubeflow-nccl.yaml").read_text())
    for replica in nccl["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["image"] = "example.com/train:1"
    create(pytorchjobs, nccl, namespace)
    elastic = seed("elastic")
    del elastic["spec"]["pytorchReplicaSpecs"]["Master"]
    elastic["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d",
                                        "nProcPerNode": 2, "metrics": [{"type": "Resource"}]}
    elastic["spec"]["runPolicy"] = {"suspend": True, "managedBy": "kubeflow.org/training-operator",
                                    "cleanPodPolicy": "All", "backoffLimit": 3,
                                    "schedulingPolicy": {"queue": "q", "minResources": {"cpu": "2", "memory": 1}}}
    stored = create(pytorchjobs, elastic, namespace)
    assert stored["spec"]["elasticPolicy"]["metrics"] == [{"type": "Resource"}]
    defaulted = seed("defaulted")
    del defaulted["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    stored = create(pytorchjobs, defaulted, namespace)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1  # Kubeflow's default, stored


def _replicas(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = data["spec"]["pytorchReplicaSpecs"]
    return out


def _worker_containers(data: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = _replicas(data)["Worker"]["template"]["spec"]["containers"]
    return out


def bad_cases() -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Each case breaks one of Kubeflow's webhook checks: (the job, what the refusal must say)."""
    cases: dict[str, tuple[dict[str, Any], list[str]]] = {}

    job = seed("no-pytorch")
    _worker_containers(job)[0]["name"] = "trainer"
    cases["container not named pytorch"] = (job, [
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers", "container named pytorch", "name yours pytorch"])

    job = seed("two-masters")
    _replicas(job)["Master"]["replicas"] = 2
    cases["more than one master"] = (job, [
        "spec.pytorchReplicaSpecs", "set spec.pytorchReplicaSpecs.Master.replicas to 1"])

    job = seed("chief")
    _replicas(job)["Chief"] = _replicas(job).pop("Worker")
    cases["a replica type Kubeflow does not know"] = (job, [
        "spec.pytorchReplicaSpecs", "Master and Worker", "rename or remove"])

    job = seed("lower-case")
    _replicas(job)["worker"] = _replicas(job).pop("Worker")
    cases["a lower-case replica type (Kubeflow's webhook refuses it too)"] = (job, [
        "spec.pytorchReplicaSpecs", "Master and Worker (case-sensitive"])

    job = seed("no-workers")
    _replicas(job)["Worker"]["replicas"] = 0
    cases["zero workers"] = (job, ["Worker.replicas must be at least 1", "remove Worker"])

    job = seed("elastic-master")
    del _replicas(job)["Worker"]
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    cases["elasticPolicy with no Worker"] = (job, ["spec.elasticPolicy", "add spec.pytorchReplicaSpecs.Worker"])

    job = seed("nproc-twice")
    job["spec"]["elasticPolicy"] = {"nProcPerNode": 2}
    job["spec"]["nprocPerNode"] = "2"
    cases["elasticPolicy.nProcPerNode with nprocPerNode"] = (job, [
        "spec.elasticPolicy.nProcPerNode", "keep only spec.nprocPerNode"])

    job = seed("no-image")
    _worker_containers(job)[0]["image"] = ""
    cases["a container with no image"] = (job, [
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]", "set image on container pytorch"])

    job = seed("job.v2")
    cases["a name that is not a DNS-1035 label"] = (job, ["metadata.name must be a DNS-1035 label", "rename"])

    job = seed("other-manager")
    job["spec"]["runPolicy"] = {"managedBy": "example.com/other"}
    cases["an unknown manager"] = (job, ["spec.runPolicy.managedBy", "kueue.x-k8s.io/multikueue"])

    job = seed("bad-restart")
    _replicas(job)["Master"]["restartPolicy"] = "Sometimes"
    cases["an unknown restart policy"] = (job, ["spec.pytorchReplicaSpecs.Master.restartPolicy", "ExitCode"])

    job = seed("no-template-spec")
    _replicas(job)["Worker"]["template"] = {"metadata": {"labels": {"a": "b"}}}
    cases["a replica with no pod spec"] = (job, ["spec.pytorchReplicaSpecs[Worker].template", "container named"])
    return cases


@pytest.mark.parametrize("case", list(bad_cases()))
def test_each_webhook_check_refuses_its_bad_case_naming_the_field_and_the_fix(
        pytorchjobs: Client, namespace: str, case: str) -> None:
    job, says = bad_cases()[case]
    message = refusal(pytorchjobs, job, namespace)
    for text in says:
        assert text in message, f"{case}: {text!r} not in {message!r}"


def test_manager_and_queue_cannot_change_but_suspend_can(pytorchjobs: Client, namespace: str) -> None:
    job = seed("immutable")
    job["spec"]["runPolicy"] = {"suspend": True, "schedulingPolicy": {"queue": "a"}}
    create(pytorchjobs, job, namespace)

    def patch(spec: dict[str, Any]) -> None:
        pytorchjobs.patch(PyTorchJobRes, "immutable", {"spec": spec}, namespace=namespace,
                          patch_type=PatchType.MERGE)

    patch({"runPolicy": {"suspend": False}})  # Kueue admits the job
    with pytest.raises(ApiError) as err:
        patch({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}})
    assert "spec.runPolicy.managedBy is immutable" in str(err.value.status.message)
    with pytest.raises(ApiError) as err:
        patch({"runPolicy": {"schedulingPolicy": {"queue": "b"}}})
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in str(err.value.status.message)


def test_the_installed_role_lets_the_operator_serve_pytorchjobs_and_no_more(
        pytorchjobs: Client, kubeconfig: str, namespace: str) -> None:
    """`install --kubeflow-api`'s RBAC, applied to the real API server and asked by
    SubjectAccessReview, for the operator's ServiceAccount (bound here in a namespace of its own)."""
    from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
    from lightkube.resources.authorization_v1 import SubjectAccessReview
    from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

    from torchjob.kube.objects.install import KUBEFLOW_NAME, kubeflow_api_objects

    objs = kubeflow_api_objects(namespace)
    apply(objs, kubeconfig)
    user = f"system:serviceaccount:{namespace}:torchjob-operator"

    def allowed(verb: str, resource: str, subresource: str | None = None) -> bool:
        attrs = ResourceAttributes(group="kubeflow.org", resource=resource, subresource=subresource, verb=verb,
                                   namespace="anywhere")
        review = pytorchjobs.create(SubjectAccessReview(spec=SubjectAccessReviewSpec(user=user,
                                                                                     resourceAttributes=attrs)))
        return bool(review.status.allowed)

    try:
        for verb in ("list", "watch", "delete"):
            assert allowed(verb, "pytorchjobs"), verb
        assert allowed("patch", "pytorchjobs", "status")
        assert allowed("update", "pytorchjobs", "finalizers")
        # never called by the operator (the audit of tests/incluster proves what is): not granted
        assert not allowed("get", "pytorchjobs") and not allowed("update", "pytorchjobs", "status")
        assert not allowed("patch", "pytorchjobs")  # Kueue's own integration suspends and resumes a PyTorchJob
        assert not allowed("create", "pytorchjobs")  # users create jobs; the operator never does
        assert not allowed("get", "tfjobs")
    finally:
        pytorchjobs.delete(ClusterRoleBinding, KUBEFLOW_NAME)
        for o in objs:
            if o["kind"] == "ClusterRole":
                pytorchjobs.delete(ClusterRole, o["metadata"]["name"])


def test_the_projected_status_is_stored_whole_and_listed_by_its_state(
        pytorchjobs: Client, kubeconfig: str, namespace: str) -> None:
    """kubeflow_status's output, merge-patched into the status subresource step by step as the
    operator would: the schema keeps all of it (torchjob reads its own status back unchanged) and
    `kubectl get`'s State follows the job."""
    from tests.core.sim import simulate
    from tests.jobs import make_job
    from torchjob.kube.served.kubeflow_status import kubeflow_status, torchjob_status

    create(pytorchjobs, seed("demo"), namespace)
    job = make_job("demo", workers=2, restart_policy="OnFailure")
    result = simulate(job, {"master-0": [(10, 0)], "worker-0": [(9, 0)], "worker-1": [(3, 1), (5, 0)]})
    seen: list[str | None] = []
    for step in result.steps:
        body = {"status": kubeflow_status(job, step.plan.status)}
        stored = pytorchjobs.patch(PyTorchJobRes.Status, "demo", body, namespace=namespace,
                                   patch_type=PatchType.MERGE).to_dict()["status"]
        assert torchjob_status(stored) == step.plan.status.model_copy(update={"progress": None})
        state = table(kubeconfig, namespace)["rows"][0]["cells"][1]
        if not seen or seen[-1] != state:
            seen.append(state)
    assert seen == ["Created", "Running", "Restarting", "Running", "Succeeded"]


def _fields(schema: dict[str, Any], path: str = "") -> dict[str, str]:
    """Every field path of a schema down to the pod template (not into it): its type."""
    out: dict[str, str] = {}
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        out[here] = sub.get("type", "int-or-string" if sub.get("x-kubernetes-int-or-string") else "?")
        if name not in ("template", "metrics", "metadata", "labelSelector"):
            out.update(_fields(sub, here))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out.update(_fields(extra, f"{path}.*"))
    return out


def test_the_crd_matches_kubeflows_own_file_where_it_is_built() -> None:
    """Against Kubeflow's CRD itself (hack/kubeflow/build.sh copies it from the v1.8.1 module):
    the same names, columns and subresources, and every field of its spec and status known here
    with the same type (so what it accepts, this accepts)."""
    import os

    cache = Path(os.environ.get("TORCHJOB_CACHE", Path.home() / ".cache" / "torchjob"))
    path = cache / "kubeflow" / "v1.8.1" / "kubeflow.org_pytorchjobs.yaml"
    if not path.exists():
        pytest.skip(f"{path} is not there: bash hack/kubeflow/build.sh")
    theirs = yaml.safe_load(path.read_text())
    ours = kubeflow_crd.crd()
    assert ours["spec"]["names"] == theirs["spec"]["names"]
    assert (ours["spec"]["group"], ours["spec"]["scope"]) == (theirs["spec"]["group"], theirs["spec"]["scope"])
    (mine,), (kubeflows,) = ours["spec"]["versions"], theirs["spec"]["versions"]
    assert mine["subresources"] == kubeflows["subresources"]
    assert mine["additionalPrinterColumns"] == kubeflows["additionalPrinterColumns"]
    their_fields = _fields(kubeflows["schema"]["openAPIV3Schema"])
    our_fields = _fields(mine["schema"]["openAPIV3Schema"])
    missing = {f: t for f, t in their_fields.items() if our_fields.get(f) != t}
    assert not missing, f"fields of Kubeflow's CRD not known here (or of another type): {missing}"
