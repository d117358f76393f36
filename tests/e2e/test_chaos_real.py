"""The short chaos run (bench/chaos.py, a fixed seed whose 100 s draw every kind of fault once) on the real node:
the operator as installed (charts/torchjob by real Helm, two replicas as pods, its image built on the
node), a mix of jobs as real pods, and the seeded injector
(SIGKILLed and SIGSTOPped containers, deleted pods, the leader killed, the kube-apiserver, the
kubelet and containerd restarted, a job deleted while it restarts). It fails when an invariant is broken."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import STATE
from tests.kube.conftest import REPO, Operator

pytestmark = pytest.mark.kube

SEED = 5
DURATION = 100
# the faults, up to 240 s for the jobs to end and 120 s for them to go, the operator's image (built
# on the node when its sources changed) and the chart installed
BOUND = DURATION + 780


# What the run restarts on purpose; every other component of the shared cluster must not exit.
HURT = {"kube-apiserver", "kubelet", "containerd"}


# The API server's own clients may exit when the run restarts it under them: seen once, the kube-scheduler
# exited (status 1) two seconds after the restarted API server refused its watches, before its RBAC was
# loaded. That is the injected fault's doing; their keeper starts them again, and cluster_check proves them back.
API_CLIENTS = {"kube-scheduler", "kube-controller-manager"}
RESTART_WINDOW_S = 30


def near_apiserver_restart(exit_line: str, out: str) -> bool:
    """Whether a component's exit (its keeper's line, `2026-11-28T08:01:43 pid ...`) came within
    RESTART_WINDOW_S of an API server restart the run injected (`[chaos 08:01:43] fault restart_apiserver`)."""
    def seconds(clock: str) -> int:
        h, m, s = (int(x) for x in clock.split(":"))
        return h * 3600 + m * 60 + s

    restarts = [seconds(t) for t in re.findall(r"^\[chaos (\d\d:\d\d:\d\d)\] fault restart_apiserver", out, re.M)]
    at = seconds(exit_line[11:19]) if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", exit_line) else None
    return at is not None and any(abs((at - r + 43200) % 86400 - 43200) <= RESTART_WINDOW_S for r in restarts)


def exits(name: str) -> list[str]:
    path = STATE / f"{name}.exits"  # one line per exit, written by the component's keeper
    return path.read_text().splitlines() if path.exists() else []


def last_words(name: str, n: int = 25) -> str:
    """What a component logged just before its keeper saw it exit (the state dir goes with the cluster)."""
    path = STATE / f"{name}.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    ends = [i for i, line in enumerate(lines) if line.startswith("[keeper") and ("exited" in line or "killed" in line)]
    end = ends[-1] if ends else len(lines)
    return f"---- {name}.log before its exit ----\n" + "\n".join(line[:400] for line in lines[max(0, end - n):end + 1])


def cluster_check() -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), "check"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_KWOK": "0"})


@pytest.mark.timeout(BOUND + 240)
def test_a_short_seeded_chaos_run_breaks_no_invariant(node_kubeconfig: str, node_operator: Operator) -> None:
    components = (STATE / "components").read_text().split()
    exits_before = {c: len(exits(c)) for c in components}
    # The suite's own operator (a host process, no leader election) would act beside the chart's
    # two: it stops for the run and starts again after.
    node_operator.stop()
    # Its own session: whatever ends the test, the run and everything it started end with it (it
    # cleans up on SIGTERM) and outlive it in no later test.
    run = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "chaos.py"), "--duration", str(DURATION), "--seed", str(SEED),
         "--kubeconfig", node_kubeconfig, "--state", str(STATE)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    try:
        out, err = run.communicate(timeout=BOUND)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
        node_operator.start()
    print(out[-6000:], err[-3000:])
    # It leaves the shared cluster as it found it: usable (the faults' components are up again, within a
    # minute), and nothing it did not hurt on purpose exited (the kube-scheduler once vanished here).
    for _ in range(12):
        check = cluster_check()
        if check.returncode == 0:
            break
        time.sleep(5)
    assert check.returncode == 0, f"the run left the cluster unusable:\n{check.stderr[-3000:]}"
    unhurt = {c: [e for e in exits(c)[exits_before[c]:] if not (c in API_CLIENTS and near_apiserver_restart(e, out))]
              for c in components if c not in HURT}
    assert not any(unhurt.values()), (f"components the run did not hurt exited during it: {unhurt}\n"
                                      + "\n".join(last_words(c) for c, gone in unhurt.items() if gone))
    assert f"seed {SEED}" in out
    assert "replicas that ever had two live pods at once: 0" in out, out[-4000:]
    assert "pods or Services left after their job went: 0" in out, out[-4000:]
    assert "jobs whose restarts went past backoffLimit: 0" in out, out[-4000:]
    assert run.returncode == 0, out[-4000:] + err[-2000:]
