"""The commands of whoever runs the cluster: `torchjob install` (the CRDs, RBAC and the operator's
Deployment, or their YAML) and `torchjob operator` (the controller itself). Registered on the
`torchjob` group by cli/main.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from torchjob.api.errors import UserError
from torchjob.kube.controller.process.config import Flag, OperatorConfig, flags


class NotReady(UserError):
    """The operator was installed but does not run: what its pods say, and what to do (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class InstallOptions:
    """`torchjob install`'s flags, as its click command receives them: one frozen value, not an argument a flag."""

    dry_run: bool = False
    image: str | None = None
    init_image: str | None = None
    namespace: str = "torchjob-system"
    crd_only: bool = False
    kubeflow_api: bool = False
    trainer_api: bool = False
    trainer_runtime_image: str | None = None
    trainer_runtime_readers: tuple[str, ...] = ()
    t9k_api: bool = False
    take_over: bool = False
    kubeconfig: str | None = None
    watch_namespaces: tuple[str, ...] = ()
    replicas: int = 1
    operator_args: tuple[str, ...] = ()
    wait: bool = True
    timeout: float = 180


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the manifests instead of applying them.")
@click.option("--image", default=None, help="The operator image (default torchjob/operator:VERSION).")
@click.option("--init-image", default=None, metavar="IMAGE",
              help="The image of the workers' wait-for-master init container (sh and nc; default busybox:1.36).")
@click.option("--namespace", default="torchjob-system", show_default=True, help="Where the operator runs.")
@click.option("--crd-only", is_flag=True, help="Only the CustomResourceDefinition (with --kubeflow-api: both).")
@click.option("--kubeflow-api", is_flag=True,
              help="Also Kubeflow's pytorchjobs.kubeflow.org CRD and its RBAC: the operator serves PyTorchJobs too.")
@click.option("--trainer-api", is_flag=True,
              help="Also Kubeflow Trainer v2's CRDs (trainjobs, trainingruntimes, clustertrainingruntimes.trainer."
                   "kubeflow.org), the torch-distributed runtime, Trainer's torchtune runtimes (with dataset and model "
                   "initializers), the kubeflow-trainer-public ConfigMap and their "
                   "RBAC: the operator serves TrainJobs too. Refused where Kubeflow Trainer's own install made "
                   "them (see --take-over).")
@click.option("--trainer-runtime-image", default=None, metavar="IMAGE",
              help="With --trainer-api: the torch-distributed runtime's node image (default: Trainer v2.3's).")
@click.option("--trainer-runtime-reader", "trainer_runtime_readers", multiple=True, metavar="SUBJECT",
              help="With --trainer-api: who may list the ClusterTrainingRuntimes (the Kubeflow SDK does): "
                   "group:NAME, user:NAME or serviceaccount:NAMESPACE:NAME (repeat it), or none for no binding "
                   "(default: group:system:authenticated, every authenticated user and ServiceAccount).")
@click.option("--t9k-api", is_flag=True,
              help="Also T9k's pytorchtrainingjobs.batch.tensorstack.dev CRD and its RBAC: the operator serves "
                   "PyTorchTrainingJobs too. Refused where T9k's own install made it (see --take-over).")
@click.option("--take-over", is_flag=True,
              help="With --trainer-api or --t9k-api: apply torchjob's CRDs and objects over those another install "
                   "(Kubeflow Trainer's, T9k's) made, making them torchjob's; stop that install's controller "
                   "first, or two controllers act on the same jobs.")
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
def install(**values: Any) -> None:
    """Install the TorchJob CRD, least-privilege RBAC and the operator Deployment in a cluster, and
    wait until the operator is Ready (exit 1, saying what its pods say, when it does not come up).
    Refused, with nothing applied, where an install in another namespace holds its bindings, or where
    another install (Kubeflow Trainer's, T9k's) made the objects of --trainer-api or --t9k-api."""
    run_install(InstallOptions(**values))


def _readers(given: tuple[str, ...]) -> tuple[dict[str, str], ...]:
    """--trainer-runtime-reader, as RBAC subjects (none given: the default; `none`: no binding)."""
    from torchjob.kube.served.trainer_objects import DEFAULT_RUNTIME_READERS, reader_subject

    if not given:
        return DEFAULT_RUNTIME_READERS
    if "none" in given:
        if len(given) > 1:
            raise UserError("--trainer-runtime-reader none: no binding, and yet subjects to bind were given too",
                            fix="pass either none or the subjects")
        return ()
    return tuple(reader_subject(g) for g in dict.fromkeys(given))


@dataclass(frozen=True)
class Manifests:
    """What an install applies: `first` (the CRDs first), then `later` (objects of kinds whose CRDs this
    install makes, applied once those are served); `foreign_api`: those of them that have the names of
    Kubeflow Trainer's or T9k's own install (--trainer-api, --t9k-api), which it must not take over
    unasked. Kubeflow's PyTorchJob CRD (--kubeflow-api) is not among them: replacing the training-
    operator's is how a cluster moves to torchjob (docs/how-to/kubeflow-migration.md), and the operator
    leaves PyTorchJobs alone while the training-operator holds its Lease. `gone`: what an earlier
    install applied and this one deletes (the runtimes' reader binding, --trainer-runtime-reader none)."""

    first: list[dict[str, Any]]
    later: list[dict[str, Any]]
    foreign_api: list[dict[str, Any]]
    gone: list[dict[str, Any]]


def manifests_of(opts: InstallOptions) -> Manifests:
    """What `opts` installs."""
    from torchjob.kube.objects import install
    from torchjob.kube.objects.install import DEFAULT_IMAGE, manifests

    if opts.take_over and not (opts.trainer_api or opts.t9k_api):
        raise UserError("--take-over: nothing to take over without --trainer-api or --t9k-api",
                        fix="add the flag of the API whose objects another install made, or drop --take-over")
    if opts.trainer_runtime_readers and not opts.trainer_api:
        raise UserError("--trainer-runtime-reader: the runtimes' readers are bound only with --trainer-api",
                        fix="add --trainer-api, or drop --trainer-runtime-reader")
    watched = tuple(dict.fromkeys(opts.watch_namespaces))
    readers = _readers(opts.trainer_runtime_readers)
    objs = manifests(opts.image or DEFAULT_IMAGE, opts.namespace, replicas=opts.replicas,
                     args=list(opts.operator_args), kubeflow_api=opts.kubeflow_api, crd_only=opts.crd_only,
                     watch_namespaces=watched, flags={"initImage": opts.init_image} if opts.init_image else None)
    later: list[dict[str, Any]] = []  # objects of kinds whose CRDs this install makes
    foreign_api: list[dict[str, Any]] = []
    gone: list[dict[str, Any]] = []
    if opts.trainer_api:
        from torchjob.kube.served.trainer_objects import DEFAULT_RUNTIME_IMAGE, trainer_api_objects

        more = trainer_api_objects(opts.namespace, watched, opts.crd_only,
                                   opts.trainer_runtime_image or DEFAULT_RUNTIME_IMAGE, readers)
        count = sum(1 for o in objs if o["kind"] == "CustomResourceDefinition")
        objs = [*objs[:count], *(o for o in more if o["kind"] == "CustomResourceDefinition"), *objs[count:]]
        later = [o for o in more if o["kind"] != "CustomResourceDefinition"]
        foreign_api += more
        if not readers and not opts.crd_only:
            from torchjob.kube.served.trainer_objects import RUNTIME_READERS

            gone.append({"apiVersion": install.RBAC, "kind": "ClusterRoleBinding",
                         "metadata": {"name": RUNTIME_READERS}})
    if opts.t9k_api:
        from torchjob.kube.served.t9k_objects import t9k_api_objects

        more = t9k_api_objects(opts.namespace, watched, opts.crd_only)
        count = sum(1 for o in objs if o["kind"] == "CustomResourceDefinition")
        objs = [*objs[:count], *(o for o in more if o["kind"] == "CustomResourceDefinition"), *objs[count:],
                *(o for o in more if o["kind"] != "CustomResourceDefinition")]
        foreign_api += more
    return Manifests(objs, later, foreign_api, gone)


def run_install(opts: InstallOptions) -> None:
    """`torchjob install`: check, then print (--dry-run) or apply and wait."""
    from torchjob.kube.objects.install import DEFAULT_IMAGE, apply

    made = manifests_of(opts)
    objs, later = made.first, made.later
    config = opts.kubeconfig.split(":")[0] if opts.kubeconfig else None
    _refuse_another_install(made, opts, config)  # before anything is applied
    if opts.dry_run:
        import yaml

        click.echo(yaml.safe_dump_all([*objs, *later], sort_keys=False).rstrip())
        return
    objs, later = _mark_created(objs, config), _mark_created(later, config)
    for name in apply(objs, config):
        click.echo(f"applied {name}")
    for name in _apply_once_known(later, config):
        click.echo(f"applied {name}")
    for name in _delete(made.gone, config):
        click.echo(f"deleted {name}")
    if opts.wait and not opts.crd_only:
        _wait_for_operator(config, opts.namespace, opts.image or DEFAULT_IMAGE, opts.timeout)


def _refuse_another_install(made: Manifests, opts: InstallOptions, kubeconfig: str | None) -> None:
    """Refuse (UserError) when an object to apply belongs to an install in another namespace
    (install_owner.taken: its bindings bind that namespace's ServiceAccount), or, unless --take-over,
    when another install than torchjob's made an object of Trainer's or T9k's API it would apply
    (install_owner.foreign). A dry run says the same where it can reach a cluster, and prints the
    manifests alone where there is none."""
    from torchjob.kube.objects.install.owner import foreign, refusal, take_over_refusal, taken, to_check, to_take_over

    objs = [*made.first, *made.later]
    check_foreign = not opts.take_over and bool(to_take_over(made.foreign_api))
    if not to_check(objs) and not check_foreign:  # --crd-only: the CRDs are the same whoever installs them
        return
    from torchjob.kube.clientside.kube_runtime import client, explain
    from torchjob.kube.clientside.uninstall import found as there

    try:
        kube = client(kubeconfig, None)
        found = taken(objs, opts.namespace, lambda obj: there(kube, obj))
        theirs = foreign(made.foreign_api, lambda obj: there(kube, obj)) if check_foreign and not found else []
    except UserError:
        if opts.dry_run:  # no kubeconfig: nothing to compare with
            return
        raise
    except Exception as e:
        said = explain(e)
        if not opts.dry_run or said is None:
            raise
        click.echo(f"note: not checked against the cluster for another install's objects: {said.message}", err=True)
        return
    if found:
        raise refusal(found, opts.namespace)
    if theirs:
        raise take_over_refusal(theirs, " and ".join(f for f, on in (("--trainer-api", opts.trainer_api),
                                                                    ("--t9k-api", opts.t9k_api)) if on))


def _mark_created(objs: list[dict[str, Any]], kubeconfig: str | None) -> list[dict[str, Any]]:
    """`objs` with the namespaces this install creates marked so: `torchjob uninstall` deletes those only."""
    if not any(o["kind"] == "Namespace" for o in objs):
        return objs
    from torchjob.kube.clientside.kube_runtime import client
    from torchjob.kube.clientside.uninstall import found
    from torchjob.kube.objects.install.uninstall import mark_created

    kube = client(kubeconfig, None)
    return mark_created(objs, lambda obj: found(kube, obj))


def _delete(objs: list[dict[str, Any]], kubeconfig: str | None) -> list[str]:
    """Delete each of `objs` that is there; `kind/name` of those deleted."""
    from lightkube.core.exceptions import ApiError
    from lightkube.core.resource_registry import resource_registry

    from torchjob.kube.clientside.kube_runtime import client
    from torchjob.kube.machinery.client import status_code

    if not objs:
        return []
    kube = client(kubeconfig, None)
    done = []
    for obj in objs:
        res: Any = resource_registry.load(obj["apiVersion"], obj["kind"])  # RBAC kinds: lightkube's own
        try:
            kube.delete(res, obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        except ApiError as e:
            if status_code(e) == 404:
                continue
            raise
        done.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return done


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


# Its flags are OperatorConfig's fields (kube/controller/process/config.py): a setting is declared there only.
@click.command(params=[_option(*setting) for setting in flags()])
def operator(**values: Any) -> None:
    """Run the Kubernetes controller that reconciles TorchJobs into Pods and a headless Service."""
    import asyncio

    from torchjob.kube.controller.process.operator import run_operator
    from torchjob.kube.machinery.logs import configure_logging

    config = OperatorConfig.from_flags(values)
    configure_logging()
    asyncio.run(run_operator(config))
