"""The `ui` command's flags, registered by cli/main.py. Light: click only; the server (Starlette,
uvicorn) is imported when the command runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from torchjob.connect import Target

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def ui_command(kube_options: Decorator, target_of: Callable[..., Target]) -> click.Command:
    """`torchjob ui`, on the target `target_of(**where)` names (the CLI's reading of its --kube flags)."""

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
        from torchjob.connect import ALL_NAMESPACES
        from torchjob.ui.serve import serve

        if all_namespaces and where["kube"]:
            where["namespace"] = ALL_NAMESPACES
        elif all_namespaces:
            raise click.UsageError("-A/--all-namespaces needs --kube (local jobs have no namespace)")
        serve(target_of(**where), host, port, not no_browser)

    return ui
