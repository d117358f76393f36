"""`torchjob install` against a real API server: a second install into another namespace is refused
before anything is applied (its ClusterRoleBindings, of fixed names, would be re-pointed at the new
namespace's ServiceAccount and the first operator would lose its rights); re-installing into the same
namespace (an upgrade) goes on; `--dry-run` says the same. The first install is into the namespace
tests/kube/test_trainjob_api.py installs into, so that either may run first on the session's cluster."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.core.resource_registry import resource_registry
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, RoleBinding

from tests.kube.conftest import wait_established
from tests.kube.test_kubeflow_api import kubectl
from torchjob.api.errors import UserError
from torchjob.cli.cluster import InstallOptions, manifests_of
from torchjob.dialects.trainer_runtime import TORCH_DISTRIBUTED
from torchjob.kube.machinery.client import ClusterTrainingRuntimeRes
from torchjob.kube.objects import install
from torchjob.kube.objects.install import owner as install_owner
from torchjob.kube.served import t9k_objects, trainer_objects

pytestmark = pytest.mark.kube
OWNER = "tj-install-test"
OTHER = "tj-install-other"


def torchjob_install(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchjob", "install", "--no-wait", "--kubeconfig", kubeconfig,
                           *args], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def bound(kube: Client, name: str = install.NAME) -> list[Any]:
    return [(s.kind, s.name, s.namespace) for s in kube.get(ClusterRoleBinding, name).subjects or []]


def refused(out: subprocess.CompletedProcess[str], what: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and out.stdout == "", out.stdout + out.stderr
    error, fix = out.stderr.strip().splitlines()
    assert error.startswith(f"error: {what} belongs to the torchjob install in namespace {OWNER} "), error
    assert f"installing into {OTHER} would bind them to {OTHER}'s instead" in error
    assert fix == (f"    fix: install into {OWNER} (torchjob install --namespace {OWNER}: an upgrade), or remove that "
                   f"install first (kubectl delete namespace {OWNER}, then its cluster-scoped objects: "
                   f"kubectl delete {what.split()[0].lower()} {what.split()[1]}"
                   + (f" -n {what.split()[3]}" if " in " in what else "") + ")")


def test_an_install_into_another_namespace_is_refused_before_anything_is_applied(
        kube: Client, kubeconfig: str) -> None:
    first = torchjob_install(kubeconfig, "--namespace", OWNER, "--image", "img:1")
    assert first.returncode == 0, first.stderr
    assert bound(kube) == [("ServiceAccount", install.NAME, OWNER)]
    again = torchjob_install(kubeconfig, "--namespace", OWNER, "--image", "img:2")  # an upgrade
    assert again.returncode == 0, again.stderr
    assert "applied ClusterRoleBinding/torchjob-operator" in again.stdout

    for dry in ((), ("--dry-run",)):
        refused(torchjob_install(kubeconfig, "--namespace", OTHER, "--kubeflow-api", *dry),
                "ClusterRoleBinding torchjob-operator")
    with pytest.raises(ApiError):  # nothing applied: not even the Namespace, the first object
        kube.get(Namespace, OTHER)
    assert bound(kube) == [("ServiceAccount", install.NAME, OWNER)]

    # the dry run of an upgrade prints the manifests as ever
    dry = torchjob_install(kubeconfig, "--namespace", OWNER, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert {o["kind"] for o in yaml.safe_load_all(dry.stdout)} >= {"ClusterRoleBinding", "Deployment"}
    # the CRDs alone are the same whoever installs them
    assert torchjob_install(kubeconfig, "--namespace", OTHER, "--crd-only").returncode == 0


def test_a_watched_namespaces_role_binding_of_another_install_is_refused_too(kube: Client, kubeconfig: str,
                                                                            namespace: str) -> None:
    """With --watch-namespace the job rights are a RoleBinding in each watched namespace, of a fixed name:
    another install watching the same namespace would re-point it as well (here the cluster-wide
    binding is made free first, so that only the RoleBinding is in the way)."""
    first = torchjob_install(kubeconfig, "--namespace", OWNER, "--watch-namespace", namespace)
    assert first.returncode == 0, first.stderr
    assert kube.get(RoleBinding, install.NAME, namespace=namespace).subjects[0].namespace == OWNER
    kube.delete(ClusterRoleBinding, install.NAME)
    try:
        refused(torchjob_install(kubeconfig, "--namespace", OTHER, "--watch-namespace", namespace),
                f"RoleBinding torchjob-operator in {namespace}")
        assert kube.get(RoleBinding, install.NAME, namespace=namespace).subjects[0].namespace == OWNER
    finally:  # back to the all-namespaces install the session's other tests may find
        assert torchjob_install(kubeconfig, "--namespace", OWNER).returncode == 0


def test_a_helm_release_is_told_by_its_annotations_and_its_uninstall_is_the_fix() -> None:
    """Pure: whose an object is (the namespace its binding binds), and the fix when Helm made it."""
    objs = install.manifests(namespace=OTHER)
    helm = {"kind": "ClusterRoleBinding", "metadata": {"name": install.NAME, "annotations": {
        install_owner.HELM_RELEASE: "torchjob", install_owner.HELM_NAMESPACE: OWNER}},
        "subjects": [{"kind": "ServiceAccount", "name": install.NAME, "namespace": OWNER}]}
    found = install_owner.taken(objs, OTHER, lambda o: helm if o["kind"] == "ClusterRoleBinding" else None)
    assert found == [install_owner.Taken("ClusterRoleBinding", install.NAME, None, OWNER, "torchjob")]
    assert f"(helm uninstall -n {OWNER} torchjob)" in str(install_owner.refusal(found, OTHER).fix)
    assert install_owner.taken(objs, OWNER, lambda o: helm) == []  # the same namespace: an upgrade
    group = {**helm, "subjects": [{"kind": "Group", "name": "system:authenticated"}]}
    assert install_owner.taken(objs, OTHER, lambda o: group) == []  # binds no ServiceAccount: nobody's
    assert install_owner.taken(install.manifests(namespace=OTHER, crd_only=True), OTHER, lambda o: helm) == []


# Kubeflow Trainer's own install, as its manifests make it (kubectl apply --server-side -k manifests/...):
# CRDs generated by controller-gen, unlabelled; the torch-distributed runtime labelled with its framework
KUBEBUILDER = {"controller-gen.kubebuilder.io/version": "v0.18.0"}
TRAINER_RUNTIME_IMAGE = "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"


def trainers_own() -> list[dict[str, Any]]:
    crds = []
    for crd in trainer_objects.crds():
        crd["metadata"] = {"name": crd["metadata"]["name"], "annotations": dict(KUBEBUILDER)}
        crds.append(crd)
    runtime = copy.deepcopy(TORCH_DISTRIBUTED)
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = TRAINER_RUNTIME_IMAGE
    return [*crds, runtime]


def install_as_trainer(kube: Client, kubeconfig: str, path: Path) -> None:
    """Trainer's CRDs and runtime on the cluster as Kubeflow's install makes them (torchjob's, where a test
    before installed them, deleted first), applied by kubectl."""
    names = [c["metadata"]["name"] for c in trainer_objects.crds()]
    for name in names:
        try:
            kube.delete(CustomResourceDefinition, name)
        except ApiError:
            pass
    end = time.monotonic() + 60
    while time.monotonic() < end and {c.metadata.name for c in kube.list(CustomResourceDefinition)} & set(names):
        time.sleep(0.2)
    objs = trainers_own()
    path.write_text(yaml.safe_dump_all(objs[:3], sort_keys=False))
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(path))
    for name in names:
        wait_established(kube, name)
    path.write_text(yaml.safe_dump(objs[3], sort_keys=False))
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(path))


def versions(kube: Client, objs: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each object's resourceVersion on the cluster (None: not there): what changes if anything is written."""
    out = {}
    for obj in objs:
        meta = obj["metadata"]
        try:
            there = kube.get(resource_registry.load(obj["apiVersion"], obj["kind"]), meta["name"],
                             namespace=meta.get("namespace"))
            out[f"{obj['kind']}/{meta['name']}"] = there.metadata.resourceVersion
        except ApiError:
            out[f"{obj['kind']}/{meta['name']}"] = None
    return out


