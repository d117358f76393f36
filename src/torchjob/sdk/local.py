"""The Python API's side of the local runtime: where a function's or a script's files go on this
machine, reading a job's output as text, and running a job in the foreground with a console that suits
where Python runs (a terminal, or a notebook)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchjob.api.model import TorchJob
from torchjob.local.files import private_dir
from torchjob.local.local_runtime import LocalRuntime
from torchjob.local.store import home
from torchjob.runtime import JobView, no_output

_RUNTIMES: dict[str, LocalRuntime] = {}


def local_runtime() -> LocalRuntime:
    """This process's local runtime for the current TORCHJOB_HOME: one store (one SQLite connection) per
    process and home. A store opened again would open and close the database file, which releases every
    POSIX lock this process's SQLite holds on it (as closing any descriptor of a file does), and another
    process's write then fails with `disk I/O error`."""
    key = str(home())
    if key not in _RUNTIMES:
        _RUNTIMES[key] = LocalRuntime()
    return _RUNTIMES[key]


def code_dir(name: str) -> Path:
    """Where a local function job's files are written: TORCHJOB_HOME/code/NAME (written again on each run)."""
    return home() / "code" / name


def write_code(name: str, files: dict[str, bytes]) -> Path:
    d = code_dir(name)
    shutil.rmtree(d, ignore_errors=True)
    private_dir(home() / "code")
    private_dir(d)
    for rel, data in files.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return d


def in_notebook() -> bool:
    """True inside a Jupyter kernel (ipykernel), where output is a cell's, not a terminal's."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    get = getattr(shell, "get_ipython", None)
    ip = get() if get is not None else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def run_local(job: TorchJob, quiet: bool) -> JobView:
    """Run in the foreground: on a terminal as `torchjob run` does; in a notebook, the output as plain
    text in the cell and the progress as an HTML bar that updates in place."""
    rt = local_runtime()
    plan = rt.dryrun(job)
    if not in_notebook():
        return rt.run(plan, quiet)
    from torchjob.sdk.notebook import NotebookConsole

    return rt.run(plan, quiet, console=lambda log: NotebookConsole(log, None if quiet else sys.stdout, sys.stdout))


def read_logs(rt: Any, name: str, replica: str | None, follow: bool, say: Callable[[str], None]) -> str:
    """A local job's output as text: the combined log, or one replica's latest attempt."""
    view: JobView = rt.describe(name)
    path: Path | None = Path(view.directory) / "job.log" if view.directory else None
    if replica is not None:
        mine = [a for a in view.attempts if a.replica == replica]
        if not mine:
            raise no_output(name, replica, [a.replica for a in view.attempts])
        log = max(mine, key=lambda a: a.attempt).log
        path = Path(log) if log else None
    if path is None or not path.exists():
        raise no_output(name, None, [])
    text, pending = "", ""
    with path.open("rb") as f:
        while True:
            chunk = f.read().decode("utf-8", "replace")
            text += chunk
            pending += chunk
            *done, pending = pending.split("\n")
            for line in done:
                say(line)
            if not follow or (rt.describe(name).status.finished and not chunk):
                break
            if not chunk:
                time.sleep(0.2)
    if pending:
        say(pending)
    return text
