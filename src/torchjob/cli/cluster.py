"""The commands of whoever runs the cluster: `torchjob install` (the CRDs, RBAC and the operator's
Deployment, or their YAML) and `torchjob operator` (the controller itself). Registered on the
`torchjob` group by cli/main.py."""

from __future__ import annotations

from typing import Any

import click

from torchjob.api.errors import UserError
from torchjob.kube.controller.config import Flag, OperatorConfig, flags


class NotReady(UserError):
    """The operator was installed but does not run: what its pods say, and what to do (exit 1)."""

    exit_code = 1


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the manifests instead of applying them.")
@click.option("--image", default=None, help="The operator image (default torchjob/operator:VERSION).")
@click.option("--namespace", default="torchjob-system", show_default=True, help="Where the operator runs.")
@click.option("--crd-only", is_flag=True, help="Only the CustomResourceDefinition (with --kubeflow-api: both).")
@click.option("--kubeflow-api", is_flag=True,
              help="Also Kubeflow's pytorchjobs.kubeflow.org CRD and its RBAC: the operator serves PyTorchJobs too.")
@click.option("--trainer-api", is_flag=True,
              help="Also Kubeflow Trainer v2's CRDs (trainjobs, trainingruntimes, clustertrainingruntimes.trainer."
                   "kubeflow.org), the torch-distributed runtime, the kubeflow-trainer-public ConfigMap and their "
                   "RBAC: the operator serves TrainJobs too.")
@click.option("--trainer-runtime-image", default=None, metavar="IMAGE",
              help="With --trainer-api: the torch-distributed runtime's node image (default: Trainer v2.3's).")
@click.option("--t9k-api", is_flag=True,
              help="Also T9k's pytorchtrainingjobs.batch.tensorstack.dev CRD and its RBAC: the operator serves "
                   "PyTorchTrainingJobs too.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="Default: $KUBECONFIG, ~/.kube/config.")
@click.option("--watch-namespace", "watch_namespaces", multiple=True, metavar="NAMESPACE",
              help="Only this namespace's jobs (repeat it; default: all); the operator's rights there are Roles.")
@click.option("--replicas", default=1, show_default=True, help="Operator replicas (one leads, the others wait).")
@click.option("--operator-arg", "operator_args", multiple=True, metavar="ARG",
              help="One more `torchjob operator` flag for the Deployment (repeat it), e.g. "
                   "--operator-arg=--gang-scheduler-name=volcano.")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the operator's Deployment is Ready; fail, saying why, when its image cannot be "
                   "pulled or it keeps crashing.")
@click.option("--timeout", type=click.FloatRange(min=1), default=180, show_default=True, metavar="SECONDS",
              help="With --wait: how long to wait for the operator to be Ready.")
def install(dry_run: bool, image: str | None, namespace: str, crd_only: bool, kubeflow_api: bool,
            trainer_api: bool, trainer_runtime_image: str | None, t9k_api: bool, kubeconfig: str | None,
            watch_namespaces: tuple[str, ...], replicas: int,
            operator_args: tuple[str, ...], wait: bool, timeout: float) -> None:
    """Install the TorchJob CRD, least-privilege RBAC and the operator Deployment in a cluster, and
    wait until the operator is Ready (exit 1, saying what its pods say, when it does not come up).
    Refused, with nothing applied, where an install in another namespace holds its bindings."""
    from torchjob.kube.objects.install import DEFAULT_IMAGE, apply, manifests

    objs = manifests(image or DEFAULT_IMAGE, namespace, replicas=replicas, args=list(operator_args),
                     kubeflow_api=kubeflow_api, crd_only=crd_only,
                     watch_namespaces=tuple(dict.fromkeys(watch_namespaces)))
    later: list[dict[str, Any]] = []  # objects of kinds whose CRDs this install makes
    if trainer_api:
        from torchjob.kube.served.trainer_objects import DEFAULT_RUNTIME_IMAGE, trainer_api_objects

        more = trainer_api_objects(namespace, tuple(dict.fromkeys(watch_namespaces)), crd_only,
                                   trainer_runtime_image or DEFAULT_RUNTIME_IMAGE)
        count = sum(1 for o in objs if o["kind"] == "CustomResourceDefinition")
        objs = [*objs[:count], *(o for o in more if o["kind"] == "CustomResourceDefinition"), *objs[count:]]
        later = [o for o in more if o["kind"] != "CustomResourceDefinition"]
    if t9k_api:
        from torchjob.kube.served.t9k_objects import t9k_api_objects

        more = t9k_api_objects(namespace, tuple(dict.fromkeys(watch_namespaces)), crd_only)
        count = sum(1 for o in objs if o["kind"] == "CustomResourceDefinition")
        objs = [*objs[:count], *(o for o in more if o["kind"] == "CustomResourceDefinition"), *objs[count:],
                *(o for o in more if o["kind"] != "CustomResourceDefinition")]
    config = kubeconfig.split(":")[0] if kubeconfig else None
    _refuse_another_install([*objs, *later], namespace, config, dry_run)  # before anything is applied
    if dry_run:
        import yaml

        click.echo(yaml.safe_dump_all([*objs, *later], sort_keys=False).rstrip())
        return
    for name in apply(objs, config):
        click.echo(f"applied {name}")
    for name in _apply_once_known(later, config):
        click.echo(f"applied {name}")
    if wait and not crd_only:
        _wait_for_operator(config, namespace, image or DEFAULT_IMAGE, timeout)


