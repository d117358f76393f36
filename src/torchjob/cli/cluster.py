"""The commands of whoever runs the cluster: `torchjob install` (the CRDs, RBAC and the operator's
Deployment, or their YAML) and `torchjob operator` (the controller itself). Registered on the
`torchjob` group by cli/main.py."""

from __future__ import annotations

import click

from torchjob.api.defaults import INIT_IMAGE


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the manifests instead of applying them.")
@click.option("--image", default=None, help="The operator image (default torchjob/operator:VERSION).")
@click.option("--namespace", default="torchjob-system", show_default=True, help="Where the operator runs.")
@click.option("--crd-only", is_flag=True, help="Only the CustomResourceDefinition (with --kubeflow-api: both).")
@click.option("--kubeflow-api", is_flag=True,
              help="Also Kubeflow's pytorchjobs.kubeflow.org CRD and its RBAC: the operator serves PyTorchJobs too.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="Default: $KUBECONFIG, ~/.kube/config.")
@click.option("--watch-namespace", "watch_namespaces", multiple=True, metavar="NAMESPACE",
              help="Only this namespace's jobs (repeat it; default: all); the operator's rights there are Roles.")
@click.option("--replicas", default=1, show_default=True, help="Operator replicas (one leads, the others wait).")
@click.option("--operator-arg", "operator_args", multiple=True, metavar="ARG",
              help="One more `torchjob operator` flag for the Deployment (repeat it), e.g. "
                   "--operator-arg=--gang-scheduler-name=volcano.")
def install(dry_run: bool, image: str | None, namespace: str, crd_only: bool, kubeflow_api: bool,
            kubeconfig: str | None, watch_namespaces: tuple[str, ...], replicas: int,
            operator_args: tuple[str, ...]) -> None:
    """Install the TorchJob CRD, least-privilege RBAC and the operator Deployment in a cluster."""
    from torchjob.kube.objects.install import DEFAULT_IMAGE, apply, manifests

    objs = manifests(image or DEFAULT_IMAGE, namespace, replicas=replicas, args=list(operator_args),
                     kubeflow_api=kubeflow_api, crd_only=crd_only,
                     watch_namespaces=tuple(dict.fromkeys(watch_namespaces)))
    if dry_run:
        import yaml

        click.echo(yaml.safe_dump_all(objs, sort_keys=False).rstrip())
        return
    for name in apply(objs, kubeconfig.split(":")[0] if kubeconfig else None):
        click.echo(f"applied {name}")


@click.command()
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="Default: in-cluster, else ~/.kube/config.")
@click.option("--namespace", "namespaces", multiple=True, metavar="NAMESPACE",
              help="Watch this namespace only; repeat it for several (default: all).")
@click.option("--workers", default=4, show_default=True, help="Concurrent reconciles.")
@click.option("--metrics-port", default=8080, show_default=True, help="Port of /metrics, /healthz, /readyz.")
@click.option("--metrics-auth/--no-metrics-auth", default=True, show_default=True,
              help="Serve /metrics only to a bearer token the API server authenticates and allows to get "
                   "/metrics (TokenReview and SubjectAccessReview, as controller-runtime does; bind the scraper's "
                   "ServiceAccount to the torchjob-metrics-reader ClusterRole). /healthz and /readyz stay open.")
@click.option("--leader-elect/--no-leader-elect", default=False, show_default=True,
              help="Hold a Lease so that only one replica of the operator acts.")
@click.option("--lease-namespace", default="torchjob-system", show_default=True)
@click.option("--lease-duration", default=15, show_default=True, metavar="SECONDS",
              help="How long a leader's Lease holds without renewal (renewed every third of it).")
@click.option("--init-image", default=INIT_IMAGE, show_default=True,
              help="Image of the workers' wait-for-master init container.")
@click.option("--wait-for-master/--no-wait-for-master", default=True, show_default=True,
              help="Workers wait until the master's port accepts connections.")
@click.option("--gang-scheduler-name", default=None, metavar="NAME",
              help="The scheduler of jobs that name none (Kubeflow's flag): volcano gives them a Volcano "
                   "PodGroup, another name a scheduler-plugins PodGroup.")
@click.option("--force-delete-after", default=60.0, show_default=True, metavar="SECONDS",
              help="Force-delete a job's pod still terminating this long past its deletion time "
                   "(its node is gone), so that the job can go on.")
@click.option("--progress-port", default=8443, show_default=True, metavar="PORT",
              help="Serve the progress endpoint (HTTPS) that pods report to; 0 turns it off (and the pods get "
                   "no KUBEFLOW_TRAINER_SERVER_* variables).")
@click.option("--progress-url", default=None, metavar="URL",
              help="The endpoint's address as pods reach it [default: https://SERVICE.LEASE-NAMESPACE.svc:PORT].")
@click.option("--progress-service", default="torchjob-operator", show_default=True, metavar="NAME",
              help="The operator's Service (in --lease-namespace): the name the endpoint's certificate is for.")
@click.option("--progress-write-interval", default=5.0, show_default=True, metavar="SECONDS",
              help="Write a job's status.progress at most once this often, however often its pods report.")
@click.option("--kubeflow-api", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Serve Kubeflow's kubeflow.org/v1 PyTorchJobs too. auto: when the cluster has their CRD as "
                   "`torchjob install --kubeflow-api` installs it and Kubeflow's training-operator holds no Lease.")
def operator(kubeconfig: str | None, namespaces: tuple[str, ...], workers: int, metrics_port: int, metrics_auth: bool,
             leader_elect: bool,
             lease_namespace: str, lease_duration: int, init_image: str, wait_for_master: bool,
             gang_scheduler_name: str | None, force_delete_after: float, progress_port: int,
             progress_url: str | None, progress_service: str, progress_write_interval: float,
             kubeflow_api: str) -> None:
    """Run the Kubernetes controller that reconciles TorchJobs into Pods and a headless Service."""
    import asyncio

    from torchjob.kube.controller.config import KubeflowApi, OperatorConfig
    from torchjob.kube.controller.operator import run_operator
    from torchjob.kube.machinery.logs import configure_logging

    config = OperatorConfig(
        kubeconfig=kubeconfig.split(":")[0] if kubeconfig else None,
        namespace=namespaces[0] if len(set(namespaces)) == 1 else tuple(dict.fromkeys(namespaces)) or None,
        workers=workers,
        metrics_port=metrics_port, metrics_auth=metrics_auth, leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_duration_s=lease_duration, init_image=init_image, wait_for_master=wait_for_master,
        gang_scheduler=gang_scheduler_name, force_delete_after_s=force_delete_after, progress_port=progress_port,
        progress_url=progress_url, progress_service=progress_service, progress_write_s=progress_write_interval,
        kubeflow_api=KubeflowApi(kubeflow_api))
    configure_logging()
    asyncio.run(run_operator(config))
