"""Suite-wide: in CI a cluster suite that skips is a failure, not a quiet skip."""

from __future__ import annotations

import os

import pytest

CLUSTER_SUITES = ("tests/kube/", "tests/e2e/", "tests/incluster/")
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid.startswith(CLUSTER_SUITES):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") == "true" and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nCI: {len(_skipped)} cluster test(s) skipped, which CI counts as failures: "
              + ", ".join(_skipped[:5]) + (" ..." if len(_skipped) > 5 else ""))
