#!/usr/bin/env bash
# Writes constraints/operator.txt: every package the operator image installs, pinned (pip freeze of
# torchjob's runtime dependencies in a fresh venv, no extras), and the build backend pip uses to
# build torchjob there. The Dockerfile installs with it (PIP_CONSTRAINT), so two builds of one
# commit install the same versions. Run it after changing [project].dependencies in pyproject.toml;
# tests/test_dependencies.py checks the file covers them. PYTHON: the image's Python (3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q .
"$tmp/venv/bin/python" -m pip freeze --exclude torchjob --all | grep -v -E '^(pip|setuptools|wheel)==' > "$tmp/runtime.txt"
"$tmp/venv/bin/python" -m pip install -q hatchling
"$tmp/venv/bin/python" -m pip freeze --exclude torchjob --all | grep -v -E '^(pip|setuptools|wheel)==' > "$tmp/all.txt"
{
  echo "# The operator image's packages, pinned: written by scripts/lock-operator.sh ($("$PY" --version)); do not edit."
  echo "# torchjob's runtime dependencies:"
  cat "$tmp/runtime.txt"
  echo "# what builds torchjob (the build backend, in pip's isolated build environment):"
  grep -v -x -F -f "$tmp/runtime.txt" "$tmp/all.txt" || true
} > constraints/operator.txt
echo "wrote constraints/operator.txt ($(grep -c '==' constraints/operator.txt) pins)"
