"""The Helm chart holds the same objects as `torchjob install` (regenerate: scripts/gen-chart.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def test_chart_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_chart", REPO / "scripts" / "gen-chart.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for rel, content in gen.render().items():
        assert (REPO / "charts" / "torchjob" / rel).read_text() == content, f"{rel} is stale: run scripts/gen-chart.py"


def test_more_operator_flags_reach_the_deployment() -> None:
    import subprocess
    import sys

    import yaml

    out = subprocess.run([sys.executable, "-m", "torchjob", "install", "--dry-run",
                          "--operator-arg=--gang-scheduler-name=volcano", "--operator-arg=--workers=8"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    deployment = next(o for o in yaml.safe_load_all(out.stdout) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["torchjob", "operator"]
    assert container["args"] == ["--gang-scheduler-name=volcano", "--workers=8"]
    chart = (REPO / "charts" / "torchjob" / "templates" / "operator.yaml").read_text()
    assert "args: {{ toJson .Values.extraArgs }}" in chart  # the chart's values.yaml: extraArgs


def _kubeflow_template(enabled: bool) -> list[dict[str, Any]]:
    """templates/kubeflow-api.yaml as Helm renders it with kubeflowApi.enabled (release namespace
    `ns`): the file is one `if` over plain YAML, which this checks before rendering it."""
    import yaml

    lines = (REPO / "charts" / "torchjob" / "templates" / "kubeflow-api.yaml").read_text().splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert body[0] == "{{- if .Values.kubeflowApi.enabled }}" and body[-1] == "{{- end }}"
    assert not any("{{" in line for line in body[1:-1] if "{{ .Release.Namespace }}" not in line)
    if not enabled:
        return []
    text = "\n".join(body[1:-1]).replace("{{ .Release.Namespace }}", "ns")
    return [o for o in yaml.safe_load_all(text) if o]


def test_the_kubeflow_api_is_a_chart_value_off_by_default_rendering_what_install_applies() -> None:
    import yaml

    from torchjob.kube.objects.install import manifests

    values = yaml.safe_load((REPO / "charts" / "torchjob" / "values.yaml").read_text())
    assert values["kubeflowApi"] == {"enabled": False}
    assert _kubeflow_template(enabled=False) == []
    rendered = _kubeflow_template(enabled=True)
    # the CRD outlives `helm uninstall` (as those in crds/ do): the jobs in it are not deleted with the chart
    assert rendered[0]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    del rendered[0]["metadata"]["annotations"]
    installed = [o for o in manifests(namespace="ns", kubeflow_api=True) if _kubeflow_part(o)]
    assert [(o["kind"], o["metadata"]["name"]) for o in rendered] == [
        ("CustomResourceDefinition", "pytorchjobs.kubeflow.org"), ("ClusterRole", "torchjob-operator-kubeflow"),
        ("ClusterRoleBinding", "torchjob-operator-kubeflow")]
    assert sorted(rendered, key=str) == sorted(installed, key=str)
    chart_crds = sorted(p.name for p in (REPO / "charts" / "torchjob" / "crds").iterdir())
    assert chart_crds == ["torchjobs.yaml"]  # Kubeflow's is not installed unless asked for


def _kubeflow_part(obj: dict[str, Any]) -> bool:
    return obj["metadata"]["name"] in ("pytorchjobs.kubeflow.org", "torchjob-operator-kubeflow")


def test_install_kubeflow_api_adds_the_crd_and_its_rbac_and_crd_only_gives_both_crds() -> None:
    from torchjob.kube.objects.install import manifests

    plain = manifests()
    assert not any(_kubeflow_part(o) or "kubeflow.org" in str(o.get("rules", "")) for o in plain)
    objs = manifests(namespace="team", kubeflow_api=True)
    assert [o["metadata"]["name"] for o in objs[:2]] == ["torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"]
    assert [o for o in objs if not _kubeflow_part(o)] == manifests(namespace="team")  # nothing else changes
    role = next(o for o in objs if o["kind"] == "ClusterRole" and _kubeflow_part(o))
    verbs = {r["resources"][0]: r["verbs"] for r in role["rules"] if r["apiGroups"] == ["kubeflow.org"]}
    assert verbs == {"pytorchjobs": ["get", "list", "watch", "patch", "delete"],
                     "pytorchjobs/status": ["get", "patch", "update"], "pytorchjobs/finalizers": ["update"]}
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding" and _kubeflow_part(o))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "torchjob-operator", "namespace": "team"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [o["metadata"]["name"] for o in manifests(kubeflow_api=True, crd_only=True)] == [
        "torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"]
    assert [o["metadata"]["name"] for o in manifests(crd_only=True)] == ["torchjobs.torchjob.dev"]
