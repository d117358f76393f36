#!/usr/bin/env bash
# Builds Volcano's scheduler (vc-scheduler) from the Go module proxy, for the test that runs the
# real Volcano scheduler against the operator (tests/kube/test_volcano_real.py), and copies the
# CRDs it watches next to the binary:
#
#   $TORCHJOB_CACHE/volcano/<version>/bin/vc-scheduler
#   $TORCHJOB_CACHE/volcano/<version>/crds/*.yaml
#
# TORCHJOB_CACHE defaults to ~/.cache/torchjob. The version is the one hack/volcano/go.mod requires
# (the wrapper module is committed, not generated: volcano.sh/volcano's go.mod replaces the k8s.io
# staging modules, so the wrapper has to carry that replace block, and go.sum pins it all).
# Once per machine: 581 s here (2 cores shared with two other Go builds), the binary ~55 MB.
# The LAST line of stdout is the binary's path; everything else goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
MODULE=volcano.sh/volcano

log() { printf '[volcano] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "ERROR: go not found in PATH"; exit 1; }
VERSION=$(cd "$HERE" && go list -m -f '{{.Version}}' "$MODULE")
DIR="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/volcano/$VERSION"
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
BIN="$DIR/bin/vc-scheduler"
if [[ -x "$BIN" && -d "$DIR/crds" ]]; then
    log "already built: $BIN"
    echo "$BIN"
    exit 0
fi
t0=$SECONDS
mkdir -p "$DIR/bin"
log "building $MODULE/cmd/scheduler@$VERSION"
# The -X flags are what Volcano's Makefile stamps (Makefile.def); the proxy gives no commit.
(cd "$HERE" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $MODULE/pkg/version.Version=$VERSION" \
    -o "$BIN.tmp" "$MODULE/cmd/scheduler") >&2
src=$(cd "$HERE" && go list -m -f '{{.Dir}}' "$MODULE")
crds="$src/config/crd/volcano/bases"
# What the scheduler's cache (pkg/scheduler/cache/cache.go) lists and watches: PodGroups and
# Queues, plus Numatopologies (nodeinfo.volcano.sh), which it always watches.
files=(scheduling.volcano.sh_podgroups.yaml scheduling.volcano.sh_queues.yaml
    nodeinfo.volcano.sh_numatopologies.yaml)
rm -rf "$DIR/crds"; mkdir -p "$DIR/crds"
for f in "${files[@]}"; do
    [[ -f "$crds/$f" ]] || { log "ERROR: no $f in $crds"; exit 1; }
    cp "$crds/$f" "$DIR/crds/"
done
chmod 644 "$DIR"/crds/*.yaml
mv "$BIN.tmp" "$BIN"
log "built in $((SECONDS - t0))s: $BIN"
echo "$BIN"
