"""The Helm chart, by real Helm (built from its Go module by `scripts/dev-cluster.sh helm`, beside
kubectl): it lints, refuses a misspelt value (values.schema.json), and renders the same objects as
`torchjob install` for the same settings."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.conftest import ENABLED
from torchjob.kube.objects import install

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "torchjob"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")


@pytest.fixture(scope="module")
def helm() -> str:
    built = subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "helm"], capture_output=True,
                           text=True, timeout=1800)
    if built.returncode != 0:
        if ENABLED:
            raise RuntimeError(f"building helm failed:\n{built.stderr[-3000:]}")
        pytest.skip(f"helm could not be built here (Go and the module proxy are needed): {built.stderr[-300:]}")
    return built.stdout.strip().splitlines()[-1]


def template(helm: str, *values: str, namespace: str = "torchjob-system") -> list[dict[str, Any]]:
    """`helm template` with `--set` values (a JSON value after `=` goes through --set-json)."""
    args = []
    for v in values:
        _, _, value = v.partition("=")
        args += ["--set-json" if value[:1] in "[{\"" or value in ("true", "false") else "--set", v]
    out = subprocess.run([helm, "template", "torchjob", str(CHART), "-n", namespace, "--include-crds", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """Without Helm's own labels (the release's), which `torchjob install` has no use for."""
    labels = obj["metadata"].get("labels")
    if labels is not None:
        for k in HELM_LABELS:
            if k != "app.kubernetes.io/managed-by" or labels.get(k) == "Helm":  # Kubeflow's CRD says torchjob
                labels.pop(k, None)
        if not labels:
            del obj["metadata"]["labels"]
    return obj


def _key(o: dict[str, Any]) -> tuple[str, str, str]:
    return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]


def test_generated_parts_are_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_chart", REPO / "scripts" / "gen-chart.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for rel, content in gen.render().items():
        assert (CHART / rel).read_text() == content, f"{rel} is stale: run scripts/gen-chart.py"


def test_helm_lint_passes_with_every_option(helm: str) -> None:
    for extra in ([], ["--set", "kubeflowApi.enabled=true", "--set", "watchNamespaces={a,b}",
                       "--set", "metrics.serviceMonitor.enabled=true", "--set", "networkPolicy.enabled=true",
                       "--set", "metrics.dashboard.enabled=true", "--set", "replicaCount=2"]):
        out = subprocess.run([helm, "lint", "--strict", str(CHART), *extra], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "0 chart(s) failed" in out.stdout


# The same settings, as chart values and as `manifests` arguments.
SETTINGS: list[tuple[list[str], dict[str, Any]]] = [
    ([], {}),
    (["kubeflowApi.enabled=true"], {"kubeflow_api": True}),
    (["watchNamespaces=[\"team-a\",\"team-b\"]", "kubeflowApi.enabled=true"],
     {"watch_namespaces": ["team-a", "team-b"], "kubeflow_api": True}),
    (["replicaCount=2", "image.repository=localhost/torchjob-operator", "image.tag=dev",
      "operator.initImage=localhost/torchjob-e2e:dev", "operator.workers=8", "operator.gangSchedulerName=volcano",
      "operator.metricsAuth=false", "operator.extraArgs=[\"--progress-url=https://op.example:8443\"]"],
     {"replicas": 2, "image": "localhost/torchjob-operator:dev",
      "flags": {"initImage": "localhost/torchjob-e2e:dev", "workers": 8, "gangSchedulerName": "volcano",
                "metricsAuth": False},
      "args": ["--progress-url=https://op.example:8443"]}),
]


@pytest.mark.parametrize("values,kwargs", SETTINGS, ids=["defaults", "kubeflow", "watch-namespaces", "flags"])
def test_chart_and_install_give_the_same_objects(helm: str, values: list[str], kwargs: dict[str, Any]) -> None:
    rendered = sorted((_strip(o) for o in template(helm, "image.tag=0.1.0", *values, namespace="ops")), key=_key)
    objs = install.manifests(namespace="ops", **{"image": "torchjob/operator:0.1.0", **kwargs})
    installed = sorted((o for o in objs if o["kind"] != "Namespace"), key=_key)
    for o in rendered:  # the chart marks Kubeflow's CRD to outlive `helm uninstall`, as crds/ ones do
        o["metadata"].get("annotations", {}).pop("helm.sh/resource-policy", None)
        if o["metadata"].get("annotations") == {}:
            del o["metadata"]["annotations"]
    assert [_key(o) for o in rendered] == [_key(o) for o in installed]
    for r, i in zip(rendered, installed, strict=True):
        if r != i:
            chart, mine = json.dumps(r, sort_keys=True), json.dumps(i, sort_keys=True)
            at = next((n for n, (a, b) in enumerate(zip(chart, mine, strict=False)) if a != b),
                      min(len(chart), len(mine)))
            raise AssertionError(f"{_key(r)} differs at:\nchart:   ...{chart[at - 150:at + 150]}\n"
                                 f"install: ...{mine[at - 150:at + 150]}")


def test_watch_namespaces_gives_roles_there_and_no_cluster_wide_pod_rights(helm: str) -> None:
    objs = template(helm, "watchNamespaces=[\"a\",\"b\"]")
    cluster = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "torchjob-operator")
    assert not any(set(r.get("resources", [])) & {"pods", "services", "torchjobs", "configmaps", "events"}
                   for r in cluster["rules"])
    roles = {o["metadata"]["namespace"] for o in objs
             if o["kind"] == "Role" and o["metadata"]["name"] == "torchjob-operator"}
    assert roles == {"a", "b", "torchjob-system"}  # the last: its Lease and TLS Secret
    command = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert [command[i + 1] for i, a in enumerate(command) if a == "--namespace"] == ["a", "b"]


def test_a_misspelt_value_is_refused_with_its_name(helm: str) -> None:
    for bad, named in (("replicaCont=2", "replicaCont"), ("image.pulPolicy=Always", "pulPolicy"),
                       ("operator.workers=0", "workers"), ("watchNamespaces[0]=Team_A", "watchNamespaces")):
        out = subprocess.run([helm, "template", "t", str(CHART), "--set", bad], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode != 0 and named in out.stderr, (bad, out.stderr)


def test_the_operator_image_may_be_named_by_digest(helm: str) -> None:
    """image.digest pins the operator's image (repository@digest); anything but sha256:<64 hex> is refused."""
    digest = "sha256:" + "ab" * 32
    deployment = next(o for o in template(helm, f"image.digest={digest}") if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"torchjob/operator@{digest}"
    tagged = next(o for o in template(helm) if o["kind"] == "Deployment")
    assert "@" not in tagged["spec"]["template"]["spec"]["containers"][0]["image"]
    out = subprocess.run([helm, "template", "t", str(CHART), "--set", "image.digest=latest"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "digest" in out.stderr, out.stderr


def test_the_operator_pod_is_restricted_by_default(helm: str) -> None:
    deployment = next(o for o in template(helm) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    # Pod Security `restricted`: https://kubernetes.io/docs/concepts/security/pod-security-standards/
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532 and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"] and pod["automountServiceAccountToken"] is False
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_service_monitor_and_network_policy_select_what_the_chart_makes(helm: str) -> None:
    objs = template(helm, "metrics.serviceMonitor.enabled=true", "networkPolicy.enabled=true",
                    "metrics.dashboard.enabled=true")
    monitor = next(o for o in objs if o["kind"] == "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == install.METRICS_SERVICE)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    progress = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == install.NAME)
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= progress["metadata"]["labels"].items()
    secret = monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"]
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == secret)
    assert binding["roleRef"]["name"] == install.METRICS_READER
    # /metrics over HTTPS: Prometheus trusts the operator's CA (ca.crt of its Secret) for the Service's name
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {
        "serverName": "torchjob-operator-metrics.torchjob-system.svc",
        "ca": {"secret": {"name": "torchjob-progress-tls", "key": "ca.crt"}}}
    policy = next(o for o in objs if o["kind"] == "NetworkPolicy")
    ports = {p["name"] for p in next(o for o in objs if o["kind"] == "Deployment")
             ["spec"]["template"]["spec"]["containers"][0]["ports"]}
    # every port but the probes' (the kubelet probes from the node; no pod may reach them)
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == ports - {"health"}
    metrics_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "http")
    monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert metrics_rule["from"] == [{"namespaceSelector": monitoring}]
    dashboard = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "torchjob-dashboard")
    assert json.loads(dashboard["data"]["torchjob.json"])["title"] == "torchjob"
    defaults = template(helm)
    assert not any(o["kind"] == "ServiceMonitor" for o in defaults)  # off by default
    assert any(o["kind"] == "NetworkPolicy" for o in defaults)  # on by default (issue 30, finding 2)
    chosen = template(helm, 'networkPolicy.metricsNamespaceSelector={"matchLabels":{"team":"obs"}}')
    policy = next(o for o in chosen if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]


def test_two_replicas_roll_one_at_a_time_and_keep_one_through_a_drain(helm: str) -> None:
    """Issue 34: every working replica is Ready, so the Deployment rolls with maxUnavailable 0 (a new
    replica ready before an old one goes) and a PodDisruptionBudget keeps one of two; the progress
    Service selects the leader's label, not readiness."""
    objs = template(helm, "replicaCount=2")
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    budget = next(o for o in objs if o["kind"] == "PodDisruptionBudget")
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    progress = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == install.NAME)
    assert progress["spec"]["selector"] == {**deployment["spec"]["selector"]["matchLabels"],
                                            install.LEADER_LABEL: "true"}
    assert not any(o["kind"] == "PodDisruptionBudget" for o in template(helm))  # one replica: none


def test_uninstall_keeps_the_crds() -> None:
    # crds/ are never deleted by Helm; Kubeflow's CRD (a template: it is optional) says so itself
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["torchjobs.yaml"]
    assert "helm.sh/resource-policy: keep" in (CHART / "templates" / "kubeflow-crd.yaml").read_text()


def test_install_kubeflow_api_adds_the_crd_and_its_rbac_and_crd_only_gives_both_crds() -> None:
    def kubeflow_part(o: dict[str, Any]) -> bool:
        return o["metadata"]["name"] in ("pytorchjobs.kubeflow.org", "torchjob-operator-kubeflow",
                                         "torchjob-pytorchjobs-edit", "torchjob-pytorchjobs-view")

    plain = install.manifests()
    groups = {g for o in plain for r in o.get("rules", ()) for g in r.get("apiGroups", ())}
    assert not any(kubeflow_part(o) for o in plain) and "kubeflow.org" not in groups
    objs = install.manifests(namespace="team", kubeflow_api=True)
    assert [o["metadata"]["name"] for o in objs[:2]] == ["torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"]
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == install.KUBEFLOW_NAME)
    verbs = {r["resources"][0]: r["verbs"] for r in role["rules"] if r["apiGroups"] == ["kubeflow.org"]}
    assert verbs == {"pytorchjobs": ["list", "watch", "delete"], "pytorchjobs/status": ["patch"],
                     "pytorchjobs/finalizers": ["update"]}
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding" and kubeflow_part(o))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "torchjob-operator", "namespace": "team"}]
    command = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--kubeflow-api") + 1] == "on"
    assert [o["metadata"]["name"] for o in install.manifests(kubeflow_api=True, crd_only=True)] == [
        "torchjobs.torchjob.dev", "pytorchjobs.kubeflow.org"]
    assert [o["metadata"]["name"] for o in install.manifests(crd_only=True)] == ["torchjobs.torchjob.dev"]


