#!/usr/bin/env bash
# Creates .venv (once) and installs torchjob with what the examples and tests need (torch from
# PyPI: a large download the first time, cached by pip afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,audit,docs]"
