"""The short chaos run (bench/chaos.py, a fixed seed whose 100 s draw every kind of fault once) on the real node:
two operator processes with --leader-elect, a mix of jobs as real pods, and the seeded injector
(SIGKILLed and SIGSTOPped containers, deleted pods, the leader killed, the kube-apiserver, the
kubelet and containerd restarted, a job deleted while it restarts). It fails when an invariant is broken."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import STATE
from tests.kube.conftest import REPO, Operator

pytestmark = pytest.mark.kube

SEED = 5
DURATION = 100


def test_a_short_seeded_chaos_run_breaks_no_invariant(node_kubeconfig: str, node_operator: Operator) -> None:
    # The suite's own operator (no leader election) would act beside the run's two: it stops for
    # the run and starts again after.
    node_operator.stop()
    try:
        run = subprocess.run(
            [sys.executable, str(REPO / "bench" / "chaos.py"), "--duration", str(DURATION), "--seed", str(SEED),
             "--kubeconfig", node_kubeconfig, "--state", str(STATE)],
            capture_output=True, text=True, timeout=DURATION + 480, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    finally:
        node_operator.start()
    print(run.stdout[-6000:], run.stderr[-3000:])
    assert f"seed {SEED}" in run.stdout
    assert "replicas that ever had two live pods at once: 0" in run.stdout, run.stdout[-4000:]
    assert "pods or Services left after their job went: 0" in run.stdout, run.stdout[-4000:]
    assert "jobs whose restarts went past backoffLimit: 0" in run.stdout, run.stdout[-4000:]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
