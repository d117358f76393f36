"""The `mcp` command's flags, registered by cli/main.py. Light: click only; the MCP SDK is imported when
the command runs (an agent starts `torchjob mcp` often: it answers `initialize` fast)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from torchjob.api.errors import UserError
from torchjob.connect import Target

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def mcp_command(kube_options: Decorator, target_of: Callable[..., Target]) -> click.Command:
    """`torchjob mcp`, its default place `target_of(**where)` (the CLI's reading of its --kube flags)."""

    @click.command(name="mcp")
    @click.option("--http", "http", is_flag=True,
                  help="Serve streamable HTTP (at /mcp) instead of stdio; the URL it prints (the first line on "
                       "stdout) carries the token every request needs.")
    @click.option("--port", default=0, show_default="a free one", help="With --http: the port.")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="With --http: the address; another than loopback is allowed, with a warning.")
    @click.option("--read-only", is_flag=True,
                  help="Serve only the tools that read (list, describe, logs, validate, preview, convert, wait).")
    @kube_options
    @click.option("-A", "--all-namespaces", is_flag=True, help="With --kube: act in every namespace.")
    def mcp(http: bool, port: int, host: str, read_only: bool, all_namespaces: bool, **where: Any) -> None:
        """Serve torchjob's verbs as Model Context Protocol tools for agents (Claude Code, Cursor, VS Code):
        list, describe, logs, validate, preview, submit, suspend, resume, delete, convert and wait, on this
        machine or with --kube on a cluster; over stdio, or with --http over streamable HTTP."""
        from torchjob.connect import ALL_NAMESPACES

        if all_namespaces and where["kube"]:
            where["namespace"] = ALL_NAMESPACES
        elif all_namespaces:
            raise click.UsageError("-A/--all-namespaces needs --kube (local jobs have no namespace)")
        if not http and (port or host != "127.0.0.1"):
            raise click.UsageError("--port and --host go with --http (stdio has no address)")
        try:
            from torchjob.mcp.places import Scope
            from torchjob.mcp.server import serve_http, serve_stdio
        except ImportError as e:
            if e.name is None or not e.name.startswith("mcp"):
                raise
            raise UserError("torchjob mcp needs the MCP Python SDK, which is not installed",
                            fix="pip install 'torchjob[mcp]'") from None
        scope = Scope(target_of(**where), read_only)
        if http:
            serve_http(scope, host, port, os.environ.get("TORCHJOB_MCP_TOKEN") or None)
        else:
            serve_stdio(scope)

    return mcp
