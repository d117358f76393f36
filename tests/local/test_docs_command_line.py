"""docs/guide/command-line.md, run: every command of the page, as a shell runs it, with the real
`torchjob` command (this tree's), real torchrun and gloo; the shown errors are the real output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docs.blocks import tested as blocks
from tests.docs.console import sessions as console
from tests.docs.console import shell_env
from tests.docs.upstream import torch_aborted
from tests.local.conftest import REPO

pytestmark = pytest.mark.e2e
PAGE = "guide/command-line.md"


def shell(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory with the docs' train.py (the bundled example) and mypkg, and a `torchjob` on PATH."""
    work = tmp_path / "work"
    (work / "mypkg").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "ddp" / "train.py", work / "train.py")
    shutil.copy(REPO / "examples" / "ddp" / "train.py", work / "mypkg" / "train.py")
    (work / "mypkg" / "__init__.py").write_text("")
    env = shell_env(tmp_path)
    return work, env


def test_the_run_examples_run(tmp_path: Path) -> None:
    work, env = shell(tmp_path)
    ran = 0
    for block in blocks(PAGE, "tests/local/test_docs_command_line.py::test_the_run_examples_run"):
        for cmd, _ in console(block):
            proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=300)
            if proc.returncode != 0 and torch_aborted(proc.stdout + proc.stderr):
                print(f"torch aborted a rank of {cmd!r}; once more (tests/docs/upstream.py):\n{proc.stdout[-2000:]}")
                proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                                      timeout=300)
            assert proc.returncode == 0, (cmd, proc.stdout, proc.stderr)
            ran += 1
    assert ran == 8
    # the detached one, to its end
    wait = subprocess.run(["bash", "-c", "for i in $(seq 300); do torchjob describe nightly -o json | "
                                         "grep -q '\"Succeeded\"' && exit 0; sleep 0.5; done; exit 1"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=200)
    assert wait.returncode == 0, subprocess.run(["bash", "-c", "torchjob describe nightly"], cwd=work, env=env,
                                                capture_output=True, text=True).stdout


def test_the_mistakes_are_shown_as_the_page_says(tmp_path: Path) -> None:
    work, env = shell(tmp_path)
    (block,) = blocks(PAGE, "tests/local/test_docs_command_line.py::test_the_mistakes_are_shown_as_the_page_says")
    for cmd, shown in console(block):
        proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (cmd, proc.stderr)
        assert (proc.stdout + proc.stderr).rstrip("\n") == shown, cmd
    assert not (tmp_path / "home" / "jobs").exists() or os.listdir(tmp_path / "home" / "jobs") == []
