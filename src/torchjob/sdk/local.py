"""The Python API's side of this machine: one runtime per process and TORCHJOB_HOME, and a console
that suits where Python runs (a terminal, or a notebook)."""

from __future__ import annotations

import sys
from typing import Any

from torchjob.connect import HERE, connect
from torchjob.local.store.store import home
from torchjob.runtime import Runtime, Show

_RUNTIMES: dict[str, Runtime[Any]] = {}


def local_runtime() -> Runtime[Any]:
    """This process's runtime for the current TORCHJOB_HOME: one store (one SQLite connection) per
    process and home. A store opened again would open and close the database file, which releases every
    POSIX lock this process's SQLite holds on it (as closing any descriptor of a file does), and another
    process's write then fails with `disk I/O error`."""
    key = str(home())
    if key not in _RUNTIMES:
        _RUNTIMES[key] = connect(HERE)
    return _RUNTIMES[key]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (ipykernel), where output is a cell's, not a terminal's."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    get = getattr(shell, "get_ipython", None)
    ip = get() if get is not None else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def console_here(quiet: bool) -> Show | None:
    """On a terminal, the runtime's own (as `torchjob run` shows a job); in a notebook, the output as
    plain text in the cell and the progress as an HTML bar that updates in place."""
    if not in_notebook():
        return None
    from torchjob.sdk.notebook import NotebookConsole

    return lambda log: NotebookConsole(log, None if quiet else sys.stdout, sys.stdout)
