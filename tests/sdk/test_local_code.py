"""A function job's files on this machine (TORCHJOB_HOME/code/NAME) belong to the run of that name:
a second job of a running job's name is refused before it writes a file there (issue 30, item 9).
Real processes: the first job's supervisor and replica run while the second is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import torchjob
from torchjob.api.errors import UserError

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHJOB_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def sleeps(seconds: int) -> int:
    import time

    time.sleep(seconds)
    return seconds


def other() -> str:
    return "the second job's code"


def files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_job_of_a_running_jobs_name_is_refused_and_its_code_left_alone(home: Path) -> None:
    handle = torchjob.Job.from_function(sleeps, args=(60,), name="same").submit()
    try:
        deadline = time.monotonic() + 60
        while handle.describe().status.state != "Running" and time.monotonic() < deadline:
            time.sleep(0.2)
        code = home / "code" / "same"
        before = files(code)
        assert before and any(b"sleeps" in v for v in before.values())
        with pytest.raises(UserError, match="same") as e:
            torchjob.Job.from_function(other, name="same").submit()
        assert e.value.fix and "delete" in e.value.fix
        with pytest.raises(UserError, match="same"):
            torchjob.Job.from_function(other, name="same").run()
        assert files(code) == before  # not one file of the running job's replaced
        assert handle.describe().status.state == "Running"
    finally:
        handle.delete()
