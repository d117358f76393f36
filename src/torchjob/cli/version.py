"""`torchjob version`: this client's version and, with --kube, the version of the operator a cluster
runs (its Deployment's image tag: the chart and `torchjob install` tag the image with the version)."""

from __future__ import annotations

import json
from typing import Any

import click

from torchjob.version import __version__


@click.command()
@click.option("--kube", is_flag=True, help="Also the operator's version, read from the cluster.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="With --kube (default ~/.kube/config).")
@click.option("--context", "kube_context", default=None, help="With --kube: the kubeconfig context.")
@click.option("--operator-namespace", default=None, metavar="NAMESPACE",
              help="With --kube: where the operator runs (default: it is looked for in every namespace).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format (json is for scripts).")
def version(kube: bool, kubeconfig: str | None, kube_context: str | None, operator_namespace: str | None,
            output: str) -> None:
    """Print torchjob's version (with --kube, the cluster's operator's too; a warning when they differ)."""
    out: dict[str, Any] = {"client": __version__}
    if kube:
        from torchjob.kube.clientside.kube_runtime import client
        from torchjob.kube.clientside.operator_status import find_operator

        operators = find_operator(client(kubeconfig, kube_context), operator_namespace)
        out["operators"] = [{"namespace": o.namespace, "version": o.version, "image": o.image,
                             "replicas": o.replicas, "ready": o.ready} for o in operators]
    if output == "json":
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"client: {__version__}")
        for o in out.get("operators", []):
            click.echo(f"operator: {o['version']} (image {o['image']}, namespace {o['namespace']}, "
                       f"{o['ready']}/{o['replicas']} ready)")
        if kube and not out["operators"]:
            where = f"namespace {operator_namespace}" if operator_namespace else "any namespace"
            click.echo(f"operator: none found in {where} (torchjob install, or the Helm chart, installs it)")
    for o in out.get("operators", []):
        # an image built from the repository (`:dev`, as the install page builds it) says no version to compare
        if o["version"] not in (__version__, "dev"):
            click.echo(f"warning: the operator in {o['namespace']} runs {o['version']}, this client is {__version__}: "
                       "install the operator of this version (torchjob install, or helm upgrade) or a client of "
                       "its version", err=True)
