#!/usr/bin/env bash
# A real Kubernetes control plane for tests, as plain processes on loopback (no Docker):
# etcd + kube-apiserver + kube-scheduler + KWOK (fake nodes; pods bound to them go Running, and
# their logs are two fixed lines from $STATE/container.log),
# optionally kube-controller-manager, and optionally a real node (kubelet, containerd, CNI,
# CoreDNS: real pods on this machine; see scripts/real-node.sh).
# Binaries are built from the Go module proxy (sources: hack/controlplane/, see its README).
#
#   scripts/dev-cluster.sh build   build the binaries once per machine (skipped when present)
#   scripts/dev-cluster.sh up      build if needed, start everything, wait until usable; the
#                                  LAST line of stdout is `export KUBECONFIG=<path>`. Idempotent.
#                                  An `up` that fails (or is stopped) stops what it started and
#                                  keeps the logs in the state dir.
#   scripts/dev-cluster.sh up --real-node
#                                  the same plus a real kubelet node (root; kube-controller-
#                                  manager on); `build --real-node` builds its parts only
#   scripts/dev-cluster.sh up --real-nodes N
#                                  the same with N real nodes real-node-0..N-1 on this machine (each a
#                                  kubelet with its own containerd and pod /24; pods reach each other
#                                  across them through the host, unNATed; one CoreDNS, on node 0's
#                                  address); `--real-node` is `--real-nodes 1`
#   scripts/dev-cluster.sh up --real-node --registry
#                                  the same plus a real OCI registry (the CNCF distribution registry, built
#                                  from the Go module proxy) at localhost:5000, which the node's containerd
#                                  pulls from over plain HTTP (its hosts.toml): push images and charts there
#   scripts/dev-cluster.sh down    stop what `up` started and remove the state dir: whatever it
#                                  finds there (up, half up, half down), every step best effort
#   scripts/dev-cluster.sh env     print the export line (exit 1 if not up)
#   scripts/dev-cluster.sh status  each component: running or not, pid, port, restarts, the last exit
#                                  (exit 1 if not up or a component is down)
#   scripts/dev-cluster.sh check [--repair]
#                                  is the cluster usable: every component running, the API server
#                                  ready, every node Ready, CoreDNS answering (real node), a pod
#                                  schedulable; exit 1 with the reasons. --repair first starts again
#                                  a component whose keeper is gone, and waits up to 60 s
#   scripts/dev-cluster.sh restart-apiserver
#                                  kill kube-apiserver; its keeper starts it again with the same
#                                  flags (its watch cache starts empty: watches from before get 410)
#
# Every component runs under a keeper (hack/devcluster/keeper.py), as a kubelet keeps a static pod:
# one that exits is logged in its log and in $STATE/<name>.exits (its exit status or signal) and
# started again. A file $STATE/<name>.hold keeps it down until removed (tests that stop the kubelet).
# Nothing here signals a pid read from a file without checking, at that moment, that the process
# runs the component's binary from this state dir.
#   scripts/dev-cluster.sh image SPEC.json
#                                  build local images (hack/realnode/images.py) and load them
#                                  into the real node's containerd (nothing can be pulled)
#   scripts/dev-cluster.sh example-images
#                                  load stand-ins under the names the docs' examples and the operator's
#                                  defaults use: examples/ddp/job.yaml's pytorch/pytorch image (the
#                                  example's script in it) and busybox:1.36 (the wait-for-master init)
#   scripts/dev-cluster.sh operator-image
#                                  build localhost/torchjob-operator:dev from the repository as the
#                                  Dockerfile describes (hack/operator_image.py; no Docker engine) and
#                                  load it into the real node's containerd
#   scripts/dev-cluster.sh operator-image --push REF
#                                  the same, then push it as REF (e.g. localhost:5000/torchjob-operator:V)
#                                  through the OCI distribution API, by the node's containerd client (ctr;
#                                  plain HTTP to localhost); the node keeps no image named REF, so a pod of
#                                  REF pulls it from the registry
#   scripts/dev-cluster.sh helm    build Helm if needed (with `build` too) and print its path
#   scripts/dev-cluster.sh bin     print the dir of the built binaries (kubectl and helm among them)
#   scripts/dev-cluster.sh crds    print the paths of third-party CRDs the operator works with
#                                  (Volcano and scheduler-plugins PodGroups, Kueue's Workloads
#                                  and ResourceFlavors), taken from their
#                                  Go modules through the module proxy; apply them with
#                                  `kubectl apply -f` to try gang scheduling objects
#
# Usage: eval "$(scripts/dev-cluster.sh up | tail -n1)"
# Everything but that export line goes to stderr.
#
# Environment:
#   TORCHJOB_CACHE            binaries go to $TORCHJOB_CACHE/controlplane/<k8s-version>/bin
#                             (default ~/.cache/torchjob)
#   TORCHJOB_DEVCLUSTER_DIR   state dir: pids, logs, certs, etcd data, kubeconfig
#                             (default /tmp/torchjob-devcluster)
#   KUBEBUILDER_ASSETS        dir holding etcd + kube-apiserver (envtest layout): used instead of
#                             building those two (kube-scheduler and kwok are still built)
#   DEVCLUSTER_KWOK           1 (default) run KWOK and create fake nodes; 0: no nodes, no kwok
#   DEVCLUSTER_SCHEDULER      1 (default) run kube-scheduler; 0: pods stay unbound
#   DEVCLUSTER_CONTROLLER_MANAGER  0 (default); 1: also build and run kube-controller-manager
#                             (garbage collection via ownerReferences, namespace deletion,
#                             default ServiceAccounts, Job/ReplicaSet/EndpointSlice controllers)
#   DEVCLUSTER_NODES          number of fake nodes kwok-node-0..N-1 (default 1)
#   DEVCLUSTER_NODE_CPU / _MEMORY / _GPUS / _PODS   fake node capacity (32 / 256Gi / 8 / 110);
#                             GPUs are advertised as nvidia.com/gpu
#   DEVCLUSTER_NODE_TAINT     1 (default): nodes carry kwok.x-k8s.io/node=fake:NoSchedule
#                             (pods need a toleration); 0: no taint
#   DEVCLUSTER_APISERVER_PORT secure port of kube-apiserver (default: a free port)
#   DEVCLUSTER_TIMEOUT        seconds to wait for each component (default 90)
#   DEVCLUSTER_AUDIT          1: kube-apiserver writes an audit log, $STATE/audit.log (JSON lines, level
#                             Metadata, the requests of ServiceAccounts only: who called what, with
#                             which verb and object name, and what it was answered)
#   DEVCLUSTER_APISERVER_ARGS extra kube-apiserver flags (word-split), e.g. --feature-gates=...
#   DEVCLUSTER_SCHEDULER_ARGS extra kube-scheduler flags (word-split), e.g. --config=FILE (a
#                             KubeSchedulerConfiguration; its clientConnection.kubeconfig must then be
#                             $TORCHJOB_DEVCLUSTER_DIR/kube-scheduler.kubeconfig)
#   DEVCLUSTER_KWOK_CONFIG    extra kwok config files (comma-separated), e.g. more Stages
#                             (kwok.x-k8s.io/v1alpha1) for pods not owned by a Job
#   DEVCLUSTER_KWOK_VERSION   sigs.k8s.io/kwok version to go-install (default v0.8.0)
#   DEVCLUSTER_REAL_NODE      1: a real node, as `--real-node` (more settings: scripts/real-node.sh)
#   DEVCLUSTER_REAL_NODES     N: N real nodes, as `--real-nodes N`
#   DEVCLUSTER_REGISTRY       1: the registry, as `--registry` (with a real node)
#   DEVCLUSTER_REGISTRY_PORT  its port on 127.0.0.1 (default 5000; the node pulls from localhost:PORT)
#   DEVCLUSTER_REGISTRY_VERSION  github.com/distribution/distribution/v3 version to go-install (default v3.1.2)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CP_SRC="$ROOT/hack/controlplane"
KWOK_VERSION="${DEVCLUSTER_KWOK_VERSION:-v0.8.0}"
# Helm (`go list -m -versions helm.sh/helm/v4` lists what the module proxy serves).
HELM_VERSION="${DEVCLUSTER_HELM_VERSION:-v4.3.1}"
# The CNCF distribution registry (`go list -m -versions github.com/distribution/distribution/v3`).
REGISTRY_VERSION="${DEVCLUSTER_REGISTRY_VERSION:-v3.1.2}"
REGISTRY_PORT="${DEVCLUSTER_REGISTRY_PORT:-5000}"