def test_trainer_api_refuses_to_take_over_kubeflow_trainers_install_unless_told(
        kube: Client, kubeconfig: str, tmp_path: Path) -> None:
    """Over Trainer's own CRDs and runtime, `torchjob install --trainer-api` (and its dry run) refuses,
    naming each object and what says who made it, exit 2, writing nothing; --take-over applies
    torchjob's over them; then a plain install is an upgrade."""
    install_as_trainer(kube, kubeconfig, tmp_path / "trainer.yaml")
    made = manifests_of(InstallOptions(namespace=OWNER, trainer_api=True))
    before = versions(kube, [*made.first, *made.later])
    for dry in ((), ("--dry-run",)):
        out = torchjob_install(kubeconfig, "--namespace", OWNER, "--trainer-api", *dry)
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stdout == "" and "Traceback" not in out.stderr, out.stdout + out.stderr
        error, fix = out.stderr.strip().splitlines()
        for name in ("trainjobs", "trainingruntimes", "clustertrainingruntimes"):
            assert (f"CustomResourceDefinition {name}.trainer.kubeflow.org (annotation "
                    "controller-gen.kubebuilder.io/version=v0.18.0; field manager kubectl)") in error, error
        assert ("ClusterTrainingRuntime torch-distributed (label trainer.kubeflow.org/framework=torch; field manager "
                "kubectl)") in error, error
        assert error.startswith("error: another install (not torchjob's) made what --trainer-api would apply over: ")
        assert "would be marked torchjob's, and torchjob's operator would act on their jobs" in error, error
        assert error.endswith("nothing was applied") and "--take-over" in fix, fix
    assert versions(kube, [*made.first, *made.later]) == before  # nothing written
    crd = kube.get(CustomResourceDefinition, trainer_objects.CRD_NAME)
    assert not crd.metadata.labels and not trainer_objects.installed_by_torchjob(crd.to_dict())

    out = torchjob_install(kubeconfig, "--namespace", OWNER, "--trainer-api", "--take-over",
                           "--trainer-runtime-image", "img:taken")
    assert out.returncode == 0, out.stderr
    assert trainer_objects.installed_by_torchjob(kube.get(CustomResourceDefinition, trainer_objects.CRD_NAME).to_dict())
    runtime = kube.get(ClusterTrainingRuntimeRes, "torch-distributed").to_dict()
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["containers"][0]["image"] == "img:taken"
    again = torchjob_install(kubeconfig, "--namespace", OWNER, "--trainer-api")  # torchjob's now: an upgrade
    assert again.returncode == 0, again.stderr


