"""A failed `scripts/dev-cluster.sh up --real-node` cleans up after itself: whatever ends it (a step
that fails, a SIGTERM) stops the control plane, KWOK and the node's parts, and removes the node's
bridge, iptables rule, mounts and cgroups; its logs stay, and `down` then removes the state dir.
Root, with the node's parts built (scripts/test.sh builds them); a cluster of its own, on a pod
subnet no other real node uses, beside the suite's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.conftest import ENABLED
from tests.scripts.devcluster import SCRIPT, bridge_of, leftovers, processes_of, unused_subnet
from torchjob.local.supervisor import pids

pytestmark = pytest.mark.kube


class Cluster:
    def __init__(self) -> None:
        # A short path: containerd's socket goes under it (a Unix socket's path has 107 bytes at most).
        self.dir = Path(tempfile.mkdtemp(prefix="tj-failed-up-", dir="/tmp"))
        self.state = self.dir / "state"
        self.subnet = unused_subnet()
        self.env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(self.state), "DEVCLUSTER_POD_SUBNET": self.subnet}
        if (Path(sys.prefix) / "pyvenv.cfg").exists():  # the environment the node's containers see
            self.env.setdefault("DEVCLUSTER_PYTHON_ENV", sys.prefix)

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                              env={**self.env, **env}, stdin=subprocess.DEVNULL)

    def remove(self) -> None:
        """Whatever the test's outcome, nothing of this cluster stays (also when the scripts fail)."""
        self.run("down")
        for pid in processes_of(self.state):  # each checked again, through its pidfd, as this cluster's
            pids.send(pid, signal.SIGKILL, lambda p: any(f"{self.state}/" in a for a in pids.cmdline(p)))
        if Path(f"/sys/class/net/{bridge_of(self.subnet)}").exists():
            subprocess.run(["ip", "link", "del", bridge_of(self.subnet)], check=False)
        rule = ["FORWARD", "-s", self.subnet, "!", "-d", self.subnet, "-j", "DROP", "-m", "comment",
                "--comment", "torchjob-devcluster"]
        while subprocess.run(["iptables", "-w", "-D", *rule], capture_output=True, check=False).returncode == 0:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if not ENABLED:
        pytest.skip("needs the dev cluster's binaries: set TORCHJOB_KUBE_TESTS=1")
    if os.geteuid() != 0:
        pytest.skip("the real node (containerd, kubelet, a bridge) needs root")
    c = Cluster()
    yield c
    c.remove()


def test_an_up_whose_step_fails_stops_everything_it_started(cluster: Cluster) -> None:
    """It fails after the control plane, KWOK and the pods' bridge are up, before anything is
    mounted (the state in which `down` used to die and stop nothing)."""
    # A virtualenv made from /usr's Python passes the check before anything starts (`up` says a missing
    # one at once) and is refused once the bridge is up, when containerd's spec would mount /usr.
    venv = cluster.dir / "usr-virtualenv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    up = cluster.run("up", "--real-node", DEVCLUSTER_PYTHON_ENV=str(venv))
    assert up.returncode != 0
    assert leftovers(cluster.state, cluster.subnet) == [], up.stderr
    assert "mounts the virtualenv's interpreter (/usr)" in up.stderr, up.stderr
    assert "started kwok" in up.stderr and f"bridge {bridge_of(cluster.subnet)}" in up.stderr, up.stderr
    assert (cluster.state / "kube-apiserver.log").exists(), "the logs of a failed `up` stay"
    down = cluster.run("down")
    assert down.returncode == 0, down.stderr
    assert not cluster.state.exists()
    # no virtualenv at all: said before anything starts (issue 48)
    up = cluster.run("up", "--real-node", DEVCLUSTER_PYTHON_ENV=str(cluster.dir / "no-virtualenv"))
    assert up.returncode != 0 and "no virtualenv at" in up.stderr, up.stderr
    assert "started" not in up.stderr and not cluster.state.exists(), up.stderr


def test_an_up_stopped_by_sigterm_stops_everything_it_started(cluster: Cluster) -> None:
    """SIGTERM once containerd runs (its mounts made), the way a test runner or Ctrl-C ends it."""
    log = cluster.dir / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(["bash", str(SCRIPT), "up", "--real-node"], stdout=out, stderr=out,
                              stdin=subprocess.DEVNULL, env=cluster.env)
    deadline = time.monotonic() + 300
    while not (cluster.state / "containerd.pid").exists():
        assert up.poll() is None, f"`up` ended before containerd started:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"containerd did not start:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    up.send_signal(signal.SIGTERM)
    up.wait(120)
    assert leftovers(cluster.state, cluster.subnet) == [], log.read_text()[-3000:]
    assert up.returncode == 128 + signal.SIGTERM, log.read_text()[-3000:]  # (the trap's exit: it ran)
    down = cluster.run("down")
    assert down.returncode == 0, down.stderr
    assert not cluster.state.exists()
