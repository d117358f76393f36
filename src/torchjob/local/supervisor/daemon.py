"""Entry point of a detached supervisor (`torchjob submit`): runs one stored job to its end."""

from __future__ import annotations

import sys

from torchjob.api.status import ConditionType
from torchjob.console import Console
from torchjob.local.store.files import private_file
from torchjob.local.store.store import Store
from torchjob.local.supervisor.supervisor import Supervisor


def main(argv: list[str]) -> int:
    name = argv[0]
    store = Store()
    rec = store.get(name)
    if rec is None:
        print(f"torchjob: no job named {name!r}", file=sys.stderr)
        return 2
    private_file(rec.dir / "job.log").close()  # the console appends to it, keeping its mode
    console = Console(rec.dir / "job.log", out=None, err=None)
    status = Supervisor(store, name, console).run()
    console.close()
    return 0 if status.is_true(ConditionType.SUCCEEDED) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
