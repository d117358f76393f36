"""Where a job runs, and the one place a runtime is built for it.

A `Target` names this machine or a cluster (a kubeconfig, a context, a namespace); `connect(target)`
gives the `Runtime` that acts there. The command line, the Python API and the dashboard all come
through here, so that what a face may ask of a runtime is the interface's, never one runtime's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchjob.local.start.launch import LocalOptions
    from torchjob.runtime import Runtime

ALL_NAMESPACES = "*"


@dataclass(frozen=True)
class Target:
    """This machine (the default), or a cluster: `Target(kube=True, namespace="team-a")`.

    Attributes:
        kube: a Kubernetes cluster (the operator runs the job) instead of this machine.
        kubeconfig: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config); of a
            `KUBECONFIG`-style list, the first file.
        context: the kubeconfig context (default: its current one).
        namespace: the namespace (default: the context's); `"*"` lists every namespace.
    """

    kube: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not self.kube and (self.kubeconfig or self.context or self.namespace):
            raise ValueError("a kubeconfig, context or namespace names a cluster: pass kube=True with it")

    def in_namespace(self, namespace: str | None) -> Target:
        """The same place, acting in another namespace (this machine has none: itself)."""
        if not self.kube:
            return self
        return Target(True, self.kubeconfig, self.context, namespace)

    @property
    def where(self) -> str:
        """For messages: `this machine`, `the cluster`."""
        return "the cluster" if self.kube else "this machine"


HERE = Target()


def connect(target: Target = HERE, options: LocalOptions | None = None) -> Runtime[Any]:
    """The runtime acting on `target`; `options`: how a job runs on this machine (ports, stand-in
    volumes, the interpreter), meaningless on a cluster. Contacts nothing yet: the first verb does."""
    if target.kube:
        if options is not None:
            raise ValueError("local options (configmaps, pvcs, ports) do not apply to a cluster")
        from torchjob.kube.clientside.kube_runtime import KubeRuntime

        kubeconfig = target.kubeconfig.split(":")[0] if target.kubeconfig else None
        return KubeRuntime(kubeconfig, target.context, target.namespace)
    from torchjob.local.local_runtime import LocalRuntime

    return LocalRuntime(options)
