"""A worker's warm spare begins its attempt once the master's port accepts (local/spares/launcher): torch's store
client retries a refused connect only after 0.25-0.75 s, which a gang's spares, started together, paid at each
restart (issue 46). The launcher as a real process, handed its attempt as its supervisor or entry point hands it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[2] / "src" / "torchjob" / "local" / "spares" / "launcher" / \
    "torchjob_spare.py"
SCRIPT = "import os, time\nopen(os.environ['OUT'], 'w').write(repr(time.time()))\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attempt(tmp_path: Path, rank: str, port: int, listen_after_s: float | None) -> tuple[float, float | None]:
    """(when the script began, when the master's port began to listen) for a spare of RANK `rank`."""
    script, out = tmp_path / "script.py", tmp_path / f"began-{rank}"
    script.write_text(SCRIPT)
    ours, theirs = socket.socketpair()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHJOB_", "PYTEST"))}
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), str(script)], pass_fds=(theirs.fileno(),),
                            env={**env, "TORCHJOB_SPARE_FD": str(theirs.fileno()), "TORCHJOB_SPARE_WARM": ""})
    theirs.close()
    listener, listening = None, None
    try:
        assert ours.recv(64).startswith(b"warm"), "the spare did not say it was warm"
        plan = {**env, "OUT": str(out), "RANK": rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        ours.sendall(json.dumps({"env": plan}).encode())
        ours.shutdown(socket.SHUT_WR)
        if listen_after_s is not None:
            time.sleep(listen_after_s)
            listener = socket.create_server(("127.0.0.1", port))
            listening = time.time()
        assert proc.wait(timeout=30) == 0
        return float(out.read_text()), listening
    finally:
        ours.close()
        if listener is not None:
            listener.close()
        if proc.poll() is None:
            proc.kill()


def test_a_workers_attempt_begins_once_its_masters_port_listens(tmp_path: Path) -> None:
    began, listening = attempt(tmp_path, "1", free_port(), listen_after_s=0.5)
    assert listening is not None and began >= listening, (began, listening)


@pytest.mark.parametrize("rank", ["0", "1"])
def test_the_master_begins_at_once_and_a_worker_without_a_master_after_at_most_a_second(tmp_path: Path,
                                                                                         rank: str) -> None:
    sent = time.time()
    began, _ = attempt(tmp_path, rank, free_port(), listen_after_s=None)
    assert began - sent < (0.9 if rank == "0" else 5.0) and (rank == "0" or began - sent >= 0.95), began - sent
