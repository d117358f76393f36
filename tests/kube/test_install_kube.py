"""`torchjob install` against a real API server: a second install into another namespace is refused
before anything is applied (its ClusterRoleBindings, of fixed names, would be re-pointed at the new
namespace's ServiceAccount and the first operator would lose its rights); re-installing into the same
namespace (an upgrade) goes on; `--dry-run` says the same. The first install is into the namespace
tests/kube/test_trainjob_api.py installs into, so that either may run first on the session's cluster."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, RoleBinding

from torchjob.kube.objects import install, install_owner

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
