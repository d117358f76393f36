"""`torchjob operator`'s flags are OperatorConfig's fields (kube/controller/process/config.py): each setting has
one flag, the command line's values become the config the operator runs with, and every flag the install
manifests give the Deployment is one the command takes. No cluster needed."""

from __future__ import annotations

from dataclasses import fields, replace

import click
import pytest

from torchjob.cli.cluster import operator
from torchjob.kube.controller.process.config import FLAG, OperatorConfig
from torchjob.kube.objects.install import operator_args
from torchjob.kube.served.kubeflow_mode import KubeflowApi


@pytest.fixture(autouse=True)
def no_kubeconfig_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)  # --kubeconfig's default comes from it


def config_of(*args: str) -> OperatorConfig:
    """The config `torchjob operator ARGS...` would run with."""
    return OperatorConfig.from_flags(operator.make_context("operator", list(args)).params)


def test_every_setting_has_a_flag_of_its_own() -> None:
    decls = [f.metadata[FLAG].decls for f in fields(OperatorConfig)]
    assert len(decls) == len(fields(OperatorConfig)) == len(set(decls))


def test_the_command_line_s_defaults_are_the_fields_but_for_the_progress_endpoint() -> None:
    # in code (tests), no endpoint and plain /metrics unless asked
    assert config_of() == OperatorConfig(progress_port=8443, metrics_tls=True)


def test_flags_become_the_config_s_values() -> None:
    config = config_of("--kubeconfig", "/a:/b", "--namespace", "x", "--namespace", "y", "--namespace", "x",
                       "--workers", "8", "--no-metrics-auth", "--leader-elect", "--lease-duration", "30",
                       "--no-wait-for-master", "--gang-scheduler-name", "volcano", "--force-delete-after", "1.5",
                       "--progress-port", "0", "--progress-write-interval", "2", "--kubeflow-api", "off",
                       "--health-port", "9090", "--no-metrics-tls", "--pod-name", "op-0")
    assert config == OperatorConfig(kubeconfig="/a", namespace=("x", "y"), workers=8, metrics_auth=False,
                                    health_port=9090, metrics_tls=False, pod_name="op-0",
                                    leader_elect=True, lease_duration_s=30, wait_for_master=False,
                                    gang_scheduler="volcano", force_delete_after_s=1.5, progress_port=0,
                                    progress_write_s=2.0, kubeflow_api=KubeflowApi.OFF)
    assert config_of("--namespace", "x", "--namespace", "x").namespace == "x"  # one namespace: a namespaced watch


def test_a_value_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(click.BadParameter):
        config_of("--kubeflow-api", "maybe")


def test_the_deployment_s_command_is_one_the_operator_takes() -> None:
    args = operator_args("ops", ["a", "b"], {"gangSchedulerName": "volcano", "metricsAuth": False},
                         kubeflow_api=True)
    assert args[:2] == ["torchjob", "operator"]
    config = config_of(*args[2:])
    assert (config.namespace, config.gang_scheduler, config.metrics_auth, config.kubeflow_api) == (
        ("a", "b"), "volcano", False, KubeflowApi.ON)


def test_the_install_s_defaults_are_the_command_s() -> None:
    """The install manifests (and the chart, tests/kube/test_chart.py) write every setting out, from
    their own table of defaults (install.OPERATOR_FLAGS: objects/ may not import the controller's
    config): left as they are, the Deployment runs the operator as `torchjob operator` would, but for
    what an install means (a Lease; Kubeflow's API only when installed)."""
    config = config_of(*operator_args("torchjob-system")[2:])
    assert config == replace(config_of(), leader_elect=True, kubeflow_api=KubeflowApi.OFF)


def test_the_pod_name_comes_from_the_downward_api_s_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "torchjob-operator-abc")
    assert config_of().pod_name == "torchjob-operator-abc"


def test_the_probes_have_a_port_of_their_own() -> None:
    """Issue 30, finding 1: /healthz and /readyz on --health-port (controller-runtime's 8081), not on
    the metrics port; the Deployment's probes use it and no Service exposes it."""
    from torchjob.kube.objects.install import manifests

    assert config_of().health_port == 8081 and config_of().metrics_port == 8080
    objs = manifests(replicas=2)
    (container,) = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    health = next(p for p in container["ports"] if p["name"] == "health")
    assert health["containerPort"] == 8081
    assert container["livenessProbe"]["httpGet"]["port"] == container["readinessProbe"]["httpGet"]["port"] == "health"
    services = [o for o in objs if o["kind"] == "Service"]
    assert services and not any(p["targetPort"] in ("health", 8081) for o in services for p in o["spec"]["ports"])
