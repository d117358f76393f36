"""The `ui` command's flags, registered by cli/main.py. Light: click only; the server (Starlette,
uvicorn) is imported when the command runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from torchjob.runtime import Runtime

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def ui_command(kube_options: Decorator, runtime: Callable[..., Runtime[Any]]) -> click.Command:
    """`torchjob ui`, acting through `runtime(**where)` (the CLI's runtime picker, with its --kube flags)."""

    @click.command(name="ui")
    @click.option("--port", default=0, show_default="a free one", help="The port to serve on.")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="The address to serve on; another than loopback is allowed, with a warning.")
    @click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
    @kube_options
    @click.option("-A", "--all-namespaces", is_flag=True, help="With --kube: the jobs of every namespace.")
    def ui(port: int, host: str, no_browser: bool, all_namespaces: bool, **where: Any) -> None:
        """A web dashboard of the jobs: live progress, metric curves, attempts, events, logs. The URL
        it prints (the first line on stdout) carries the token every request needs."""
        from torchjob.ui.serve import serve
        from torchjob.ui.source import Where

        if all_namespaces and where["kube"]:
            where["namespace"] = "*"
        elif all_namespaces:
            raise click.UsageError("-A/--all-namespaces needs --kube (local jobs have no namespace)")
        place = Where(local=not where["kube"], kubeconfig=where["kubeconfig"], context=where["kube_context"],
                      namespace=where["namespace"])
        serve(place, lambda ns: runtime(**{**where, "namespace": ns}), host, port, not no_browser)

    return ui
