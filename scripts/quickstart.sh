#!/usr/bin/env bash
# The first command of the README: creates .venv (once), installs what the bundled example needs
# (torchjob and torch, nothing else) and runs it: a master and two workers training a small model
# with DDP over gloo on the CPU. Each step says what it does; pip shows its own progress (torch is a
# large download the first time, cached by pip afterwards). The test, lint and docs tools, and the
# browser the dashboard's tests drive, are installed by the test command (scripts/test.sh, through
# scripts/setup.sh), not here: nothing outside .venv is changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { printf '\n==> quickstart [%s/3] %s\n' "$1" "$2" >&2; }
if [[ -x .venv/bin/python ]]; then
  step 1 "a virtual environment: .venv exists, kept"
else
  step 1 "a virtual environment in .venv ($PY -m venv .venv)"
  "$PY" -m venv .venv
fi
step 2 "torchjob and torch into .venv (pip install -e '.[examples]'; on Linux torch brings its CUDA libraries: about 3 GB to download the first time, 5.5 GB installed)"
.venv/bin/python -m pip install --progress-bar on -e ".[examples]"
step 3 "the bundled example: .venv/bin/torchjob run examples/ddp/job.yaml (a master and two workers, DDP over gloo on the CPU)"
exec .venv/bin/torchjob run examples/ddp/job.yaml
