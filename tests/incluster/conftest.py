"""The operator as platform engineers install it: its image (`scripts/dev-cluster.sh operator-image`,
no Docker engine), installed by real Helm from charts/torchjob, two replicas in a namespace that
enforces Pod Security `restricted`, on the dev cluster's real node, whose API server writes an audit
log (DEVCLUSTER_AUDIT=1) from which the operator ServiceAccount's calls are read.

Its own package, and its own cluster: the real-node tests of tests/e2e run an operator on the host for
the whole of their package, which would reconcile these jobs too. Its real node is on a subnet of its
own (real nodes on different subnets coexist), so this suite runs while tests/e2e runs."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, KubeConfig

from tests.e2e.images import STANDINS
from tests.kube.conftest import ENABLED, REPO, ensure_usable

SYSTEM = "torchjob-system"
USERS = "team-a"  # the users' namespace (its jobs run as root here: restricted jobs are tested elsewhere)
RELEASE = "torchjob"
SA_USER = f"system:serviceaccount:{SYSTEM}:torchjob-operator"
STATE = Path(os.environ.get("TORCHJOB_INCLUSTER_DEVCLUSTER_DIR", "/tmp/torchjob-devcluster-incluster"))
SOCK = STATE / "realnode" / "containerd" / "containerd.sock"
# Beside tests/e2e's 10.250.N.0/24 (one per worker), the benches' 10.249, 10.251 and 10.252, the
# dev-cluster tests' 10.253.x (another, for a second copy of this suite beside it: TORCHJOB_INCLUSTER_POD_SUBNET).
SUBNET = os.environ.get("TORCHJOB_INCLUSTER_POD_SUBNET", "10.254.0.0/24")
ENV = {"TORCHJOB_DEVCLUSTER_DIR": str(STATE), "DEVCLUSTER_POD_SUBNET": SUBNET, "DEVCLUSTER_KWOK": "0"}


def devcluster(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENV, "DEVCLUSTER_AUDIT": "1"}
    return subprocess.run(["bash", str(REPO / "scripts" / "dev-cluster.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


class Cluster:
    def __init__(self, kubeconfig: str, helm: str, kubectl: str) -> None:
        self.kubeconfig, self.helm_bin, self.kubectl_bin = kubeconfig, helm, kubectl
        self.client = Client(config=KubeConfig.from_file(kubeconfig), field_manager="torchjob-incluster")
        self.audit = STATE / "audit.log"

    def run(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        # this suite's cluster (the docs' `dev-cluster.sh operator-image` loads the image into its node)
        env = {**os.environ, **ENV, "KUBECONFIG": self.kubeconfig}
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL)

    def helm(self, *args: str, timeout: float = 180) -> str:
        out = self.run(self.helm_bin, *args, timeout=timeout)
        assert out.returncode == 0, f"helm {' '.join(args)}: {out.stdout}{out.stderr}"
        return out.stdout

    def kubectl(self, *args: str) -> str:
        out = self.run(self.kubectl_bin, *args)
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stdout}{out.stderr}"
        return out.stdout

    def audited(self, stages: tuple[str, ...] = ("ResponseComplete",)) -> list[dict[str, Any]]:
        """The operator ServiceAccount's requests, as the API server answered them (`stages`: a watch
        is logged at ResponseStarted when it begins, at ResponseComplete only when it ends)."""
        events = []
        for line in self.audit.read_text().splitlines():
            e = json.loads(line)
            if e.get("user", {}).get("username") == SA_USER and e.get("stage") in stages:
                events.append(e)
        return events


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not ENABLED:
        pytest.skip("the in-cluster tests need the real-node dev cluster: set TORCHJOB_KUBE_TESTS=1 (root)")
    if os.geteuid() != 0:
        pytest.skip("the real node (containerd, kubelet, a bridge) needs root")
    up = devcluster("up", "--real-node")
    if up.returncode != 0:
        raise RuntimeError(f"dev-cluster.sh up --real-node failed:\n{up.stderr[-6000:]}")
    kubeconfig = up.stdout.strip().splitlines()[-1].removeprefix("export KUBECONFIG=").strip()
    started = "already up" not in up.stderr
    try:
        if not (STATE / "audit.log").exists():
            pytest.skip(f"the dev cluster in {STATE} was up already, without an audit log: bring it down "
                        "(dev-cluster.sh down) so that this suite starts it with DEVCLUSTER_AUDIT=1")
        spec = tmp_path_factory.mktemp("images") / "standins.json"
        spec.write_text(json.dumps(STANDINS))
        for step in (("image", str(spec)), ("operator-image",)):
            built = devcluster(*step, timeout=900)
            if built.returncode != 0:
                raise RuntimeError(f"dev-cluster.sh {step[0]} failed:\n{built.stderr[-4000:]}")
        bin_dir = Path(devcluster("bin").stdout.strip())
        helm = devcluster("helm").stdout.strip().splitlines()[-1]
        ensure_usable({**os.environ, **ENV})
        yield Cluster(kubeconfig, helm, str(bin_dir / "kubectl"))
    finally:
        if started:
            print(devcluster("down", timeout=300).stderr[-3000:])
