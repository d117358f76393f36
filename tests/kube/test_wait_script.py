"""The workers' wait-for-master script, run by real shells (`sh` is dash here, as in Debian images)
with only the tools an image might have: `nc`, or only bash's `/dev/tcp` (Volcano's plugin falls back
to it too), or neither (a clear failure naming both). Pure: no cluster."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs import make_job
from torchjob.api.defaults import INIT_IMAGE
from torchjob.api.model import WaitForMaster
from torchjob.core.shape.topology import Placement
from torchjob.kube.objects.workload.init_container import wait_for_master

SH = shutil.which("sh")
pytestmark = pytest.mark.skipif(SH is None or shutil.which("bash") is None, reason="needs sh and bash")


def script(port: int, timeout: int | None = 5) -> str:
    job = make_job("w", workers=1)
    job.spec.waitForMaster = WaitForMaster(timeoutSeconds=timeout)
    init = wait_for_master(job, Placement("127.0.0.1", port, "127.0.0.1", port), INIT_IMAGE)
    assert init["command"][:2] == ["sh", "-c"]
    return str(init["command"][2])


def run(text: str, tmp_path: Path, tools: list[str]) -> subprocess.CompletedProcess[str]:
    """`sh -c text` with a PATH holding only `date`, `sleep` and `tools` (an image's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("date", "sleep", *tools):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    assert SH is not None
    return subprocess.run([SH, "-c", text], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30)


def fake_nc(tmp_path: Path) -> Path:
    """An `nc` that records how it was called and says the port is open."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    nc = tmp_path / "bin" / "nc"
    nc.write_text(f'#!{SH}\necho "$@" >> {tmp_path / "nc.log"}\n')
    nc.chmod(0o755)
    return tmp_path / "nc.log"


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_script_is_posix_sh() -> None:
    assert SH is not None
    for timeout in (None, 5):
        assert subprocess.run([SH, "-n", "-c", script(1234, timeout)], capture_output=True).returncode == 0


def test_an_image_with_nc_probes_with_nc(tmp_path: Path) -> None:
    log = fake_nc(tmp_path)
    done = run(script(29500), tmp_path, [])
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == ["-z -w 2 127.0.0.1 29500"]


def test_an_image_with_only_bash_probes_with_dev_tcp(tmp_path: Path, listening: int) -> None:
    done = run(script(listening), tmp_path, ["bash"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_with_only_bash_a_closed_port_is_waited_for_until_the_limit(tmp_path: Path) -> None:
    port = closed_port()
    done = run(script(port, timeout=2), tmp_path, ["bash"])
    assert done.returncode == 1
    assert f"waiting for 127.0.0.1 {port}" in done.stdout
    assert f"gave up waiting for 127.0.0.1 {port} after 2s" in done.stdout


def test_an_image_with_neither_says_which_tools_are_missing(tmp_path: Path) -> None:
    done = run(script(29500, timeout=None), tmp_path, [])
    assert done.returncode == 1
    assert "this image has neither nc nor bash (for /dev/tcp), so it cannot probe port 29500 of 127.0.0.1" \
        in done.stdout
    assert "spec.waitForMaster.image" in done.stdout


@pytest.mark.parametrize("evil", ["$(touch {d}/a)", "$(touch {d}/a)'\"`touch {d}/b`\";touch {d}/c #"])
def test_the_host_is_data_never_code(tmp_path: Path, evil: str) -> None:
    """Whatever the master's address holds (the operator's path skips validate(); the CRD forces a DNS
    name today), the script passes it to the probe as one word and never runs any of it."""
    log = fake_nc(tmp_path)
    evil = evil.format(d=tmp_path)
    job = make_job("w", workers=1)
    job.spec.waitForMaster = WaitForMaster(timeoutSeconds=5)
    init = wait_for_master(job, Placement(evil, 29500, evil, 29500), INIT_IMAGE)
    done = run(str(init["command"][2]), tmp_path, ["touch"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any((tmp_path / name).exists() for name in "abc")
    assert log.read_text().splitlines() == [f"-z -w 2 {evil} 29500"]
