"""`torchjob uninstall`: removes what `torchjob install` made (kube/clientside/uninstall.py finds it,
kube/objects/install/uninstall.py decides what is whose). Registered on the `torchjob` group by cli/main.py."""

from __future__ import annotations

import click


@click.command()
@click.option("--namespace", default="torchjob-system", show_default=True,
              help="The namespace `torchjob install` installed the operator into.")
@click.option("--crds", is_flag=True,
              help="Also delete torchjob's CRDs, and with them every job of their kinds (it says how many, and "
                   "asks; --yes does not ask).")
@click.option("--yes", "-y", is_flag=True, help="With --crds: delete without asking (needed where no terminal is).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted, and what kept; delete nothing.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="Default: $KUBECONFIG, ~/.kube/config.")
def uninstall(namespace: str, crds: bool, yes: bool, dry_run: bool, kubeconfig: str | None) -> None:
    """Remove what `torchjob install` made: the operator, its namespace (where install made it), its
    ClusterRoles, bindings and aggregated roles, the objects of --kubeflow-api, --trainer-api and --t9k-api.
    The CRDs, and so every job, are kept unless --crds. Refused, with nothing deleted, where Helm made
    them (`helm uninstall` that release) or where they are another namespace's install's."""
    import sys

    from torchjob.kube.clientside import uninstall as removing
    from torchjob.kube.clientside.kube_runtime import client
    from torchjob.kube.objects.install.uninstall import confirm_refusal, what

    kube = client(kubeconfig.split(":")[0] if kubeconfig else None, None)
    plan = removing.removal(kube, namespace)
    held = removing.counted(removing.held(kube, plan.crds)) if plan.crds else ""
    doomed = [*plan.delete, *(plan.crds if crds else [])]
    for obj, why in plan.left:
        click.echo(f"left {what(obj)}: {why}")
    names = ", ".join(c["metadata"]["name"] for c in plan.crds)
    if plan.crds and not crds:
        click.echo(f"kept the CRDs {names} and every object of their kinds (now: {held}); --crds deletes them")
    if dry_run:
        for obj in doomed:
            click.echo(f"would delete {what(obj)}")
        if crds and plan.crds:
            click.echo(f"and with the CRDs every object of their kinds (now: {held})")
        return
    if crds and plan.crds and not yes:
        if not sys.stdin.isatty():
            raise confirm_refusal(plan.crds, held)
        click.confirm(f"delete the CRDs {names} and with them every object of their kinds (now: {held})?",
                      abort=True)
    if not doomed:
        click.echo(f"nothing of a torchjob install in {namespace} to delete")
    for name in removing.delete(kube, doomed):
        click.echo(f"deleted {name}")
