"""docs/explanation/faults.md's local recovery command, run as the page writes it (one trial per
runtime instead of three): torchjob, torchjob with warm spares and torchrun each recover from a
worker's SIGKILL, and the table with its ratios is printed."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.local.conftest import REPO

pytestmark = pytest.mark.e2e
PAGE = REPO / "docs" / "explanation" / "faults.md"


def page_command() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(r"<!-- tested by: tests/local/test_recovery_bench.py::test_the_pages_recovery_command_runs -->\n"
                  r"```console\n\$ (?P<cmd>[^\n]+)\n", text)
    assert m, "the page's local recovery command"
    return shlex.split(m["cmd"])


def test_the_pages_recovery_command_runs() -> None:
    cmd = page_command()
    assert cmd[:2] == ["python", "bench/recovery.py"] and "--local" in cmd
    cmd = [sys.executable, *cmd[1:]]
    cmd[cmd.index("--repeat") + 1] = "1"
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {line.split()[0]: line for line in run.stdout.splitlines()
            if line.startswith(("torchjob ", "torchrun ", "torchjob-spares "))}
    assert set(rows) == {"torchjob", "torchrun", "torchjob-spares"}, run.stdout
    assert all("exit 0" in row for row in rows.values()), run.stdout  # each trained to the end
    assert re.search(r"torchjob / torchrun \(ddp\): [\d.]+x", run.stdout), run.stdout
    assert re.search(r"torchjob-spares / torchrun \(ddp\): [\d.]+x \(goal <= 0.5x\)", run.stdout), run.stdout
    # the output the page shows is this command's: the same table, line for line in shape
    shown = re.search(r"```text\n(?P<out>Recovery: from.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert shown, "the page's output block"
    printed = run.stdout[run.stdout.index("Recovery: from"):]

    def shape(text: str) -> list[str]:
        return [re.sub(r"[\d.]+", "N", line.split("  ")[0]) for line in text.strip().splitlines()]

    assert shape(shown["out"]) == shape(printed), (shown["out"], printed)
