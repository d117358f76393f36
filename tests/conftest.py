"""Suite-wide: in CI a cluster suite that skips is a failure, not a quiet skip; and, when the suite
runs on several workers (pytest-xdist: scripts/test.sh), the tests that share a
cluster run on one worker, in their order, while the rest spread over the others."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

CLUSTER_SUITES = ("tests/kube/", "tests/e2e/", "tests/incluster/")
# Suites that share one cluster, by the group whose tests one worker runs in order: tests/kube shares
# the session's control plane; tests/incluster has a real node of its own; tests/e2e is four groups:
# three each on a real node of its worker's own (pytest_configure), balanced by what they took here (11-15
# min each in a clean-clone run), and one on two real nodes of its own.
SHARED_CLUSTER = {
    "tests/kube/": "control-plane",
    # not a cluster: a wheel built and installed into a fresh venv once, by its module's fixtures, on one worker
    "tests/release/test_dist.py": "release-dist",
    # the fresh-clone quickstart takes its wheels from the same wheelhouse, which a first run downloads
    # (scripts/release.sh wheelhouse: two at once would each remove the other's half-made directory)
    "tests/docs/test_quickstart.py": "release-dist",
    # a real node and a registry of its own (10.247.0.0/24): a scope beside the in-cluster suite's
    "tests/incluster/test_registry.py": "registry",
    "tests/incluster/": "in-cluster",
    **{f"tests/e2e/{m}.py": "real-node-a" for m in ("test_scenarios_real", "test_chaos_real", "test_node_lost_real",
                                                    "test_kubeflow_real")},
    **{f"tests/e2e/{m}.py": "real-node-c" for m in ("test_seeds_real", "test_inplace_real", "test_trainjob_real",
                                                    "test_quick_real", "test_restricted_real")},
    # two real nodes of its own (scripts/dev-cluster.sh up --real-nodes 2, on 10.246.2n and 2n+1)
    "tests/e2e/test_two_nodes_real.py": "real-nodes-two",
    "tests/e2e/": "real-node-b",
}
_skipped: list[str] = []


# Hypothesis draws new inputs on every run where a developer runs the suite (a fuzz finds what it finds);
# in CI it draws the same ones each run (derandomize): a clean clone's verdict does not depend on the draw.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker: its own real node for tests/e2e (a state dir and a pod subnet of its own:
    real nodes on different subnets coexist), unless one was named (a cluster kept up by hand)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and "TORCHJOB_E2E_DEVCLUSTER_DIR" not in os.environ:
        n = int(worker.removeprefix("gw"))
        os.environ["TORCHJOB_E2E_DEVCLUSTER_DIR"] = f"/tmp/torchjob-devcluster-e2e-{n}"
        os.environ["DEVCLUSTER_POD_SUBNET"] = f"10.250.{n}.0/24"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scope, a suite that shares a cluster being one scope (every other test
    its own). Not `--dist loadgroup` with marks: pytest 9.2 made the node id it appends to read-only."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class SharedClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = next((group for prefix, group in SHARED_CLUSTER.items() if nodeid.startswith(prefix)), nodeid)
            # a real node named by hand is one cluster: its suite on one worker
            return "real-node-a" if group in ("real-node-b", "real-node-c") and named_node else group

    named_node = "TORCHJOB_E2E_DEVCLUSTER_DIR" in os.environ

    return SharedClusterScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid.startswith(CLUSTER_SUITES):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") == "true" and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {len(_skipped)} cluster test(s) skipped, which CI counts as failures: "
              + ", ".join(_skipped[:5]) + (" ..." if len(_skipped) > 5 else ""))
