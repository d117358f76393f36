#!/usr/bin/env bash
# Sets everything up, then runs the linters and the whole test suite: real processes and real
# torch.distributed over loopback, a real control plane, and real pods on a real node (root).
#
#   bash scripts/test.sh [PYTEST ARGS]   everything (what CI runs); builds what it needs first
#   bash scripts/test.sh --quick [...]   the inner loop: no cluster suites (tests/kube, tests/e2e, tests/incluster)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == --quick ]]; then quick=1; shift; fi
bash scripts/setup.sh
if ((quick)); then
    export TORCHJOB_KUBE_TESTS=0
    set -- --ignore=tests/kube --ignore=tests/e2e --ignore=tests/incluster "$@"
else
    export TORCHJOB_KUBE_TESTS=1
    # The cluster suites' binaries (built from the Go module proxy once per machine, then cached)
    # are built before the tests, not inside one under its timeout.
    if [[ $EUID -eq 0 ]]; then
        # (the registry too: tests/incluster/test_registry.py walks a release through one)
        DEVCLUSTER_REAL_NODE=1 DEVCLUSTER_REGISTRY=1 bash scripts/dev-cluster.sh build >&2
    else
        echo "scripts/test.sh: not root: the real-node tests (tests/e2e) will be skipped" >&2
        bash scripts/dev-cluster.sh build >&2
    fi
    bash hack/kueue/build.sh >/dev/null
    bash hack/volcano/build.sh >/dev/null
    # Kubeflow's training-operator and its own PyTorchJob CRD (tests/kube/test_kubeflow_crd.py
    # compares the served CRD with it; bench/operator_scale.py runs the operator).
    bash hack/kubeflow/build.sh >/dev/null
fi
# actionlint, which tests/release/test_workflows.py lints the workflows with (built once, cached)
bash hack/actionlint/build.sh >/dev/null
.venv/bin/ruff check src tests bench
.venv/bin/mypy
# The documentation site, strictly: a broken link, anchor, nav entry or API reference fails here
# (the docs' commands and examples are run by tests/docs).
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
# Known vulnerabilities in the installed set, where an advisory source answers (it says plainly when
# none does); the declared floors are a test either way (tests/test_dependencies.py).
.venv/bin/python scripts/audit.py
# Tests keep their state in a throwaway TORCHJOB_HOME (see tests/local/conftest.py); -rs says why
# a test was skipped (in CI a skipped cluster test fails the run: tests/conftest.py). Most tests
# wait on processes, an API server or pods rather than compute, so they run on several workers;
# the tests that share a cluster run on one worker, in order (tests/conftest.py).
.venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=25 -n "${TORCHJOB_TEST_WORKERS:-4}" "$@"
