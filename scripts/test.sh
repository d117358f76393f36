#!/usr/bin/env bash
# Sets everything up, then runs the linters and the whole test suite (real processes, real
# torch.distributed over loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Kubernetes tests' binaries (built from the Go module proxy once per machine, then cached)
# are built before the tests, not inside one under its timeout.
if [[ "${CI:-}" == true || "${TORCHJOB_KUBE_TESTS:-}" == 1 ]]; then
    bash scripts/dev-cluster.sh build >&2
    bash hack/kueue/build.sh >/dev/null
    bash hack/volcano/build.sh >/dev/null
fi
.venv/bin/ruff check src tests bench
.venv/bin/mypy
# Tests keep their state in a throwaway TORCHJOB_HOME (see tests/conftest.py).
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
