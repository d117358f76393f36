"""T9k's `tensorboardSpec` locally: TensorBoard on the job's log directories, when installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from torchjob.api.errors import UserError
from torchjob.api.model import TensorBoardSpec
from torchjob.local.start.launch import LocalOptions
from torchjob.local.store.files import private_file


def log_dirs(spec: TensorBoardSpec, opts: LocalOptions) -> list[str]:
    """Local paths of the log directories: `t9k://pvc/NAME/PATH` through `--pvc NAME=DIR`; other
    URLs (`s3://`, `gs://`) go to TensorBoard as they are."""
    out: list[str] = []
    for item in spec.logDirs:
        pvc = TensorBoardSpec.on_claim(item)
        if pvc is not None:
            claim, rest = pvc
            if claim not in opts.pvcs:
                raise UserError(f"tensorboard log directory {item} is on PVC {claim!r}, which exists only on a cluster",
                                fix=f"pass --pvc {claim}=DIR")
            out.append(str(Path(opts.pvcs[claim]) / rest))
        elif "://" in item:
            out.append(item)
        else:
            out.append(str(Path(opts.cwd) / item))
    return out


def find() -> str | None:
    here = str(Path(sys.executable).parent)
    return shutil.which("tensorboard", path=f"{here}{os.pathsep}{os.environ.get('PATH', '')}")


def start(
    spec: TensorBoardSpec, opts: LocalOptions, port: int, log: Path
) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start TensorBoard (or say why not); returns the process and a line for the user."""
    dirs = log_dirs(spec, opts)
    exe = find()
    if exe is None:
        return None, (f"tensorboardSpec: TensorBoard is not installed (pip install tensorboard); the logs are in "
                      f"{', '.join(dirs)}")
    spec_arg = ",".join(f"{i}:{d}" for i, d in enumerate(dirs))
    with private_file(log) as out:
        proc = subprocess.Popen(
            [exe, "--logdir_spec", spec_arg, "--host", "127.0.0.1", "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )
    return proc, f"TensorBoard at http://127.0.0.1:{port}/ on {', '.join(dirs)}"
