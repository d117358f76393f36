"""docs/guide/python.md, run: its blocks, in page order, as one script (a function's source must be in a
file to be shipped, as it is in a user's), with real processes, torchrun and gloo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import tested as blocks
from tests.docs.upstream import torch_aborted
from tests.local.conftest import REPO

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(1200)  # a dozen jobs, one after another, on a shared machine
def test_the_page_runs(tmp_path: Path) -> None:
    code = "\n\n".join(blocks("guide/python.md", "tests/sdk/test_docs_python.py::test_the_page_runs", "python"))
    (tmp_path / "page.py").write_text(code)
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    shutil.copy(REPO / "examples" / "ddp" / "train.py", tmp_path / "train.py")
    shutil.copy(REPO / "examples" / "ddp" / "train.py", tmp_path / "mypkg" / "train.py")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TORCHJOB_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "page.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1100)
    if proc.returncode != 0 and torch_aborted(proc.stdout + proc.stderr):
        print(f"torch aborted a rank; the page once more (tests/docs/upstream.py):\n{proc.stdout[-2000:]}")
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
        proc = subprocess.run([sys.executable, "page.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=1100)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "kind: TorchJob" in proc.stdout
    # every process's line, tagged with its replica and its rank; the value's own line not shown
    assert "[master-0] [rank0]: rank 0 of 4: w = 3.0" in proc.stdout, proc.stdout[-3000:]
    assert "[worker-0] [rank3]: rank 3 of 4: w = 3.0" in proc.stdout and "@@torchjob" not in proc.stdout
