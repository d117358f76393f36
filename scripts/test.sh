#!/usr/bin/env bash
# Sets everything up, then runs the linters and the whole test suite (real processes, real
# torch.distributed over loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
# Tests keep their state in a throwaway TORCHJOB_HOME (see tests/conftest.py).
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