def _refuse_another_install(objs: list[dict[str, Any]], namespace: str, kubeconfig: str | None,
                            dry_run: bool) -> None:
    """Refuse (UserError) when an object to apply belongs to an install in another namespace
    (install.taken: its bindings bind that namespace's ServiceAccount). A dry run says the same where
    it can reach a cluster, and prints the manifests alone where there is none."""
    from torchjob.kube.objects.install_owner import refusal, taken, to_check

    if not to_check(objs):  # --crd-only: the CRDs are the same whoever installs them
        return
    from torchjob.kube.clientside.kube_runtime import client, explain

    try:
        kube = client(kubeconfig, None)
        found = taken(objs, namespace, lambda obj: _found(kube, obj))
    except UserError:
        if dry_run:  # no kubeconfig: nothing to compare with
            return
        raise
    except Exception as e:
        said = explain(e)
        if not dry_run or said is None:
            raise
        click.echo(f"note: not checked against the cluster for another install's objects: {said.message}", err=True)
        return
    if found:
        raise refusal(found, namespace)


def _found(kube: Any, obj: dict[str, Any]) -> dict[str, Any] | None:
    """`obj`'s copy on the cluster (a ClusterRoleBinding or RoleBinding), or None."""
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, RoleBinding

    from torchjob.kube.machinery.client import status_code

    meta = obj["metadata"]
    try:
        if obj["kind"] == "ClusterRoleBinding":
            there = kube.get(ClusterRoleBinding, meta["name"])
        else:
            there = kube.get(RoleBinding, meta["name"], namespace=meta["namespace"])
    except ApiError as e:
        if status_code(e) == 404:
            return None
        raise
    data: dict[str, Any] = there.to_dict()
    return data


def _apply_once_known(objs: list[dict[str, Any]], kubeconfig: str | None, timeout: float = 60) -> list[str]:
    """`apply`, retried while the API server does not know a kind yet (a CRD just made is served a
    moment later)."""
    import time

    import torchjob.kube.machinery.client  # noqa: F401 (registers the generic kinds for the codecs)
    from torchjob.kube.machinery.client import status_code
    from torchjob.kube.objects.install import apply

    done: list[str] = []
    end = time.monotonic() + timeout
    for obj in objs:
        while True:
            try:
                done += apply([obj], kubeconfig)
                break
            except Exception as e:
                if status_code(e) != 404 or time.monotonic() > end:
                    raise
                time.sleep(0.5)
    return done


def _wait_for_operator(kubeconfig: str | None, namespace: str, image: str, timeout: float) -> None:
    from torchjob.kube.clientside.kube_runtime import client
    from torchjob.kube.clientside.operator_status import wait_ready

    click.echo(f"waiting up to {timeout:g} s for the operator ({image}) to be Ready (--no-wait: do not)", err=True)
    trouble = wait_ready(client(kubeconfig, None), namespace, image, timeout,
                         on_wait=lambda now: click.echo(f"  {now}", err=True))
    if trouble is not None:
        raise NotReady(f"{trouble.pod}: {trouble.what}", fix=trouble.fix)
    click.echo(f"the operator is Ready in {namespace} ({image})")


def _option(name: str, flag: Flag, default: Any) -> click.Option:
    """The click option of one of OperatorConfig's settings (its value arrives under the field's name)."""
    return click.Option([name, flag.decls], default=default, show_default=True, help=flag.help,
                        metavar=flag.metavar, multiple=flag.multiple, envvar=flag.envvar,
                        type=click.Choice(flag.choices) if flag.choices else None)


# Its flags are OperatorConfig's fields (kube/controller/config.py): a setting is declared there only.
@click.command(params=[_option(*setting) for setting in flags()])
def operator(**values: Any) -> None:
    """Run the Kubernetes controller that reconciles TorchJobs into Pods and a headless Service."""
    import asyncio

    from torchjob.kube.controller.operator import run_operator
    from torchjob.kube.machinery.logs import configure_logging

    config = OperatorConfig.from_flags(values)
    configure_logging()
    asyncio.run(run_operator(config))
