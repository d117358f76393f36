"""`torchjob uninstall` against a real API server: it removes what `torchjob install` made (cluster-wide
objects and the namespace it created included) and keeps the CRDs, so that the chart installs after it
(before, Helm refused the ClusterRoles left behind); `--dry-run` lists; `--crds` without `--yes` and
without a terminal refuses; it refuses to touch what Helm made.

The commands run in this process (click's runner: no terminal, as in CI). One install of torchjob's fixed
cluster-wide names exists at a time: the one tests/kube/test_install_kube.py and test_trainjob_api.py
leave (in their namespace) is uninstalled first and put back at the end. The session's control plane
runs no kube-controller-manager: the test finalizes a deleted namespace itself, as the namespace
controller does once it is empty."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from tests.kube.test_chart import CHART, helm  # noqa: F401 (the fixture)
from tests.kube.test_install_kube import OWNER
from tests.kube.test_kubeflow_api import kubectl
from torchjob.api.errors import UserError
from torchjob.cli.main import cli
from torchjob.kube.objects import install
from torchjob.kube.objects.install import kubeflow_crd
from torchjob.kube.objects.install import uninstall as removal
from torchjob.kube.objects.install.crd import CRD_NAME
from torchjob.kube.objects.install.owner import HELM_NAMESPACE, HELM_RELEASE

pytestmark = pytest.mark.kube
MINE = "tj-uninstall-test"
RELEASE, RELEASE_NS = "torchjob", "tj-uninstall-helm"
CLUSTER_WIDE = [(ClusterRole, install.NAME), (ClusterRoleBinding, install.NAME), (ClusterRole, install.KUBEFLOW_NAME),
                (ClusterRoleBinding, install.KUBEFLOW_NAME), (ClusterRole, install.METRICS_READER),
                (ClusterRole, "torchjob-torchjobs-edit"), (ClusterRole, "torchjob-pytorchjobs-view")]


def torchjob(kubeconfig: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--kubeconfig", kubeconfig])


def there(kube: Client, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        kube.get(res, name, namespace=namespace)
    except ApiError as e:
        assert e.status.code == 404, e
        return False
    return True


def finalize(kube: Client, kubeconfig: str, namespace: str, tmp: Path) -> None:
    """What the namespace controller does once a deleted namespace is empty (none runs here)."""
    try:
        if kube.get(Namespace, namespace).metadata.deletionTimestamp is None:
            return
    except ApiError:
        return
    body = tmp / f"{namespace}.json"
    body.write_text(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace},
                                "spec": {"finalizers": []}}))
    kubectl(kubeconfig, "replace", "--raw", f"/api/v1/namespaces/{namespace}/finalize", "-f", str(body))


def refusal(result: Result) -> UserError:
    assert isinstance(result.exception, UserError), (result.output, result.exception)
    return result.exception


def test_uninstall_removes_the_install_keeps_the_crds_and_the_chart_installs_after(
        kube: Client, kubeconfig: str, helm: str, tmp_path: Path) -> None:  # noqa: F811
    first = torchjob(kubeconfig, "uninstall", "--namespace", OWNER)  # the session's other install, if any
    assert first.exit_code == 0, (first.output, first.exception)
    for ns in (OWNER, "kubeflow-system", MINE):  # MINE made anew (a run before may have left it)
        if ns == MINE and there(kube, Namespace, MINE):
            kube.delete(Namespace, MINE)
        finalize(kube, kubeconfig, ns, tmp_path)
    made = torchjob(kubeconfig, "install", "--no-wait", "--namespace", MINE, "--kubeflow-api", "--image", "img:1")
    assert made.exit_code == 0, (made.output, made.exception)
    try:
        dry = torchjob(kubeconfig, "uninstall", "--namespace", MINE, "--dry-run")
        assert dry.exit_code == 0, (dry.output, dry.exception)
        lines = dry.stdout.splitlines()
        for want in (f"would delete Deployment/{install.NAME} -n {MINE}", f"would delete ClusterRole/{install.NAME}",
                     f"would delete ClusterRoleBinding/{install.KUBEFLOW_NAME}", f"would delete Namespace/{MINE}"):
            assert want in lines, dry.stdout
        kept = next(line for line in lines if line.startswith("kept the CRDs "))
        assert kept.startswith(f"kept the CRDs {CRD_NAME}, {kubeflow_crd.CRD_NAME}") and kept.endswith(
            "; --crds deletes them") and " and every object of their kinds (now: " in kept, kept
        assert not any("CustomResourceDefinition" in line for line in lines if line.startswith("would"))
        assert all(there(kube, res, name) for res, name in CLUSTER_WIDE)  # a dry run deletes nothing

        error = refusal(torchjob(kubeconfig, "uninstall", "--namespace", MINE, "--crds"))  # no terminal, no --yes
        assert error.message.startswith(f"--crds deletes the CRDs {CRD_NAME}, {kubeflow_crd.CRD_NAME}")
        assert " and with them every object of their kinds (now: " in error.message, error.message
        assert error.message.endswith("not confirmed (no terminal to ask on), nothing was deleted"), error.message
        assert error.fix and "add --yes" in error.fix
        assert there(kube, Deployment, install.NAME, MINE) and there(kube, CustomResourceDefinition, CRD_NAME)

        done = torchjob(kubeconfig, "uninstall", "--namespace", MINE)
        assert done.exit_code == 0, (done.output, done.exception)
        assert f"deleted ClusterRoleBinding/{install.NAME}" in done.stdout.splitlines(), done.stdout
        assert not any(there(kube, res, name) for res, name in CLUSTER_WIDE), done.stdout
        assert not there(kube, Deployment, install.NAME, MINE)
        assert kube.get(Namespace, MINE).metadata.deletionTimestamp is not None
        assert there(kube, CustomResourceDefinition, CRD_NAME)  # and so every TorchJob
        assert there(kube, CustomResourceDefinition, kubeflow_crd.CRD_NAME)
        finalize(kube, kubeconfig, MINE, tmp_path)

        helm_install = subprocess.run([helm, "install", RELEASE, str(CHART), "-n", RELEASE_NS, "--create-namespace",
                                       "--kubeconfig", kubeconfig, "--set", "image.tag=v1"],
                                      capture_output=True, text=True, timeout=120)
        assert helm_install.returncode == 0, helm_install.stderr
        for ns in (RELEASE_NS, MINE):  # Helm's objects are its release's, whichever namespace is named
            error = refusal(torchjob(kubeconfig, "uninstall", "--namespace", ns))
            assert f"ClusterRole/{install.NAME}, ClusterRoleBinding/{install.NAME}" in error.message, error.message
            assert (f"were made by Helm (release {RELEASE} in namespace {RELEASE_NS}): torchjob uninstall removes "
                    "only what `torchjob install` made") in error.message, error.message
            assert error.message.endswith("nothing was deleted")
            assert f"(helm uninstall -n {RELEASE_NS} {RELEASE};" in str(error.fix), error.fix
        assert there(kube, ClusterRoleBinding, install.NAME) and there(kube, Deployment, install.NAME, RELEASE_NS)
    finally:
        subprocess.run([helm, "uninstall", RELEASE, "-n", RELEASE_NS, "--kubeconfig", kubeconfig],
                       capture_output=True, timeout=120)
        torchjob(kubeconfig, "uninstall", "--namespace", MINE)
        finalize(kube, kubeconfig, MINE, tmp_path)
        # back to the all-namespaces install the session's other tests may find
        again = torchjob(kubeconfig, "install", "--no-wait", "--namespace", OWNER)
        assert again.exit_code == 0, (again.output, again.exception)


def _copy(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], **meta}}


def test_what_uninstall_deletes_is_told_from_the_cluster_copies() -> None:
    """Pure: the namespace install created is deleted, one it found kept; a foreign API's object its own
    install made is left; Helm's objects and another namespace's bindings are refused; the CRDs kept apart."""
    objs = install.manifests(namespace="ops", kubeflow_api=True)
    marked = removal.mark_created(objs, lambda o: None)  # a cluster without them: install creates the namespace
    out = removal.plan(marked, "ops", lambda o: o)
    assert out.delete[0]["kind"] == "Deployment" and removal.what(out.delete[-1]) == "Namespace/ops"
    assert {c["metadata"]["name"] for c in out.crds} == {CRD_NAME, kubeflow_crd.CRD_NAME} and out.left == []
    unmarked = next(o for o in objs if o["kind"] == "Namespace")
    assert removal.mark_created(objs, lambda o: unmarked) == objs  # made beforehand: not marked
    ns = next(o for o in marked if o["kind"] == "Namespace")
    assert removal.mark_created(objs, lambda o: ns) == marked  # marked by an earlier install: kept marked

    def found(o: dict[str, Any]) -> dict[str, Any]:
        if o["metadata"]["name"] == kubeflow_crd.CRD_NAME:  # the training-operator's own CRD
            return {**o, "metadata": {"name": kubeflow_crd.CRD_NAME}}
        return o
    out = removal.plan(objs, "ops", found)
    assert [(removal.what(o), why) for o, why in out.left] == [
        (f"CustomResourceDefinition/{kubeflow_crd.CRD_NAME}", "not torchjob's: nothing on it says who"),
        ("Namespace/ops", "torchjob install did not make it (no torchjob.dev/created-by annotation): kept, with what "
                          "else it holds")]

    by_helm = {"annotations": {HELM_RELEASE: "tj", HELM_NAMESPACE: "ops"},
               "labels": {"app.kubernetes.io/managed-by": "Helm"}}
    with pytest.raises(UserError) as refused:
        removal.plan(objs, "ops", lambda o: _copy(o, **by_helm) if o["kind"] == "ClusterRole" else o)
    assert refused.value.fix and "helm uninstall -n ops tj;" in refused.value.fix
    kept = removal.plan(objs, "ops", lambda o: _copy(o, **by_helm) if o["kind"] == "CustomResourceDefinition" else o)
    assert kept.crds == [] and [removal.what(o) for o, _ in kept.left][:2] == [
        f"CustomResourceDefinition/{CRD_NAME}", f"CustomResourceDefinition/{kubeflow_crd.CRD_NAME}"]

    def elsewhere(o: dict[str, Any]) -> dict[str, Any]:
        if o["kind"] != "ClusterRoleBinding":
            return o
        return {**o, "subjects": [{"kind": "ServiceAccount", "name": install.NAME, "namespace": "other"}]}
    with pytest.raises(UserError) as refused:
        removal.plan(objs, "ops", elsewhere)
    assert refused.value.fix == "uninstall that install: torchjob uninstall --namespace other"
    deployment = next(o for o in install.manifests(namespace="ops", watch_namespaces=["a", "b"])
                      if o["kind"] == "Deployment")
    assert removal.watched(deployment) == ["a", "b"]
