"""`torchjob stacks NAME`: where a running job's ranks are (core.stacks groups and words them; the
local runtime takes them, torchjob.local.inspect.stacks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from torchjob.core.diagnosis import stacks as core_stacks


def stacks_command(kube_options: Callable[[Any], Any], runtime: Callable[..., Any]) -> click.Command:
    @click.command()
    @click.argument("name")
    @click.option("--all-threads", is_flag=True, help="Every thread's stack, not only each process's main thread.")
    @click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
                  help="Output format (json is for scripts: every frame, each marked as the user's or not).")
    @kube_options
    def stacks(name: str, all_threads: bool, output: str, **where: Any) -> None:
        """Where a running job's ranks are: the Python stack of every process of every replica (torchrun's
        workers too), identical stacks grouped, innermost call first: `ranks 0-2: all_reduce <- step (train.py:41)`.
        With --kube, from the job's pods (not a job annotated torchjob.dev/stacks: "false")."""
        take = runtime(**where).stacks
        taken: core_stacks.Stacks = take(name)
        if output == "json":
            click.echo(json.dumps(core_stacks.as_data(taken, all_threads=True), indent=2))
        else:
            click.echo(core_stacks.text(taken, all_threads))

    return stacks
