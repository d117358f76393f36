"""Suite-wide: in CI a cluster suite that skips is a failure, not a quiet skip; and, when the suite
runs on several workers (pytest-xdist: scripts/test.sh), the tests that share a
cluster run on one worker, in their order, while the rest spread over the others."""

from __future__ import annotations

import os
from typing import Any

import pytest

CLUSTER_SUITES = ("tests/kube/", "tests/e2e/", "tests/incluster/")
# Suites that share one cluster, by the group whose tests one worker runs in collection order:
# tests/kube shares the session's control plane; tests/e2e and tests/incluster share the real node
# (one per machine: tests/incluster brings it up again after tests/e2e brought it down).
SHARED_CLUSTER = {"tests/kube/": "control-plane", "tests/e2e/": "real-node", "tests/incluster/": "real-node"}
_skipped: list[str] = []


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scope, a suite that shares a cluster being one scope (every other test
    its own). Not `--dist loadgroup` with marks: pytest 9.2 made the node id it appends to read-only."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class SharedClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return next((group for prefix, group in SHARED_CLUSTER.items() if nodeid.startswith(prefix)), nodeid)

    return SharedClusterScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid.startswith(CLUSTER_SUITES):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") == "true" and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {len(_skipped)} cluster test(s) skipped, which CI counts as failures: "
              + ", ".join(_skipped[:5]) + (" ..." if len(_skipped) > 5 else ""))