log() { printf '[dev-cluster] %s\n' "$*" >&2; }
die() { printf '[dev-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# Versions come from the wrapper go.mod files (single source of truth).
[[ -f "$CP_SRC/kubernetes/go.mod" && -f "$CP_SRC/etcd/go.mod" ]] || die "missing $CP_SRC/{kubernetes,etcd}/go.mod"
K8S_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 } $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 }' "$CP_SRC/kubernetes/go.mod" | head -n1)
ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$CP_SRC/etcd/go.mod" | head -n1)
[[ "$K8S_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "cannot read the k8s.io/kubernetes version from $CP_SRC/kubernetes/go.mod (got '$K8S_VERSION')"
[[ "$ETCD_VERSION" =~ ^v3\. ]] || die "cannot read the etcd version from $CP_SRC/etcd/go.mod (got '$ETCD_VERSION')"

CACHE_DIR="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/controlplane/$K8S_VERSION"
[[ "$CACHE_DIR" == /* ]] || CACHE_DIR="$PWD/$CACHE_DIR" # GOBIN must be absolute
BIN="$CACHE_DIR/bin"
STATE="${TORCHJOB_DEVCLUSTER_DIR:-/tmp/torchjob-devcluster}"
[[ "$STATE" == /* ]] || STATE="$PWD/$STATE"
KUBECONFIG_PATH="$STATE/kubeconfig"
TIMEOUT="${DEVCLUSTER_TIMEOUT:-90}"

# shellcheck source=real-node.sh
source "$ROOT/scripts/real-node.sh"
args=("${@:2}")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --real-node) DEVCLUSTER_REAL_NODE=1 ;;
        --real-nodes) DEVCLUSTER_REAL_NODES=${args[i + 1]:-(none)}; i=$((i + 1)) ;;
        --real-nodes=*) DEVCLUSTER_REAL_NODES=${args[i]#--real-nodes=} ;;
        --registry) DEVCLUSTER_REGISTRY=1 ;;
    esac
done
if [[ -n "${DEVCLUSTER_REAL_NODES:-}" ]]; then
    [[ "$DEVCLUSTER_REAL_NODES" =~ ^[1-9][0-9]?$ ]] || die "--real-nodes (DEVCLUSTER_REAL_NODES) takes a number of nodes from 1 to 99, not '$DEVCLUSTER_REAL_NODES'"
    DEVCLUSTER_REAL_NODE=1
fi
registry_on() { [[ "${DEVCLUSTER_REGISTRY:-0}" == 1 ]]; }
# EndpointSlices (which CoreDNS answers headless names from) come from kube-controller-manager.
if real_node; then DEVCLUSTER_CONTROLLER_MANAGER=1; fi

# ---------------------------------------------------------------------------------------- build

sha() { cat "$@" | sha256sum | cut -c1-16; } # contents only: the same in every clone

# A binary is (re)built when missing or when its stamp (versions + go.sum hash + go version)
# differs, so bumping hack/controlplane rebuilds; otherwise it's a no-op.
stamp_ok() { [[ -x "$BIN/$1" && -f "$BIN/.$1.stamp" && "$(cat "$BIN/.$1.stamp")" == "$2" ]]; }
write_stamp() { printf '%s' "$2" >"$BIN/.$1.stamp"; }

assets_have() { [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/etcd" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" ]]; }

etcd_bin() { if assets_have; then echo "$KUBEBUILDER_ASSETS/etcd"; else echo "$BIN/etcd"; fi; }
apiserver_bin() { if assets_have; then echo "$KUBEBUILDER_ASSETS/kube-apiserver"; else echo "$BIN/kube-apiserver"; fi; }

cmd_build() {
    command -v go >/dev/null || die "go not found in PATH (Go >= 1.26 needed to build the control plane)"
    local gov t0 minor
    gov=$(go env GOVERSION)
    mkdir -p "$BIN"
    # One build at a time per cache (clusters in other state dirs share it): the second waits,
    # then finds the binaries built.
    if command -v flock >/dev/null; then
        exec 8>"$BIN/.build.lock"
        flock -w 3600 8 || die "could not get the build lock $BIN/.build.lock"
    fi
    # Static binaries like upstream's; -s -w like upstream release builds (DBG unset).
    export CGO_ENABLED=0

    if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
        if assets_have; then
            log "using etcd and kube-apiserver from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
        else
            log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks etcd or kube-apiserver: building them"
        fi
    fi

    local kstamp estamp wstamp
    kstamp="$K8S_VERSION $(sha "$CP_SRC/kubernetes/go.mod" "$CP_SRC/kubernetes/go.sum") $gov"
    estamp="$ETCD_VERSION $(sha "$CP_SRC/etcd/go.mod" "$CP_SRC/etcd/go.sum") $gov"
    wstamp="$KWOK_VERSION $gov"

    # kube-apiserver + kube-scheduler (+ kube-controller-manager): one `go build`, shared deps.
    local kpkgs=()
    [[ "${DEVCLUSTER_CONTROLLER_MANAGER:-0}" != 1 ]] || stamp_ok kube-controller-manager "$kstamp" \
        || kpkgs+=(k8s.io/kubernetes/cmd/kube-controller-manager)
    assets_have || stamp_ok kube-apiserver "$kstamp" || kpkgs+=(k8s.io/kubernetes/cmd/kube-apiserver)
    stamp_ok kube-scheduler "$kstamp" || kpkgs+=(k8s.io/kubernetes/cmd/kube-scheduler)
    stamp_ok kubectl "$kstamp" || kpkgs+=(k8s.io/kubernetes/cmd/kubectl) # the tests drive it as users do
    if real_node; then
        stamp_ok kubelet "$kstamp" || kpkgs+=(k8s.io/kubernetes/cmd/kubelet)
    fi
    if ((${#kpkgs[@]})); then
        minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
        local bdate
        bdate=$(cd "$CP_SRC/kubernetes" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)
        local cv=k8s.io/component-base/version
        local ldflags="-s -w -X $cv.gitVersion=$K8S_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor"
        [[ -z "$bdate" ]] || ldflags+=" -X $cv.buildDate=$bdate"
        log "building ${kpkgs[*]##*/} $K8S_VERSION ($gov; CPU heavy: ~4 min on 2 cores with an empty Go build cache)"
        t0=$SECONDS
        local tmp; tmp=$(mktemp -d "$BIN/.build.XXXXXX")
        (cd "$CP_SRC/kubernetes" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${kpkgs[@]}") \
            || { rm -rf "$tmp"; die "go build of ${kpkgs[*]} failed (see above)"; }
        local p n
        for p in "${kpkgs[@]}"; do n=${p##*/}; mv -f "$tmp/$n" "$BIN/$n"; write_stamp "$n" "$kstamp"; done
        rm -rf "$tmp"
        log "built ${kpkgs[*]##*/} in $((SECONDS - t0))s"
    fi

    if ! assets_have && ! stamp_ok etcd "$estamp"; then
        log "building etcd $ETCD_VERSION"
        t0=$SECONDS
        (cd "$CP_SRC/etcd" && go build -trimpath -ldflags "-s -w" -o "$BIN/.etcd.tmp" go.etcd.io/etcd/server/v3) \
            || die "go build of etcd failed (see above)"
        mv -f "$BIN/.etcd.tmp" "$BIN/etcd"; write_stamp etcd "$estamp"
        log "built etcd in $((SECONDS - t0))s"
    fi

    if ! { stamp_ok kwok "$wstamp" && [[ -f "$BIN/kwok-stages.yaml" ]]; }; then
        log "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
        t0=$SECONDS
        # Outside any module so the repo's (non-Go) tree and GOFLAGS=-mod=... don't interfere.
        (cd "$BIN" && GOBIN="$BIN" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") \
            || die "go install of kwok failed (see above)"
        # The bare kwok binary ships no stages (kwokctl injects its defaults), so take the same
        # defaults kwokctl uses from that exact kwok module: node-initialize,
        # node-heartbeat-with-lease, pod-ready, pod-complete (Job-owned pods only), pod-delete.
        local kdir
        kdir=$(cd "$BIN" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
        [[ -d "$kdir/kustomize/stage" ]] || die "cannot find the kwok $KWOK_VERSION module source (got '$kdir')"
        local f
        for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
            pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
            [[ -f "$kdir/kustomize/stage/$f" ]] || die "kwok $KWOK_VERSION has no kustomize/stage/$f"
            printf -- '---\n# sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$f"
            cat "$kdir/kustomize/stage/$f"
        done >"$BIN/.kwok-stages.yaml.tmp"
        mv -f "$BIN/.kwok-stages.yaml.tmp" "$BIN/kwok-stages.yaml"
        write_stamp kwok "$wstamp"
        log "built kwok in $((SECONDS - t0))s"
    fi
    build_helm
    if registry_on; then build_registry; fi
    if real_node; then rn_build; fi
    exec 8>&- # the build lock
    log "binaries in $BIN: $(cd "$BIN" && ls | tr '\n' ' ')"
}

# Helm from its Go module, beside kubectl (the chart's tests and the in-cluster suite run it).
build_helm() {
    local hstamp t0
    hstamp="$HELM_VERSION $(go env GOVERSION)"
    stamp_ok helm "$hstamp" && return 0
    log "go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
    t0=$SECONDS
    # Outside any module; the version stamped as Helm's release builds stamp it.
    (cd "$BIN" && CGO_ENABLED=0 GOBIN="$BIN" GOFLAGS= go install -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
        "helm.sh/helm/v4/cmd/helm@$HELM_VERSION") || die "go install of helm failed (see above)"
    write_stamp helm "$hstamp"
    log "built helm in $((SECONDS - t0))s"
}

# The CNCF distribution registry (`registry serve CONFIG`), from its Go module, beside helm.
build_registry() {
    local rstamp t0
    rstamp="$REGISTRY_VERSION $(go env GOVERSION)"
    stamp_ok registry "$rstamp" && return 0
    log "go install github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
    t0=$SECONDS
    (cd "$BIN" && CGO_ENABLED=0 GOBIN="$BIN" GOFLAGS= go install -trimpath -ldflags "-s -w" \
        "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION") || die "go install of the registry failed (see above)"
    write_stamp registry "$rstamp"
    log "built registry in $((SECONDS - t0))s"
}

cmd_helm() { # build Helm alone if needed (the build lock held), print its path
    command -v go >/dev/null || die "go not found in PATH (Go >= 1.26 needed to build helm)"
    mkdir -p "$BIN"
    if command -v flock >/dev/null; then
        exec 8>"$BIN/.build.lock"
        flock -w 3600 8 || die "could not get the build lock $BIN/.build.lock"
    fi
    build_helm
    exec 8>&-
    echo "$BIN/helm"
}

# ---------------------------------------------------------------------------------------- helpers

# A free port below the kernel's ephemeral range: a port inside it can be taken by some
# client's outgoing connection while a component is down (restart-apiserver reuses its port).
free_port() {
    if command -v python3 >/dev/null; then
        python3 -c '
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    low = 32768
for _ in range(500):
    port = random.randint(10000, max(low - 1, 10001))
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port found")'
    else # fall back: random port not listed by ss
        local p
        for _ in $(seq 50); do
            p=$((10000 + RANDOM % 22000))
            ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
        done
        die "no free port found"
    fi
}

port_free() { # <port>: nothing listens on 127.0.0.1:<port>
    python3 -c 'import socket, sys
with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go listeners do: TIME_WAIT is fine
    s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# <pid> <name>: the process exists, is not a zombie (an orphaned daemon's zombie can linger
# until PID 1 reaps it), still runs the <name> binary and names this state dir in its command line:
# pids are reused within minutes here (pid_max 32768), so a pid from a file is ours only if so.
proc_running() {
    local st args
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n "$st" && "$st" != Z && "$st" != X ]] || return 1
    args=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null) || return 1
    [[ "$(head -n1 <<<"$args")" == *"$2" && "$args" == *"$STATE/"* ]]
}
keeper_running() { # <pid> <name>: hack/devcluster/keeper.py keeping <name> of this state dir
    local args
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    args=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
    [[ "$args" == *"/keeper.py $STATE $2 -- "* ]]
}
pid_alive() { [[ -f "$STATE/$1.pid" ]] && proc_running "$(cat "$STATE/$1.pid")" "$1"; }
keeper_alive() { [[ -f "$STATE/$1.keeper" ]] && keeper_running "$(cat "$STATE/$1.keeper")" "$1"; }

signal_component() { # <signal> <name>: its running process, checked as this state dir's at this moment
    local pid
    pid=$(cat "$STATE/$2.pid" 2>/dev/null) || return 1
    proc_running "$pid" "$2" || return 1
    kill "-$1" "$pid" 2>/dev/null
}

start_proc() { # <name> <cmd...>: under its keeper, detached, own session, logs in $STATE/<name>.log
    local name=$1; shift
    printf '%q ' "$@" >"$STATE/$name.cmdline"; echo >>"$STATE/$name.cmdline"
    rm -f "$STATE/$name.pid" "$STATE/$name.keeper" "$STATE/$name.hold"
    # 9>&- 8>&-: the daemons must not inherit (and so hold) the state or build lock.
    setsid python3 "$ROOT/hack/devcluster/keeper.py" "$STATE" "$name" -- "$@" </dev/null >>"$STATE/$name.log" 2>&1 9>&- 8>&- &
    # Until the keeper has written the pid of a component that has exec'd: a check made too soon,
    # on a busy machine, took a starting component for one that had exited.
    for _ in $(seq 200); do pid_alive "$name" && break; sleep 0.05; done
    log "started $name (pid $(cat "$STATE/$name.pid" 2>/dev/null || echo '?'), log $STATE/$name.log)"
}

restart_lost() { # <name>: started again from its recorded command line if its keeper is gone
    keeper_alive "$1" && return 0
    local -a cmd
    eval "cmd=($(cat "$STATE/$1.cmdline"))" # written with printf %q by start_proc
    stop_proc "$1"
    log "$1: its keeper is gone; starting it again"
    start_proc "$1" "${cmd[@]}"
}

fail_with_log() { # <name> <message>: report with the component's log, and fail (see stop_on_failure)
    log "ERROR: $2"
    if [[ -f "$STATE/$1.log" ]]; then
        log "---- last 30 lines of $STATE/$1.log ----"
        tail -n 30 "$STATE/$1.log" >&2 || true
    fi
    exit 1
}

# From here until `disarm`, the command cleans up after itself: whatever ends it (a failing step,
# a die, a timeout, Ctrl-C, SIGTERM; not SIGKILL, which `down` is for) stops everything started in
# $STATE, the real node's network included, and keeps the logs there.
stop_on_failure() {
    trap 'on_failure $?' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}
disarm() { trap - EXIT INT TERM HUP; }
on_failure() { # <exit status>
    disarm
    (($1)) || return 0
    log "failed (exit $1): stopping what was started"
    stop_all
    log "stopped the components; logs kept in $STATE (run '$0 down' to remove it)"
    exit "$1"
}

wait_for() { # <name> <description> <command...>: poll until the command succeeds
    local name=$1 what=$2; shift 2
    local deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if [[ -f "$STATE/$name.pid" ]] && ! pid_alive "$name"; then
            fail_with_log "$name" "$name exited while waiting for $what"
        fi
        ((SECONDS < deadline)) || fail_with_log "$name" "timed out after ${TIMEOUT}s waiting for $what"
        sleep 0.3
    done
}

api() { # <method> <path> [body]: admin call to the apiserver, prints body, fails on HTTP >= 400
    local args=(-sS --fail-with-body --max-time 10 --cacert "$STATE/pki/ca.crt"
        -H "Authorization: Bearer $(cat "$STATE/admin.token")" -X "$1")
    [[ $# -lt 3 ]] || args+=(-H 'Content-Type: application/json' --data-binary "$3")
    curl "${args[@]}" "https://127.0.0.1:$(cat "$STATE/kube-apiserver.port")$2"
}

gen_keypair() { # <private.pem> <public.pem>
    if command -v openssl >/dev/null; then
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
        openssl pkey -in "$1" -pubout -out "$2" 2>/dev/null
    elif python3 -c 'import cryptography' 2>/dev/null; then
        python3 - "$1" "$2" <<'EOF'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
open(sys.argv[1], "wb").write(k.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
open(sys.argv[2], "wb").write(k.public_key().public_bytes(serialization.Encoding.PEM,
    serialization.PublicFormat.SubjectPublicKeyInfo))
EOF
    else
        die "need openssl or python3 with the 'cryptography' package to generate the service-account key"
    fi
    chmod 600 "$1"
}

rand_token() { od -An -tx1 -N24 /dev/urandom | tr -d ' \n'; }

write_kubeconfig() { # <path> <user> <token>
    local ca; ca=$(base64 -w0 <"$STATE/pki/ca.crt")
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: torchjob-dev
  cluster:
    server: https://127.0.0.1:$(cat "$STATE/kube-apiserver.port")
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: torchjob-dev
  context: {cluster: torchjob-dev, user: $2, namespace: default}
current-context: torchjob-dev
EOF
    chmod 600 "$1"
}

export_line() { echo "export KUBECONFIG=$KUBECONFIG_PATH"; }

components() {
    echo etcd kube-apiserver
    [[ "${DEVCLUSTER_SCHEDULER:-1}" == 1 ]] && echo kube-scheduler
    [[ "${DEVCLUSTER_CONTROLLER_MANAGER:-0}" == 1 ]] && echo kube-controller-manager
    [[ "${DEVCLUSTER_KWOK:-1}" == 1 ]] && echo kwok
    registry_on && echo registry
    real_node && rn_components
    return 0
}

is_up() { # everything recorded as started is alive and the apiserver answers /readyz
    [[ -f "$STATE/up" && -f "$KUBECONFIG_PATH" ]] || return 1
    local c
    for c in $(cat "$STATE/components"); do pid_alive "$c" || return 1; done
    api GET /readyz >/dev/null 2>&1
}

# Run with the state lock held (concurrent `up` from several test workers is safe).
with_lock() {
    command -v flock >/dev/null || { "$@"; return; }
    mkdir -p "$(dirname "$STATE")"
    exec 9>"$STATE.flock"
    flock -w "$((TIMEOUT * 4 + 1200))" 9 || die "could not get the lock $STATE.flock (held by: $(fuser "$STATE.flock" 2>/dev/null || echo '?'))"
    "$@"
}

# ---------------------------------------------------------------------------------------- up

node_json() { # <name>
    local taints='[]'
    [[ "${DEVCLUSTER_NODE_TAINT:-1}" == 1 ]] && taints='[{"key":"kwok.x-k8s.io/node","value":"fake","effect":"NoSchedule"}]'
    local cap="{\"cpu\":\"${DEVCLUSTER_NODE_CPU:-32}\",\"memory\":\"${DEVCLUSTER_NODE_MEMORY:-256Gi}\",\"pods\":\"${DEVCLUSTER_NODE_PODS:-110}\""
    [[ "${DEVCLUSTER_NODE_GPUS:-8}" == 0 ]] || cap+=",\"nvidia.com/gpu\":\"${DEVCLUSTER_NODE_GPUS:-8}\""
    cap+="}"
    cat <<EOF
{"apiVersion":"v1","kind":"Node",
 "metadata":{"name":"$1",
   "annotations":{"kwok.x-k8s.io/node":"fake","node.alpha.kubernetes.io/ttl":"0"},
   "labels":{"type":"kwok","kubernetes.io/hostname":"$1","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64",
             "beta.kubernetes.io/os":"linux","beta.kubernetes.io/arch":"amd64","kubernetes.io/role":"agent","node-role.kubernetes.io/agent":""}},
 "spec":{"taints":$taints},
 "status":{"capacity":$cap,"allocatable":$cap,
   "nodeInfo":{"architecture":"amd64","operatingSystem":"linux","kubeletVersion":"fake","kubeProxyVersion":"fake",
     "bootID":"","containerRuntimeVersion":"","kernelVersion":"","machineID":"","osImage":"","systemUUID":""}}}
EOF
}

nodes_ready() { # all fake nodes have Ready=True (set by kwok)
    local n=${DEVCLUSTER_NODES:-1} out
    out=$(api GET "/api/v1/nodes?labelSelector=type%3Dkwok") || return 1
    [[ $(tr -d ' \n' <<<"$out" | grep -o '"type":"Ready","status":"True"' | wc -l) -ge $n ]]
}

cmd_up() {
    command -v curl >/dev/null || die "curl is required (apt-get install curl)"
    if is_up; then
        if real_node && ! grep -qx kubelet <(tr ' ' '\n' <"$STATE/components"); then
            die "a dev cluster without a real node is up in $STATE: run '$0 down' first"
        fi
        if real_node && [[ $(tr ' ' '\n' <"$STATE/components" | grep -cx 'kubelet\(-[0-9]*\)\?') != "$(rn_count)" ]]; then
            die "a dev cluster with another number of real nodes is up in $STATE: run '$0 down' first"
        fi
        log "already up ($STATE)"
        export_line
        return 0
    fi
    # the real node's images run the repository's virtualenv: said before anything starts
    if real_node; then rn_python_env >/dev/null || exit 1; rn_check_subnets; fi
    if [[ -e "$STATE" ]]; then
        log "found a stale or partial cluster in $STATE: cleaning it up first"
        do_down
    fi

    cmd_build

    stop_on_failure
    local t0=$SECONDS
    mkdir -p "$STATE/pki" "$STATE/etcd-data"
    chmod 700 "$STATE"
    components >"$STATE/components"
    local etcd apiserver
    etcd=$(etcd_bin); apiserver=$(apiserver_bin)
    local apiv
    apiv=$("$apiserver" --version 2>/dev/null | awk '{print $2}')
    log "etcd: $("$etcd" --version 2>/dev/null | head -n1); kube-apiserver: $apiv"
    if [[ "${apiv%.*}" != "${K8S_VERSION%.*}" ]]; then
        # Version skew policy: kube-scheduler/-controller-manager must not be newer than the apiserver.
        log "WARNING: kube-apiserver $apiv (KUBEBUILDER_ASSETS) vs kube-scheduler/kube-controller-manager $K8S_VERSION: unsupported skew if the apiserver is older"
    fi

    # --- etcd (client + peer on loopback, fsync off: throwaway test data)
    local etcd_port etcd_peer
    etcd_port=$(free_port); etcd_peer=$(free_port)
    while [[ "$etcd_peer" == "$etcd_port" ]]; do etcd_peer=$(free_port); done
    echo "$etcd_port" >"$STATE/etcd.port"
    start_proc etcd "$etcd" \
        --name=default --data-dir="$STATE/etcd-data" \
        --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
        --listen-peer-urls="http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer" \
        --initial-cluster="default=http://127.0.0.1:$etcd_peer" \
        --unsafe-no-fsync=true --log-level=warn
    wait_for etcd "etcd /health" curl -sf --max-time 2 "http://127.0.0.1:$etcd_port/health"

    # --- credentials: service-account key pair, static tokens
    gen_keypair "$STATE/pki/sa.key" "$STATE/pki/sa.pub"
    local admin_tok sched_tok kcm_tok
    admin_tok=$(rand_token); sched_tok=$(rand_token); kcm_tok=$(rand_token)
    echo "$admin_tok" >"$STATE/admin.token"
    {
        echo "$admin_tok,admin,admin-uid,\"system:masters\""
        echo "$sched_tok,system:kube-scheduler,kube-scheduler-uid"
        # kube-controller-manager runs all controllers under its own identity
        # (--use-service-account-credentials=false), hence system:masters.
        echo "$kcm_tok,system:kube-controller-manager,kube-controller-manager-uid,\"system:masters\""
    } >"$STATE/pki/tokens.csv"
    chmod 600 "$STATE/admin.token" "$STATE/pki/tokens.csv"

    # --- kube-apiserver (secure port only; self-signed serving cert generated into --cert-dir)
    # ServiceAccount admission off: no controller creates the default SA (as in envtest).
    # TaintNodesByCondition off: it puts node.kubernetes.io/not-ready:NoSchedule on every new
    # Node and only kube-controller-manager's node-lifecycle controller (not run) removes it.
    # endpoint-reconciler none: the "kubernetes" Endpoints may not hold a loopback address.
    # kubelet address InternalIP: pod logs are fetched from KWOK's kubelet server on 127.0.0.1
    # (the nodes' Hostname address does not resolve).
    local port=${DEVCLUSTER_APISERVER_PORT:-}
    [[ -n "$port" ]] || port=$(free_port)
    echo "$port" >"$STATE/kube-apiserver.port"
    # shellcheck disable=SC2206 # intentional word splitting of user-supplied extra args
    local extra=(${DEVCLUSTER_APISERVER_ARGS:-})
    if [[ "${DEVCLUSTER_AUDIT:-0}" == 1 ]]; then
        cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
EOF
        extra+=(--audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$STATE/audit.log"
            --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=0)
    fi
    start_proc kube-apiserver "$apiserver" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
        --cert-dir="$STATE/pki/apiserver" \
        --token-auth-file="$STATE/pki/tokens.csv" \
        --authorization-mode=RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$STATE/pki/sa.pub" \
        --service-account-signing-key-file="$STATE/pki/sa.key" \
        --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
        --service-cluster-ip-range=10.0.0.0/24 \
        --allow-privileged=true \
        --endpoint-reconciler-type=none \
        --kubelet-preferred-address-types=InternalIP \
        "${extra[@]}"
    # The generated cert file holds the serving cert followed by its self-signed CA.
    wait_for kube-apiserver "the self-signed serving cert" test -s "$STATE/pki/apiserver/apiserver.crt"
    cp "$STATE/pki/apiserver/apiserver.crt" "$STATE/pki/ca.crt"
    wait_for kube-apiserver "kube-apiserver /readyz" api GET /readyz
    wait_for kube-apiserver "the default namespace" api GET /api/v1/namespaces/default
    write_kubeconfig "$KUBECONFIG_PATH" admin "$admin_tok"
    log "kube-apiserver ready at https://127.0.0.1:$port after $((SECONDS - t0))s"

    # --- kube-scheduler (as user system:kube-scheduler; bootstrap RBAC covers it)
    if [[ "${DEVCLUSTER_SCHEDULER:-1}" == 1 ]]; then
        local sport; sport=$(free_port)
        echo "$sport" >"$STATE/kube-scheduler.port"
        write_kubeconfig "$STATE/kube-scheduler.kubeconfig" system:kube-scheduler "$sched_tok"
        # shellcheck disable=SC2206 # intentional word splitting of user-supplied extra args
        local sextra=(${DEVCLUSTER_SCHEDULER_ARGS:-})
        start_proc kube-scheduler "$BIN/kube-scheduler" \
            --kubeconfig="$STATE/kube-scheduler.kubeconfig" \
            --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
            --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
            --authentication-skip-lookup=true \
            --bind-address=127.0.0.1 --secure-port="$sport" \
            --cert-dir="$STATE/pki/kube-scheduler" \
            --leader-elect=false "${sextra[@]}"
        wait_for kube-scheduler "kube-scheduler /healthz" curl -skf --max-time 2 "https://127.0.0.1:$sport/healthz"
    fi

    # --- kube-controller-manager (opt-in)
    if [[ "${DEVCLUSTER_CONTROLLER_MANAGER:-0}" == 1 ]]; then
        local cport; cport=$(free_port)
        echo "$cport" >"$STATE/kube-controller-manager.port"
        write_kubeconfig "$STATE/kube-controller-manager.kubeconfig" system:kube-controller-manager "$kcm_tok"
        start_proc kube-controller-manager "$BIN/kube-controller-manager" \
            --kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
            --authentication-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
            --authorization-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
            --authentication-skip-lookup=true \
            --bind-address=127.0.0.1 --secure-port="$cport" \
            --cert-dir="$STATE/pki/kube-controller-manager" \
            --leader-elect=false --use-service-account-credentials=false \
            --service-account-private-key-file="$STATE/pki/sa.key" \
            --root-ca-file="$STATE/pki/ca.crt" \
            --service-cluster-ip-range=10.0.0.0/24
        wait_for kube-controller-manager "kube-controller-manager /healthz" curl -skf --max-time 2 "https://127.0.0.1:$cport/healthz"
    fi

    # --- KWOK: fake nodes (annotation kwok.x-k8s.io/node=fake) + their pods' lifecycle
    if [[ "${DEVCLUSTER_KWOK:-1}" == 1 ]]; then
        local i
        for ((i = 0; i < ${DEVCLUSTER_NODES:-1}; i++)); do
            api POST /api/v1/nodes "$(node_json "kwok-node-$i")" >/dev/null \
                || die "creating fake node kwok-node-$i failed"
        done
        # Own HOME so a ~/.kwok/kwok.yaml of the user isn't loaded; default stages from build.
        # Node leases (kube-node-lease) as kwokctl does: the heartbeat-with-lease stage only
        # refreshes node status every ~10 min, the lease is what keeps the node alive for
        # kube-controller-manager's node-lifecycle controller.
        mkdir -p "$STATE/kwok-home"
        local kcfg=(--config="$BIN/kwok-stages.yaml") c
        local kextra=()
        IFS=, read -r -a kextra <<<"${DEVCLUSTER_KWOK_CONFIG:-}"
        for c in "${kextra[@]}"; do [[ -z "$c" ]] || kcfg+=(--config="$(realpath "$c")"); done
        # KWOK's kubelet server (its own TLS certificate, which kube-apiserver does not check: no
        # --kubelet-certificate-authority) answers `kubectl logs` for every container with
        # $STATE/container.log, so the log path through the API server is real in the tests.
        local kport; kport=$(free_port)
        # CRI log format, as kubelet keeps container logs: time, stream, P(artial)/F(ull), text.
        printf '%s stdout F %s\n' 2026-01-01T00:00:00.000000000Z 'fake container output from KWOK (scripts/dev-cluster.sh)' \
            2026-01-01T00:00:01.000000000Z 'second line' >"$STATE/container.log"
        cat >"$STATE/kwok-logs.yaml" <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: every-container
spec:
  logs:
  - logsFile: $STATE/container.log
EOF
        kcfg+=(--config="$STATE/kwok-logs.yaml")
        start_proc kwok env HOME="$STATE/kwok-home" "$BIN/kwok" \
            "${kcfg[@]}" \
            --server-address="127.0.0.1:$kport" --node-port="$kport" \
            --kubeconfig="$KUBECONFIG_PATH" \
            --manage-all-nodes=false \
            --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
            --node-lease-duration-seconds=40 \
            --node-ip=127.0.0.1 --cidr=10.244.0.0/16
        wait_for kwok "${DEVCLUSTER_NODES:-1} fake node(s) Ready" nodes_ready
    fi

    if registry_on; then registry_up; fi
    if real_node; then rn_up_all; fi

    touch "$STATE/up"
    disarm
    log "up in $((SECONDS - t0))s: $(tr '\n' ' ' <"$STATE/components")(state $STATE)"
    export_line
}

# A registry on 127.0.0.1:$REGISTRY_PORT, its blobs in the state dir (gone with `down`). The real node's
# containerd pulls from localhost:$REGISTRY_PORT over plain HTTP (real-node.sh writes its hosts.toml).
registry_up() {
    real_node || die "--registry needs --real-node (the registry is for the node's containerd to pull from)"
    port_free "$REGISTRY_PORT" || die "127.0.0.1:$REGISTRY_PORT is taken (another dev cluster's registry?): set DEVCLUSTER_REGISTRY_PORT"
    mkdir -p "$STATE/registry/data"
    echo "$REGISTRY_PORT" >"$STATE/registry.port"
    cat >"$STATE/registry/config.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $STATE/registry/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOF
    start_proc registry "$BIN/registry" serve "$STATE/registry/config.yml"
    wait_for registry "the registry at 127.0.0.1:$REGISTRY_PORT/v2/" curl -sf --max-time 2 "http://127.0.0.1:$REGISTRY_PORT/v2/"
}

# ---------------------------------------------------------------------------------------- down

stop_proc() { # <name>: its keeper first (which stops it: SIGTERM, SIGKILL after 10 s), then it
    local keeper pid
    if [[ -f "$STATE/$1.keeper" ]]; then
        keeper=$(cat "$STATE/$1.keeper")
        if keeper_running "$keeper" "$1"; then
            kill -TERM "$keeper" 2>/dev/null || true
            for _ in $(seq 150); do keeper_running "$keeper" "$1" || break; sleep 0.1; done
            if keeper_running "$keeper" "$1"; then
                log "the keeper of $1 (pid $keeper) did not stop on SIGTERM: SIGKILL"
                kill -KILL "$keeper" 2>/dev/null || true
            fi
        fi
        rm -f "$STATE/$1.keeper"
    fi
    [[ -f "$STATE/$1.pid" ]] || return 0
    pid=$(cat "$STATE/$1.pid")
    if proc_running "$pid" "$1"; then # no keeper (it was killed), or it did not stop the component
        signal_component TERM "$1" || true
        for _ in $(seq 100); do proc_running "$pid" "$1" || break; sleep 0.1; done
        if proc_running "$pid" "$1"; then
            log "$1 (pid $pid) did not stop on SIGTERM: SIGKILL"
            signal_component KILL "$1" || true
        fi
    fi
    log "stopped $1 (pid $pid)"
    rm -f "$STATE/$1.pid"
}

try() { # <command...>: one step of a teardown, best effort: a failure is told, and the teardown goes on
    local rc=0
    "$@" || rc=$? # (errexit does not apply inside a command that `||` guards)
    ((rc == 0)) || log "WARNING: '$*' failed (exit $rc); going on"
    return 0
}

stop_strays() { # components run from $STATE whose pid file is gone (an `up` killed mid-start)
    local p args exe pids=() st alive=()
    for p in /proc/[0-9]*; do
        args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
        exe=${args%% *}
        if [[ "$args" == *"/keeper.py $STATE "* ]]; then # a keeper of this state dir: it would start one again
            log "stopping a keeper (pid ${p#/proc/}) of $STATE whose pid file is gone"
            kill -KILL "${p#/proc/}" 2>/dev/null || true
            continue
        fi
        case "${exe##*/}" in
            etcd | kube-apiserver | kube-scheduler | kube-controller-manager | kwok | registry | containerd | coredns | kubelet) ;;
            containerd-[0-9]* | kubelet-[0-9]*) ;; # node i's (real-node.sh)
            *) continue ;;
        esac
        [[ "$args" == *"$STATE/"* ]] || continue
        log "stopping ${exe##*/} (pid ${p#/proc/}): it runs from $STATE but has no pid file there"
        pids+=("${p#/proc/}")
    done
    ((${#pids[@]})) || return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do # until they are gone (a zombie is gone: its parent reaps it)
        alive=()
        for p in "${pids[@]}"; do
            st=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) || continue
            [[ "$st" == Z || "$st" == X ]] || alive+=("$p")
        done
        ((${#alive[@]})) || return 0
        sleep 0.1
    done
    log "WARNING: still running after SIGKILL: ${alive[*]}"
}

# Whatever state it finds (up, half up after a failed or killed `up`, half down): every step is
# best effort, so that one failing (or finding nothing to do) never leaves the rest running.
stop_all() {
    local c
    # Reverse start order: clients first, etcd last. The real node's pods are deleted through
    # the API server, so it goes before it.
    try rn_down_all
    for c in registry kwok kube-controller-manager kube-scheduler kube-apiserver etcd; do try stop_proc "$c"; done
    try stop_strays
}

do_down() {
    stop_all
    # --one-file-system: never into anything a crashed run left mounted there.
    rm -rf --one-file-system "$STATE" 2>/dev/null || true
    [[ ! -e "$STATE" ]] || die "could not remove $STATE; still mounted under it: $(awk -v under="$STATE/" \
        'index($5, under) == 1 { printf "%s ", $5 }' /proc/self/mountinfo)"
}

cmd_down() {
    if [[ ! -e "$STATE" ]]; then log "not up (no $STATE)"; return 0; fi
    do_down
    log "down; removed $STATE"
}

# ---------------------------------------------------------------------------------------- main

cmd_env() { is_up || die "dev cluster is not up (state dir $STATE); run: $0 up"; export_line; }

cmd_status() {
    [[ -f "$STATE/components" ]] || die "dev cluster is not up (state dir $STATE)"
    local c state restarts last down=0
    for c in $(cat "$STATE/components"); do
        if pid_alive "$c"; then state="running, pid $(cat "$STATE/$c.pid")"; else state="DOWN"; down=1; fi
        keeper_alive "$c" || { state="$state, its keeper is gone"; down=1; }
        [[ ! -f "$STATE/$c.hold" ]] || state="$state, held down ($STATE/$c.hold)"
        restarts=0 last=""
        if [[ -s "$STATE/$c.exits" ]]; then
            restarts=$(wc -l <"$STATE/$c.exits")
            last="; last exit: $(tail -n1 "$STATE/$c.exits")"
        fi
        log "$c: $state$([[ -f "$STATE/$c.port" ]] && echo ", port $(cat "$STATE/$c.port")"), restarts $restarts$last, log $STATE/$c.log"
    done
    local i d
    for i in $(rn_nodes_up | sort -n); do # each real node: its name, network and components
        d="$STATE/realnode$( ((i == 0)) || echo "-$i")"
        log "real node $(cat "$d/name" 2>/dev/null): pods on $(cat "$d/subnet" 2>/dev/null), $( ((i == 0)) && echo "containerd, coredns, kubelet" || echo "containerd-$i, kubelet-$i"), state $d"
    done
    ((down == 0)) || die "a component is down (see above)"
    is_up || die "dev cluster is not up (state dir $STATE)"
    export_line
}

# Whether the cluster is usable, in the order its user would find out; the reasons on stderr.
cmd_check() {
    local repair=0 c problems=() deadline
    [[ "${1:-}" != --repair ]] || repair=1
    [[ -f "$STATE/up" && -f "$STATE/components" ]] || die "dev cluster is not up (state dir $STATE)"
    if ((repair)); then
        for c in $(cat "$STATE/components"); do restart_lost "$c"; done
    fi
    deadline=$((SECONDS + (repair ? 60 : 0)))
    while :; do
        problems=()
        for c in $(cat "$STATE/components"); do
            pid_alive "$c" || problems+=("$c is not running$([[ -s "$STATE/$c.exits" ]] && echo " (last exit: $(tail -n1 "$STATE/$c.exits"))")")
            keeper_alive "$c" || problems+=("the keeper of $c is gone: nothing starts it again (check --repair does)")
        done
        ((${#problems[@]})) || check_usable problems
        ((${#problems[@]} && SECONDS < deadline)) || break
        sleep 1
    done
    if ((${#problems[@]})); then
        for c in "${problems[@]}"; do log "NOT OK: $c"; done
        exit 1
    fi
    log "ok: every component running, the API server ready, every node Ready$(real_node_up && echo " (real: $(rn_recorded_names | tr '\n' ' ' | sed 's/ $//')), CoreDNS answering"), a pod schedulable"
}

real_node_up() { grep -qw kubelet "$STATE/components" 2>/dev/null; }
rn_recorded_names() { # the real nodes this state started, node 0 first
    local i
    for i in $(rn_nodes_up | sort -n); do cat "$STATE/realnode$( ((i == 0)) || echo "-$i")/name" 2>/dev/null; done
}
rn_comp_of() { # <node name>: its kubelet's component name
    local i
    for i in $(rn_nodes_up); do
        [[ "$(cat "$STATE/realnode$( ((i == 0)) || echo "-$i")/name" 2>/dev/null)" != "$1" ]] || { ((i == 0)) && echo kubelet || echo "kubelet-$i"; return; }
    done
}

check_usable() { # <array name>: appends what is wrong
    local -n out=$1
    local body name
    api GET /readyz >/dev/null 2>&1 || { out+=("the API server does not answer /readyz"); return; }
    body=$(api GET /api/v1/nodes 2>/dev/null) || { out+=("cannot list the nodes"); return; }
    while read -r name; do
        [[ -z "$name" ]] || out+=("node $name is not Ready")
    done < <(python3 -c '
import json, sys
for n in json.load(sys.stdin)["items"]:
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])):
        print(n["metadata"]["name"])' <<<"$body")
    for name in $(rn_recorded_names); do # a real node whose kubelet never registered is in no list
        python3 -c 'import json, sys
sys.exit(sys.argv[1] not in {n["metadata"]["name"] for n in json.load(sys.stdin)["items"]})' "$name" <<<"$body" \
            || out+=("real node $name is not registered with the API server (its kubelet's log: $STATE/$(rn_comp_of "$name").log)")
    done
    if real_node_up && ! dns_answers; then out+=("CoreDNS at $RN_HOST does not answer kubernetes.default.svc.cluster.local"); fi
    if grep -qw kube-scheduler "$STATE/components"; then
        pod_schedulable || out+=("a pod was not scheduled within 20 s (kube-scheduler's last line: $(tail -n1 "$STATE/kube-scheduler.log" 2>/dev/null | cut -c1-200))")
    fi
}

dns_answers() { # one A query over UDP to the node's CoreDNS, answered NOERROR with an address
    python3 - "$RN_HOST" <<'EOF'
import random, socket, struct, sys
qid = random.randrange(65536)
name = b"".join(bytes([len(p)]) + p.encode() for p in "kubernetes.default.svc.cluster.local".split(".")) + b"\0"
query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(3)
    s.sendto(query, (sys.argv[1], 53))
    reply = s.recv(512)
rid, flags, _, answers = struct.unpack(">HHHH", reply[:8])
sys.exit(0 if rid == qid and flags & 0xF == 0 and answers > 0 else 1)
EOF
}

pod_schedulable() { # a pod that tolerates everything is bound to a node within 20 s; deleted after
    local name="devcluster-check-$RANDOM$RANDOM" bound=1
    api POST /api/v1/namespaces/default/pods "{\"metadata\": {\"name\": \"$name\"}, \"spec\": {
        \"containers\": [{\"name\": \"c\", \"image\": \"localhost/devcluster-check:none\", \"imagePullPolicy\": \"Never\"}],
        \"tolerations\": [{\"operator\": \"Exists\"}], \"terminationGracePeriodSeconds\": 0}}" >/dev/null 2>&1 || return 1
    for _ in $(seq 100); do
        if api GET "/api/v1/namespaces/default/pods/$name" 2>/dev/null | grep -q '"nodeName"'; then bound=0; break; fi
        sleep 0.2
    done
    api DELETE "/api/v1/namespaces/default/pods/$name" '{"gracePeriodSeconds": 0}' >/dev/null 2>&1 || true
    return $bound
}

cmd_restart_apiserver() {
    is_up || die "dev cluster is not up (state dir $STATE)"
    local old; old=$(cat "$STATE/kube-apiserver.pid")
    # SIGKILL, as a crash: a graceful stop waits for its watches for many seconds. Its keeper starts
    # it again (a start that finds the port still held exits, and the keeper tries again).
    signal_component KILL kube-apiserver || die "kube-apiserver (pid $old) is not running"
    local deadline=$((SECONDS + TIMEOUT))
    until [[ "$(cat "$STATE/kube-apiserver.pid" 2>/dev/null)" != "$old" ]] && api GET /readyz >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail_with_log kube-apiserver "kube-apiserver was not ready again within ${TIMEOUT}s"
        sleep 0.3
    done
    log "kube-apiserver restarted (pid $old -> $(cat "$STATE/kube-apiserver.pid"))"
}

# The operator's image, as the Dockerfile describes it, built without a Docker engine on the node's
# Debian root file system (hack/operator-image/build.py), cached by the content it is built from,
# and imported into the real node's containerd when one is up in $STATE.
cmd_operator_image() {
    local push=""
    if [[ "${1:-}" == --push ]]; then
        push=${2:-}
        [[ -n "$push" ]] || die "usage: $0 operator-image [--push REF] (REF e.g. localhost:5000/torchjob-operator:VERSION)"
        [[ -S "$(rn_sock)" ]] || die "operator-image --push pushes through the real node's containerd: none is up in $STATE (run '$0 up --real-node --registry' first)"
    elif [[ -n "${1:-}" ]]; then
        die "usage: $0 operator-image [--push REF]"
    fi
    rn_need_root
    rn_build_rootfs
    local prefix src archive venv t0=$SECONDS
    prefix=${DEVCLUSTER_OPERATOR_PYTHON:-}
    if [[ -z "$prefix" ]]; then # the interpreter the node's virtualenv was made from
        venv=$(rn_python_env) || exit 1
        prefix=$(rn_python_prefix "$venv") || exit 1
    fi
    src=$(cd "$ROOT" && find src -type f -name '*.py' | LC_ALL=C sort)
    # shellcheck disable=SC2086 # one path a line
    archive="$RN_CACHE/operator-image-$(cd "$ROOT" && sha $src pyproject.toml README.md constraints/operator.txt Dockerfile \
        hack/operator-image/build.py hack/realnode/images.py "$(rn_rootfs_tar)" <<<"$prefix").tar"
    # One build at a time per cache (the in-cluster and registry suites ask at once): the second finds the
    # first's archive, and no clean-up of older archives removes it before it is imported.
    mkdir -p "$RN_CACHE" && exec 6>"$RN_CACHE/.operator-image.lock"
    flock -w 1800 6 || die "could not get the lock $RN_CACHE/.operator-image.lock"
    if [[ ! -s "$archive" ]]; then
        rm -f "$RN_CACHE"/operator-image-*.tar
        log "building localhost/torchjob-operator:dev (Python from $prefix)"
        python3 "$ROOT/hack/operator-image/build.py" --rootfs "$(rn_rootfs_tar)" --python "$prefix" --out "$archive" >&2 \
            || die "building the operator image failed (see above)"
    fi
    log "operator image: $archive ($(du -h "$archive" | cut -f1) uncompressed, built in $((SECONDS - t0))s)"
    if [[ -S "$(rn_sock)" ]]; then
        ctr_ images import "$archive" >/dev/null || die "importing $archive into containerd failed"
        log "imported localhost/torchjob-operator:dev into the real node of $STATE"
    fi
    exec 6>&-
    if [[ -n "$push" ]]; then push_image localhost/torchjob-operator:dev "$push"; fi
    echo "$archive"
}

push_image() { # <local ref> <remote ref>: the OCI distribution API, by containerd's client
    local plain=() host=${2%%/*}
    # plain HTTP to a registry on this machine (the dev cluster's); HTTPS to any other
    case "$host" in localhost | localhost:* | 127.0.0.1 | 127.0.0.1:*) plain=(--plain-http) ;; esac
    ctr_ images tag --force "$1" "$2" >/dev/null || die "ctr images tag $1 $2 failed"
    local rc=0
    ctr_ images push "${plain[@]}" "$2" >/dev/null || rc=$? # (its progress: redrawn lines)
    # the node keeps no image of that name: a pod that names it pulls it from the registry
    ctr_ images rm "$2" >/dev/null 2>&1 || true
    ((rc == 0)) || die "pushing $2 failed (see above)"
    log "pushed $2"
}

# The PodGroup CRDs as their projects publish them (the versions the module proxy serves here).
THIRD_PARTY_CRDS=(
    "volcano.sh/volcano@v1.10.0 config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"
    "sigs.k8s.io/scheduler-plugins@v0.32.7 config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"
    "sigs.k8s.io/kueue@v0.13.2 config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"
    "sigs.k8s.io/kueue@v0.13.2 config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml"
)

cmd_crds() {
    local entry mod file dir
    for entry in "${THIRD_PARTY_CRDS[@]}"; do
        read -r mod file <<<"$entry"
        # Outside any module, so that the download does not touch a go.mod.
        dir=$(cd / && GOFLAGS=-mod=mod go mod download -json "$mod" | awk -F'"' '$2 == "Dir" { print $4 }')
        [[ -n "$dir" && -f "$dir/$file" ]] || die "could not get $file from $mod through the Go module proxy"
        echo "$dir/$file"
    done
}

case "${1:-}" in
    build) if real_node; then rn_need_root; fi; with_lock cmd_build ;;
    up) with_lock cmd_up ;;
    down) with_lock cmd_down ;;
    env) cmd_env ;;
    status) cmd_status ;;
    check) shift; with_lock cmd_check "$@" ;;
    restart-apiserver) with_lock cmd_restart_apiserver ;;
    crds) cmd_crds ;;
    image) cmd_image "${2:-}" ;;
    example-images) cmd_example_images ;;
    bin) echo "$BIN" ;;
    helm) cmd_helm ;;
    operator-image) cmd_operator_image "${@:2}" ;;
    *) die "usage: $0 build|up|down|env|status|check|restart-apiserver|crds|image|example-images|operator-image|helm|bin" ;;
esac
