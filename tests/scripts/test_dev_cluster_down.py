"""`scripts/dev-cluster.sh down` finishes whatever state it finds: on a state dir that a failed or
killed `up` left (nothing mounted, some components still running, some pid files lost) it stops
every component, removes the state dir and succeeds. Quick: no binaries, no root, no network; the
components are stand-in processes that carry the components' names, which is all `down` checks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scripts.devcluster import SCRIPT, unused_subnet

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The stand-in processes a test starts; whatever `down` left running is killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def stand_in(state: Path, name: str, procs: list[subprocess.Popen[bytes]], pid_file: bool = True,
             ) -> subprocess.Popen[bytes]:
    """A process whose command line is `<dir>/<name> ... --data-dir=<state>/...`, as a component's is,
    in its own session (as start_proc starts them); its pid in <state>/<name>.pid unless told not."""
    proc = subprocess.Popen(
        [str(state.parent / "bin" / name), "-c", "import time; time.sleep(120)", f"--data-dir={state}/{name}"],
        executable=sys.executable, start_new_session=True, stdin=subprocess.DEVNULL)
    procs.append(proc)
    if pid_file:
        (state / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc


def down(state: Path, subnet: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(state), "DEVCLUSTER_POD_SUBNET": subnet,
           "DEVCLUSTER_REAL_NODE": "0"}
    return subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)


def assert_stopped(procs: list[subprocess.Popen[bytes]], out: subprocess.CompletedProcess[str]) -> None:
    """Each has exited (`down` waits for what it stops: no grace period here)."""
    running = [p.args[0] for p in procs if p.poll() is None]  # type: ignore[index]
    assert not running, f"`down` left these running: {running}\n{out.stderr}"


def test_down_after_a_failed_real_node_up_stops_everything_and_removes_the_state(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """What `up --real-node` leaves when it fails before containerd mounted anything: the control
    plane running and the node's state dir with nothing mounted under it (where `down` used to die
    in rn_unmount_all, a grep that matched nothing under pipefail, and stop nothing)."""
    state = tmp_path / "state"
    (state / "realnode" / "cni" / "net.d").mkdir(parents=True)
    for name in CONTROL_PLANE:
        stand_in(state, name, started)
    (state / "kube-apiserver.port").write_text("1\n")  # no API server answers there
    out = down(state, unused_subnet())
    assert_stopped(started, out)
    assert out.returncode == 0, out.stderr
    assert not state.exists(), f"`down` left {sorted(p.name for p in state.rglob('*'))}"


def test_down_stops_a_component_whose_pid_file_is_lost(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """An `up` killed between starting a component and writing its pid file: `down` still finds it
    by the state dir in its command line, and only it (a process of another state dir is left)."""
    state, other = tmp_path / "state", tmp_path / "state-other"
    state.mkdir()
    other.mkdir()
    stand_in(state, "etcd", started)
    stand_in(state, "kube-apiserver", started, pid_file=False)  # its pid file lost
    neighbour = stand_in(other, "kube-apiserver", started, pid_file=False)
    out = down(state, unused_subnet())
    assert_stopped([p for p in started if p is not neighbour], out)
    assert neighbour.poll() is None, "`down` stopped a process of another state dir"
    assert out.returncode == 0, out.stderr
    assert not state.exists()


def test_down_stops_every_real_node_of_an_n_node_cluster(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """`up --real-nodes N` names node i's components containerd-i and kubelet-i and keeps its state in
    realnode-i/: `down` stops them, a stray one of them included (its pid file lost), and removes it all."""
    state = tmp_path / "state"
    for node in ("realnode", "realnode-1", "realnode-2"):
        (state / node / "cni" / "net.d").mkdir(parents=True)
    for name in (*CONTROL_PLANE, "containerd", "kubelet", "containerd-1", "kubelet-1", "containerd-2"):
        stand_in(state, name, started)
    stand_in(state, "kubelet-2", started, pid_file=False)  # an `up` killed as it started node 2's kubelet
    out = down(state, unused_subnet())
    assert_stopped(started, out)
    assert out.returncode == 0, out.stderr
    assert not state.exists(), f"`down` left {sorted(p.name for p in state.rglob('*'))}"
