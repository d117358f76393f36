#!/usr/bin/env bash
# Builds the Kubeflow training-operator (the peer of bench/operator_scale.py) from the Go module
# proxy, and copies its PyTorchJob CRD next to the binary:
#
#   $TORCHJOB_CACHE/kubeflow/<version>/bin/training-operator.v1
#   $TORCHJOB_CACHE/kubeflow/<version>/kubeflow.org_pytorchjobs.yaml
#
# TORCHJOB_CACHE defaults to ~/.cache/torchjob; KUBEFLOW_VERSION to v1.8.1 (the only version of
# github.com/kubeflow/training-operator that the module proxy lists; its go.mod has no replace
# directives, so a plain `go install module@version` builds it). About 5 min on 2 cores (283 s on a
# busy 2-core machine, module downloads included), once; then the cached binary is found at once.
# The LAST line of stdout is the binary's path; everything else goes to stderr.
set -euo pipefail

VERSION="${KUBEFLOW_VERSION:-v1.8.1}"
MODULE=github.com/kubeflow/training-operator
DIR="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/kubeflow/$VERSION"
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR" # GOBIN must be absolute
BIN="$DIR/bin/training-operator.v1"
CRD="$DIR/kubeflow.org_pytorchjobs.yaml"

log() { printf '[kubeflow] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "ERROR: go not found in PATH"; exit 1; }
if [[ -x "$BIN" && -f "$CRD" ]]; then
    log "already built: $BIN"
    echo "$BIN"
    exit 0
fi
mkdir -p "$DIR/bin"
t0=$SECONDS
log "go install $MODULE/cmd/training-operator.v1@$VERSION"
# Outside any module, so that the repo (not a Go module) and GOFLAGS=-mod=... don't interfere.
(cd "$DIR" && CGO_ENABLED=0 GOBIN="$DIR/bin" GOFLAGS=-mod=mod \
    go install -trimpath -ldflags "-s -w" "$MODULE/cmd/training-operator.v1@$VERSION") >&2
src=$(cd "$DIR" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[[ -f "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" ]] \
    || { log "ERROR: no manifests/base/crds/kubeflow.org_pytorchjobs.yaml in $src"; exit 1; }
cp "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$CRD"
chmod 644 "$CRD"
log "built in $((SECONDS - t0))s: $BIN, CRD $CRD"
echo "$BIN"
