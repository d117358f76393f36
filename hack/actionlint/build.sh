#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow linter) from the Go module proxy, once per machine, for
# tests/release/test_workflows.py, which lints .github/workflows with it:
#
#   $TORCHJOB_CACHE/actionlint/<version>/actionlint
#
# TORCHJOB_CACHE defaults to ~/.cache/torchjob; ACTIONLINT_VERSION to v1.7.12 (`go list -m -versions
# github.com/rhysd/actionlint` lists what the proxy serves). About a minute with an empty Go cache.
# The LAST line of stdout is the binary's path; everything else goes to stderr.
set -euo pipefail

VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
DIR="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/actionlint/$VERSION"
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
BIN="$DIR/actionlint"

log() { printf '[actionlint] %s\n' "$*" >&2; }

if [[ -x "$BIN" ]]; then
    echo "$BIN"
    exit 0
fi
command -v go >/dev/null || { log "ERROR: go not found in PATH (Go builds actionlint from its module)"; exit 1; }
mkdir -p "$DIR"
# One build at a time per cache: a second waits, then finds the binary.
exec 8>"$DIR/.build.lock"
flock -w 1800 8 || { log "ERROR: could not get the lock $DIR/.build.lock"; exit 1; }
if [[ ! -x "$BIN" ]]; then
    t0=$SECONDS
    log "go install github.com/rhysd/actionlint/cmd/actionlint@$VERSION"
    # Outside any module; the version stamped as its release builds stamp it.
    (cd "$DIR" && CGO_ENABLED=0 GOBIN="$DIR/.tmp" GOFLAGS= go install -trimpath \
        -ldflags "-s -w -X github.com/rhysd/actionlint.version=$VERSION" \
        "github.com/rhysd/actionlint/cmd/actionlint@$VERSION") >&2
    mv -f "$DIR/.tmp/actionlint" "$BIN"
    rm -rf "$DIR/.tmp"
    log "built in $((SECONDS - t0))s: $BIN"
fi
echo "$BIN"