def test_the_names_install_pins_are_those_the_operator_uses() -> None:
    from torchjob.kube.controller.process.operator import LEASE_NAME
    from torchjob.kube.objects.workload.reporting import CA_CONFIGMAP
    from torchjob.kube.progress.tls import SECRET
    from torchjob.kube.served.kubeflow_api import KUBEFLOW_LEASE

    pinned = (install.LEASE, install.TLS_SECRET, install.CA_CONFIGMAP, install.KUBEFLOW_LEASE)
    assert pinned == (LEASE_NAME, SECRET, CA_CONFIGMAP, KUBEFLOW_LEASE[1])


def test_more_operator_flags_reach_the_deployment() -> None:
    import sys

    out = subprocess.run([sys.executable, "-m", "torchjob", "install", "--dry-run",
                          "--operator-arg=--gang-scheduler-name=volcano", "--operator-arg=--workers=8"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    deployment = next(o for o in yaml.safe_load_all(out.stdout) if o["kind"] == "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["torchjob", "operator"]
    assert command[-2:] == ["--gang-scheduler-name=volcano", "--workers=8"]


def test_the_values_reference_names_every_value() -> None:
    def leaves(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict) and v and k not in ("resources", "securityContext", "labels"):
                out += leaves(v, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}")
        return out

    page = (REPO / "docs" / "reference" / "helm-values.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [k for k in leaves(values) if f"`{k}`" not in page]
    assert missing == [], f"docs/reference/helm-values.md lacks {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]) - {"global"} == set(values)


def test_install_takes_the_charts_watch_namespaces_and_replicas(helm: str) -> None:
    import sys

    out = subprocess.run([sys.executable, "-m", "torchjob", "install", "--dry-run", "--namespace", "ops",
                          "--image", "torchjob/operator:0.1.0", "--watch-namespace", "a", "--watch-namespace", "b",
                          "--replicas", "2"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    cli = sorted((o for o in yaml.safe_load_all(out.stdout) if o["kind"] != "Namespace"), key=_key)
    chart = sorted((_strip(o) for o in template(helm, "image.tag=0.1.0", "watchNamespaces=[\"a\",\"b\"]",
                                                 "replicaCount=2", namespace="ops")), key=_key)
    assert cli == chart
