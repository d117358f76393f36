#!/usr/bin/env bash
# What a release is made of, built the same way by the test command (tests/release) and by the release
# workflow (.github/workflows/release.yml): tests/release/test_workflows.py checks that the workflows call
# these subcommands.
#
#   scripts/release.sh version            print the version (src/torchjob/version.py: the one place it is written)
#   scripts/release.sh set-version V      write V there and into the chart (version, appVersion); the image tag
#                                         and `torchjob install`'s default image follow (tests/test_version.py)
#   scripts/release.sh check-tag TAG      exit 1 unless TAG is v<version> (a tag that names another version
#                                         releases nothing)
#   scripts/release.sh dist OUTDIR        the wheel and the sdist (python -m build), checked by `twine check --strict`
#   scripts/release.sh chart OUTDIR       the chart, packaged by Helm (torchjob-<version>.tgz), linted first
#   scripts/release.sh notes [V]          the changelog's section of V (default: the version): the release note
#   scripts/release.sh wheelhouse         print a directory of the wheels constraints/operator.txt pins (the
#                                         runtime dependencies and the build backend), downloaded by pip once per
#                                         machine and cached: a build and a fresh install from it need no index
#                                         (PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR), as tests/release does
#
# PYTHON: the interpreter with build and twine (default: the repository's .venv, else python3).
# HELM: helm (default: the one on PATH, else the dev cluster's, built from the Go module proxy:
# scripts/dev-cluster.sh helm).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
CHART="$ROOT/charts/torchjob"

die() { printf '[release] ERROR: %s\n' "$*" >&2; exit 1; }
log() { printf '[release] %s\n' "$*" >&2; }

version() {
    sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' "$ROOT/src/torchjob/version.py"
}

cmd_set_version() {
    local v=${1:-}
    [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-.+][0-9A-Za-z.-]+)?$ ]] || die "usage: $0 set-version X.Y.Z (got '$v')"
    sed -i "s/^__version__ = \"[^\"]*\"$/__version__ = \"$v\"/" "$ROOT/src/torchjob/version.py"
    sed -i -e "s/^version: .*/version: $v/" -e "s/^appVersion: .*/appVersion: $v/" "$CHART/Chart.yaml"
    log "version $v in src/torchjob/version.py and charts/torchjob/Chart.yaml; add its section to CHANGELOG.md"
}

cmd_check_tag() {
    local tag=${1:-} v
    v=$(version)
    [[ "$tag" == "v$v" ]] || die "the tag '$tag' is not v$v, the version src/torchjob/version.py says: run '$0 set-version X.Y.Z' and tag v<that>"
    grep -Eq "^## \[$v\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" "$ROOT/CHANGELOG.md" \
        || die "CHANGELOG.md has no dated section '## [$v] - YYYY-MM-DD': date the release's changes there"
    log "tag $tag names version $v"
}

cmd_dist() {
    local out=${1:-}
    [[ -n "$out" ]] || die "usage: $0 dist OUTDIR"
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    local v; v=$(version)
    rm -f "$out"/torchjob-"$v"*.whl "$out"/torchjob-"$v".tar.gz
    # The wheel from the sdist (build's default), so that the sdist is known to build the wheel.
    (cd "$ROOT" && "$PY" -m build --outdir "$out" . >&2) || die "python -m build failed (see above)"
    "$PY" -m twine check --strict "$out/torchjob-$v-py3-none-any.whl" "$out/torchjob-$v.tar.gz" >&2 \
        || die "twine check failed (see above)"
    echo "$out/torchjob-$v-py3-none-any.whl"
    echo "$out/torchjob-$v.tar.gz"
}

cmd_chart() {
    local out=${1:-} helm=${HELM:-}
    [[ -n "$out" ]] || die "usage: $0 chart OUTDIR"
    [[ -n "$helm" ]] || helm=$(command -v helm || bash "$ROOT/scripts/dev-cluster.sh" helm | tail -n1)
    mkdir -p "$out"
    "$helm" lint --strict "$CHART" >&2 || die "helm lint failed (see above)"
    "$helm" package "$CHART" --destination "$out" >&2 || die "helm package failed (see above)"
    echo "$(cd "$out" && pwd)/torchjob-$(version).tgz"
}

cmd_notes() {
    local v=${1:-$(version)}
    # The lines after `## [V]` up to the next `## ` heading (and the link definitions at the end).
    awk -v head="## [$v]" 'index($0, head) == 1 { on = 1; next } on && /^## / { exit } on && /^\[[^]]*\]: / { next } on' \
        "$ROOT/CHANGELOG.md" | sed -e '/./,$!d' >"${TMPDIR:-/tmp}/release-notes.$$"
    [[ -s "${TMPDIR:-/tmp}/release-notes.$$" ]] || { rm -f "${TMPDIR:-/tmp}/release-notes.$$"; die "CHANGELOG.md has no section '## [$v]'"; }
    cat "${TMPDIR:-/tmp}/release-notes.$$"
    rm -f "${TMPDIR:-/tmp}/release-notes.$$"
}

cmd_wheelhouse() {
    local key dir
    key=$( (cat "$ROOT/constraints/operator.txt"; "$PY" -c 'import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_platform())') \
        | sha256sum | cut -c1-16)
    dir="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/wheelhouse/$key"
    [[ "$dir" == /* ]] || dir="$PWD/$dir"
    if [[ ! -f "$dir/.complete" ]]; then
        log "downloading the pinned wheels of constraints/operator.txt into $dir (once)"
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
        grep -E '^[A-Za-z0-9_.-]+==' "$ROOT/constraints/operator.txt" >"$dir.tmp/requirements.txt"
        "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$dir.tmp" -r "$dir.tmp/requirements.txt" >&2 \
            || die "pip download of the pinned wheels failed (see above)"
        touch "$dir.tmp/.complete"
        rm -rf "$dir" && mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
}

case "${1:-}" in
    version) version ;;
    set-version) cmd_set_version "${2:-}" ;;
    check-tag) cmd_check_tag "${2:-}" ;;
    dist) cmd_dist "${2:-}" ;;
    chart) cmd_chart "${2:-}" ;;
    notes) cmd_notes "${2:-}" ;;
    wheelhouse) cmd_wheelhouse ;;
    *) die "usage: $0 version|set-version V|check-tag TAG|dist OUTDIR|chart OUTDIR|notes [V]|wheelhouse" ;;
esac
