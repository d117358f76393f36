#!/usr/bin/env bash
# What the test command needs (scripts/test.sh calls it; CI too): creates .venv (once) and installs
# torchjob with the test, audit and docs extras (torch, pytest, ruff, mypy, hypothesis, both Kubeflow
# SDKs, Jupyter's kernel, Playwright, pip-audit, MkDocs), and, as root, Debian's chromium for the
# dashboard's browser tests. The quickstart (scripts/quickstart.sh) installs only torchjob and torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { printf 'scripts/setup.sh: %s\n' "$1" >&2; }
if [[ ! -x .venv/bin/python ]]; then
  say "a virtual environment in .venv ($PY -m venv .venv)"
  "$PY" -m venv .venv
fi
say "torchjob and the test, audit and docs tools into .venv (pip install -e '.[test,audit,docs]')"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,audit,docs]"
# The dashboard's browser tests (tests/ui, bench/ui_first_paint.py) drive Debian's chromium through
# Playwright's Python package (its own browser download is not used): installed once, as root, and said.
if ! command -v chromium >/dev/null 2>&1; then
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "Debian's chromium for the dashboard's browser tests (apt-get install chromium, as root)"
    # apt's and debconf's chatter (debconf: delaying package configuration ...) is not shown; a failure is
    apt_log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$apt_log" 2>&1; then
      cat "$apt_log" >&2
      rm -f "$apt_log"
      exit 1
    fi
    rm -f "$apt_log"
  else
    say "no chromium: install Debian's chromium (apt-get install chromium) for tests/ui"
  fi
fi