def test_t9k_api_refuses_to_take_over_t9ks_crd(kube: Client, kubeconfig: str, tmp_path: Path) -> None:
    """T9k's CRD as T9k's install makes it (no torchjob label): --t9k-api refuses, --crd-only too (the CRD
    is what would be relabelled); --take-over makes it torchjob's."""
    name = t9k_objects.CRD_NAME
    try:
        kube.delete(CustomResourceDefinition, name)
    except ApiError:
        pass
    end = time.monotonic() + 60
    while time.monotonic() < end and name in {c.metadata.name for c in kube.list(CustomResourceDefinition)}:
        time.sleep(0.2)
    theirs = t9k_objects.crd()
    theirs["metadata"] = {"name": name, "labels": {"app.kubernetes.io/name": "t9k", "app.kubernetes.io/part-of": "t9k"}}
    (tmp_path / "t9k.yaml").write_text(yaml.safe_dump(theirs))
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(tmp_path / "t9k.yaml"))
    wait_established(kube, name)  # the API server's own status writes come first (the resourceVersion moves)
    before = kube.get(CustomResourceDefinition, name).metadata.resourceVersion
    out = torchjob_install(kubeconfig, "--namespace", OWNER, "--t9k-api", "--crd-only")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert (f"CustomResourceDefinition {name} (label app.kubernetes.io/name=t9k; label app.kubernetes.io/part-of=t9k; "
            "field manager kubectl)") in out.stderr, out.stderr
    assert kube.get(CustomResourceDefinition, name).metadata.resourceVersion == before
    out = torchjob_install(kubeconfig, "--namespace", OWNER, "--t9k-api", "--crd-only", "--take-over")
    assert out.returncode == 0, out.stderr
    assert install_owner.ours(kube.get(CustomResourceDefinition, name).to_dict())


def may_list_runtimes(kube: Client, namespace: str, sa: str) -> bool:
    """Whether the API server's RBAC lets that ServiceAccount list the ClusterTrainingRuntimes."""
    review = SubjectAccessReview(spec=SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{sa}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resourceAttributes=ResourceAttributes(group=trainer_objects.GROUP, resource="clustertrainingruntimes",
                                              verb="list")))
    return bool(kube.create(review).status.allowed)


def test_who_may_list_the_training_runtimes_is_a_setting(kube: Client, kubeconfig: str) -> None:
    """By default every authenticated ServiceAccount may list the ClusterTrainingRuntimes (as Trainer's
    chart grants); --trainer-runtime-reader narrows it to the subjects named; none removes the binding."""
    kube_install = ("--namespace", OWNER, "--trainer-api", "--take-over")  # take-over: whoever's the CRDs are now
    assert torchjob_install(kubeconfig, *kube_install).returncode == 0
    assert may_list_runtimes(kube, "team-a", "default") and may_list_runtimes(kube, "team-b", "default")
    out = torchjob_install(kubeconfig, *kube_install, "--trainer-runtime-reader", "group:system:serviceaccounts:team-a")
    assert out.returncode == 0, out.stderr
    assert may_list_runtimes(kube, "team-a", "default") and not may_list_runtimes(kube, "team-b", "default")
    out = torchjob_install(kubeconfig, *kube_install, "--trainer-runtime-reader", "none")
    assert out.returncode == 0, out.stderr
    assert "deleted ClusterRoleBinding/torchjob-trainingruntimes-reader" in out.stdout
    assert not may_list_runtimes(kube, "team-a", "default")
    bad = torchjob_install(kubeconfig, *kube_install, "--trainer-runtime-reader", "team-a")
    assert bad.returncode == 2 and "--trainer-runtime-reader 'team-a': not a subject to bind" in bad.stderr
    assert torchjob_install(kubeconfig, *kube_install).returncode == 0  # back to the default
    assert may_list_runtimes(kube, "team-b", "default")


