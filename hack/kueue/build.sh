#!/usr/bin/env bash
# Builds Kueue's manager from the Go module proxy, for the test that runs a real Kueue against
# the operator (tests/kube/test_kueue_real.py, test_kueue_pytorchjob.py), and copies all its CRDs
# and its webhook configurations (config/components/webhook/manifests.yaml) next to the binary:
#
#   $TORCHJOB_CACHE/kueue/<version>/bin/kueue
#   $TORCHJOB_CACHE/kueue/<version>/crds/*.yaml
#   $TORCHJOB_CACHE/kueue/<version>/webhooks.yaml
#
# TORCHJOB_CACHE defaults to ~/.cache/torchjob; KUEUE_VERSION to v0.13.2. The proxy does not list
# sigs.k8s.io/kueue's versions, so `go install module@version` cannot check for deprecation and
# fails; a wrapper module that requires the version builds it. About 5 min on 2 cores (302 s here), once.
# The LAST line of stdout is the binary's path; everything else goes to stderr.
set -euo pipefail

VERSION="${KUEUE_VERSION:-v0.13.2}"
MODULE=sigs.k8s.io/kueue
DIR="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/kueue/$VERSION"
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
BIN="$DIR/bin/kueue"

log() { printf '[kueue] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "ERROR: go not found in PATH"; exit 1; }
if [[ -x "$BIN" && -d "$DIR/crds" && -f "$DIR/webhooks.yaml" ]]; then
    log "already built: $BIN"
    echo "$BIN"
    exit 0
fi
t0=$SECONDS
work="$DIR/wrapper"
mkdir -p "$DIR/bin" "$work"
printf 'module kueuebuild\n\ngo 1.24\n' >"$work/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/kueue"\n' "$MODULE" >"$work/tools.go"
(cd "$work" && GOFLAGS=-mod=mod go get "$MODULE@$VERSION") >&2
if [[ ! -x "$BIN" ]]; then
    log "building $MODULE/cmd/kueue@$VERSION"
    (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" "$MODULE/cmd/kueue") >&2
    mv "$BIN.tmp" "$BIN"
fi
src=$(cd "$work" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$MODULE")
[[ -d "$src/config/components/crd/bases" ]] || { log "ERROR: no CRDs in $src"; exit 1; }
rm -rf "$DIR/crds"; mkdir -p "$DIR/crds"
cp "$src"/config/components/crd/bases/*.yaml "$DIR/crds/"
chmod 644 "$DIR"/crds/*.yaml
cp "$src/config/components/webhook/manifests.yaml" "$DIR/webhooks.yaml"
chmod 644 "$DIR/webhooks.yaml"
log "built in $((SECONDS - t0))s: $BIN"
echo "$BIN"
