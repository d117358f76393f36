#!/usr/bin/env bash
# Sets everything up and runs the bundled example: a master and two workers training a small
# model with DDP over gloo on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/torchjob run examples/ddp/job.yaml