def test_who_made_an_object_is_read_from_its_metadata() -> None:
    """Pure: what the refusal says of an object torchjob did not make, and what makes one torchjob's."""
    helm = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": "trainer",
                                    "unrelated": "x"},
                         "annotations": {install_owner.HELM_RELEASE: "kubeflow-trainer",
                                         install_owner.HELM_NAMESPACE: "kubeflow-system"},
                         "managedFields": [{"manager": "helm", "operation": "Update"},
                                           {"manager": "helm", "operation": "Update", "subresource": "status"}]}}
    assert install_owner.installer(helm) == ("Helm release kubeflow-trainer in namespace kubeflow-system; "
                                             "label app.kubernetes.io/managed-by=Helm; label app.kubernetes.io/name="
                                             "trainer; field manager helm")
    assert install_owner.installer({"metadata": {}}) == "nothing on it says who"
    assert not install_owner.ours(helm)
    assert install_owner.ours({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"},
                                            "annotations": {"torchjob.dev/installed-by": "torchjob"}}})
    # every object --trainer-api applies with Trainer's names is marked torchjob's, and only those are checked
    objs = trainer_objects.trainer_api_objects(OWNER)
    assert {f"{o['kind']}/{o['metadata']['name']}" for o in install_owner.to_take_over(objs)} == {
        *(f"CustomResourceDefinition/{c['metadata']['name']}" for c in trainer_objects.crds()),
        "ClusterTrainingRuntime/torch-distributed", "ClusterTrainingRuntime/torchtune-llama3.2-1b",
        "ClusterTrainingRuntime/torchtune-llama3.2-3b", "ClusterTrainingRuntime/torchtune-qwen2.5-1.5b",
        "ConfigMap/kubeflow-trainer-public", "Role/kubeflow-trainer-public", "RoleBinding/kubeflow-trainer-public"}
    assert all(install_owner.ours(o) for o in install_owner.to_take_over(objs))
    # --kubeflow-api's CRD is not checked: replacing the training-operator's is the migration path
    made = manifests_of(InstallOptions(namespace=OWNER, kubeflow_api=True))
    assert made.foreign_api == []


def test_the_runtime_readers_flag_is_in_the_manifests() -> None:
    """Pure: the subjects of the runtimes' reader binding, from --trainer-runtime-reader."""
    def binding(*readers: str) -> list[Any] | None:
        made = manifests_of(InstallOptions(namespace=OWNER, trainer_api=True, trainer_runtime_readers=readers))
        found = [o for o in made.later if o["kind"] == "ClusterRoleBinding"
                 and o["metadata"]["name"] == trainer_objects.RUNTIME_READERS]
        return found[0]["subjects"] if found else None

    rbac = "rbac.authorization.k8s.io"
    assert binding() == [{"apiGroup": rbac, "kind": "Group", "name": "system:authenticated"}]
    assert binding("group:system:serviceaccounts:team-a", "user:ann", "serviceaccount:ci:runner") == [
        {"apiGroup": rbac, "kind": "Group", "name": "system:serviceaccounts:team-a"},
        {"apiGroup": rbac, "kind": "User", "name": "ann"},
        {"kind": "ServiceAccount", "name": "runner", "namespace": "ci"}]
    assert binding("none") is None
    for bad in ("team-a", "serviceaccount:ci", "group:", "none,group:x"):
        with pytest.raises(UserError, match="--trainer-runtime-reader"):
            binding(bad)
    with pytest.raises(UserError, match="none: no binding"):
        binding("none", "group:x")
    # the new flags mean nothing without the API they are about: refused, not ignored
    with pytest.raises(UserError, match="--trainer-runtime-reader: the runtimes' readers are bound only with"):
        manifests_of(InstallOptions(namespace=OWNER, trainer_runtime_readers=("group:x",)))
    with pytest.raises(UserError, match="--take-over: nothing to take over without --trainer-api or --t9k-api"):
        manifests_of(InstallOptions(namespace=OWNER, take_over=True))
