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
# The dashboard's browser tests (tests/ui, bench/ui_first_paint.py) drive Debian's chromium through
# Playwright's Python package (its own browser download is not used): installed once, as root.
if ! command -v chromium >/dev/null 2>&1; then
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "scripts/setup.sh: no chromium: install Debian's chromium (apt-get install chromium) for tests/ui" >&2
  fi
fi
