"""Fixtures for the local runtime's end-to-end tests: real processes, a throwaway TORCHJOB_HOME,
the `torchjob` command run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "programs"


class Torchjob:
    """Runs `python -m torchjob ...` with the test's TORCHJOB_HOME, from the repository root."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "TORCHJOB_HOME": str(home)}

    def __call__(self, *args: str, timeout: float = 180, check: bool = False,
                 cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "torchjob", *args], cwd=cwd, env=self.env, text=True,
            capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"torchjob {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "torchjob", *args], cwd=REPO, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def describe(self, name: str) -> dict[str, Any]:
        out = self("describe", name, "-o", "json", check=True).stdout
        data: dict[str, Any] = json.loads(out)
        return data

    def wait_for(self, name: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        end = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < end:
            proc = self("describe", name, "-o", "json")
            if proc.returncode == 0:
                last = json.loads(proc.stdout)
                if pred(last):
                    return last
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting on {name}: {json.dumps(last.get('status'), indent=1)}")


@pytest.fixture
def torchjob(tmp_path: Path) -> Iterator[Torchjob]:
    home = tmp_path / "home"
    home.mkdir()
    yield Torchjob(home)


def write_job(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def state_of(desc: dict[str, Any]) -> str:
    conds = {c["type"]: c for c in desc["status"].get("conditions", []) if c["status"] == "True"}
    for ctype in ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created"):
        if ctype in conds:
            return ctype
    return "Pending"


def job_processes(uid: str) -> list[int]:
    """Live processes (not zombies) that carry the job's marker: must be none after it ends."""
    needle = b"\0TORCHJOB_JOB_UID=" + uid.encode() + b"\0"
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = b"\0" + Path(f"/proc/{p}/environ").read_bytes()
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        if needle in env and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(p))
    return found
