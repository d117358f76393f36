#!/usr/bin/env bash
# Runs the benchmarks (installs torchx, a peer, into .venv first). Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pip install -q -e ".[bench]"
exec .venv/bin/python bench/launch.py "$@"
