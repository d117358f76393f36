# shellcheck shell=bash
# The dev cluster's real node: a kubelet with containerd, runc, a CNI bridge and CoreDNS, running
# real pods on this machine. Sourced by scripts/dev-cluster.sh (`up --real-node`, or
# DEVCLUSTER_REAL_NODE=1); uses its helpers (log, die, start_proc, wait_for, api, ...).
# The facts behind each setting are in hack/realnode/README.md.
#
# Parts and where they come from (built or installed once per machine, then cached):
#   containerd, runc, CNI plugins, iptables, debootstrap   Debian packages (apt-get)
#   kubelet, kubectl, kube-controller-manager              hack/controlplane/kubernetes
#   CoreDNS                                                 hack/realnode/coredns
#   pause                                                   hack/realnode/pause
#   the images' Debian root file system                     debootstrap, through apt's own mirror
#
# Images on the node (made by hack/realnode/images.py, imported into containerd):
#   localhost/pause:dev           the sandbox image
#   localhost/torchjob-e2e:dev    Debian bookworm with `python`, `python3` and `torchrun` that run
#                                 the project's virtualenv (torch), which every container of the
#                                 node sees read-only at /opt/torchjob/venv (containerd's
#                                 base_runtime_spec), with its interpreter at its own path.
#
# Environment:
#   DEVCLUSTER_REAL_NODE        1: run the real node (same as `up --real-node`)
#   DEVCLUSTER_REAL_NODES       N: run N real nodes (same as `up --real-nodes N`), real-node-0..N-1,
#                               each a kubelet with its own containerd, state dir, cgroups and pod /24
#                               on this machine; CoreDNS runs once, on node 0's address
#   DEVCLUSTER_REAL_NODE_NAME   the node's name (default real-node-0; node i of N: ...-i)
#   DEVCLUSTER_PYTHON_ENV       the virtualenv containers see (default: the repo's .venv)
#   DEVCLUSTER_POD_SUBNET       the pods' /24 (default 10.250.0.0/24; the host is its .1); with N
#                               nodes, node i's is the /24 i after it (10.250.1.0/24, ...)
#   DEVCLUSTER_POD_SUBNETS      N nodes' /24s, space-separated, one per node, instead
#   DEVCLUSTER_DEBIAN_MIRROR    where debootstrap gets bookworm (default: the mirror this machine's
#                               apt sources name for bookworm; there is no built-in one)

RN_NAME0="${DEVCLUSTER_REAL_NODE_NAME:-real-node-0}"
RN_NAME=$RN_NAME0
RN_I=0 # the node the functions below act on: 0 keeps the one-node names (realnode/, kubelet, ...)
rn_use_subnet() { # <a.b.c.0/24>: the node's network, and the names derived from it
    RN_SUBNET=$1
    RN_NET="${RN_SUBNET%.*/*}"     # 10.250.0
    RN_HOST="$RN_NET.1"            # the bridge's address: node IP, DNS, what pods reach the host by
    RN_BRIDGE="tj${RN_NET//./-}"  # tj10-250-0 (also its cgroups): real nodes on other subnets coexist
}
RN_SUBNETS=(${DEVCLUSTER_POD_SUBNETS:-}) # word-split: one /24 a word
rn_use_subnet "${RN_SUBNETS[0]:-${DEVCLUSTER_POD_SUBNET:-10.250.0.0/24}}"
RN_SUBNET0=$RN_SUBNET RN_HOST0=$RN_HOST # node 0's: CoreDNS and every node's cluster DNS
RN_COMMENT="torchjob-devcluster"   # marks our iptables rule
RN_CACHE="${TORCHJOB_CACHE:-$HOME/.cache/torchjob}/realnode"
[[ "$RN_CACHE" == /* ]] || RN_CACHE="$PWD/$RN_CACHE"
RN_BIN="$RN_CACHE/bin"
RN_PACKAGES=(containerd runc containernetworking-plugins iptables debootstrap)
# What the interpreter's modules link against, and netcat for the init container's `nc -z`.
RN_ROOTFS_INCLUDE=libssl3,libffi8,libsqlite3-0,libreadline8,libncursesw6,libbz2-1.0,libexpat1,liblzma5,zlib1g,netcat-openbsd,procps
RN_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops) # kubelet sets them
VENV_IN_CONTAINER=/opt/torchjob/venv

real_node() { [[ "${DEVCLUSTER_REAL_NODE:-0}" == 1 ]]; }
rn_count() { echo "${DEVCLUSTER_REAL_NODES:-1}"; }
rn_suffix() { ((RN_I == 0)) || echo "-$RN_I"; }
rn_state() { echo "$STATE/realnode$(rn_suffix)"; }
rn_comp() { echo "$1$(rn_suffix)"; } # <containerd|kubelet>: node RN_I's component name
rn_subnet_of() { # <i>: node i's /24 (DEVCLUSTER_POD_SUBNETS, or node 0's /24 plus i)
    local net a b c
    if ((${#RN_SUBNETS[@]})); then echo "${RN_SUBNETS[$1]:-}"; return; fi
    net=${RN_SUBNET0%.*/*}; IFS=. read -r a b c <<<"$net"
    echo "$a.$b.$((c + $1)).0/24"
}
rn_name_of() { # <i>: node i's name (real-node-0, real-node-1, ...)
    if (($1 == 0)); then echo "$RN_NAME0"; elif [[ "$RN_NAME0" == *-0 ]]; then echo "${RN_NAME0%-0}-$1"; else echo "$RN_NAME0-$1"; fi
}
rn_select() { # <i>: the functions below act on node i
    RN_I=$1
    RN_NAME=$(rn_name_of "$1")
    rn_use_subnet "$(rn_subnet_of "$1")"
}
rn_bin() { # <command>: as node RN_I's component runs it (dev-cluster.sh knows a component by the
    # name its command ends with: node i's are links named containerd-i, kubelet-i)
    if ((RN_I == 0)); then echo "$1"; return; fi
    local link; link="$(rn_state)/bin/$(basename "$1")-$RN_I"
    mkdir -p "$(rn_state)/bin"
    ln -sf "$(command -v "$1")" "$link"
    echo "$link"
}
rn_nodes_up() { # the indexes of the nodes with a state in $STATE, node 0 last (teardown order)
    local d
    for d in "$STATE"/realnode-*; do [[ -d "$d" ]] && echo "${d##*-}"; done | sort -rn
    [[ ! -d "$STATE/realnode" ]] || echo 0
}
rn_sock() { echo "$(rn_state)/containerd/containerd.sock"; }
ctr_() { ctr --address "$(rn_sock)" -n k8s.io "$@"; }

# ---------------------------------------------------------------------------------------- build

rn_need_root() { [[ $EUID -eq 0 ]] || die "the real node needs root (containerd, kubelet, network set-up)"; }

rn_install_packages() {
    local missing=() p
    for p in "${RN_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    ((${#missing[@]})) || return 0
    command -v apt-get >/dev/null || die "the real node needs these Debian packages: ${missing[*]}"
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; } \
        || die "apt-get install ${missing[*]} failed (see above)"
}

rn_go_build() { # <name> <dir under hack/realnode>
    local src="$ROOT/hack/realnode/$2" stamp
    stamp="$(sha "$src"/go.mod "$src"/go.sum "$src"/*.go 2>/dev/null) $(go env GOVERSION)"
    [[ -x "$RN_BIN/$1" && "$(cat "$RN_BIN/.$1.stamp" 2>/dev/null)" == "$stamp" ]] && return 0
    log "building $1 (hack/realnode/$2)"
    local t0=$SECONDS
    mkdir -p "$RN_BIN"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$RN_BIN/.$1.tmp" .) \
        || die "go build of $1 failed (see above)"
    mv -f "$RN_BIN/.$1.tmp" "$RN_BIN/$1"; printf '%s' "$stamp" >"$RN_BIN/.$1.stamp"
    log "built $1 in $((SECONDS - t0))s"
}

rn_rootfs_tar() { echo "$RN_CACHE/rootfs-bookworm-$(sha <<<"$RN_ROOTFS_INCLUDE").tar"; }

rn_debian_mirror() { # the mirror this machine's apt takes Debian bookworm from (no built-in default)
    if [[ -n "${DEVCLUSTER_DEBIAN_MIRROR:-}" ]]; then echo "$DEVCLUSTER_DEBIAN_MIRROR"; return 0; fi
    local uris="" mirror
    # apt's own reading of /etc/apt/sources.list and sources.list.d/* (one-line and deb822, minus
    # `Enabled: no`): the URIs `apt-get update` would fetch, printed without fetching anything.
    if command -v apt-get >/dev/null; then
        uris=$(apt-get --print-uris -o Debug::NoLocking=1 update 2>/dev/null) || uris=""
    fi
    mirror=$(sed -n "s|^'\(https\{0,1\}://[^']*\)/dists/bookworm/InRelease'.*|\1|p" <<<"$uris" | sed -n 1p)
    [[ -n "$mirror" ]] || die "no apt source for Debian bookworm on this machine (none in /etc/apt/sources.list or /etc/apt/sources.list.d/), so debootstrap has no mirror for the images' root file system: add one to apt's sources, or set DEVCLUSTER_DEBIAN_MIRROR to a Debian mirror's URL"
    echo "$mirror"
}

rn_build_rootfs() {
    local tar; tar=$(rn_rootfs_tar)
    [[ -s "$tar" ]] && return 0
    local mirror
    mirror=$(rn_debian_mirror) || exit 1
    log "debootstrap bookworm (minbase) from $mirror"
    local t0=$SECONDS dir
    mkdir -p "$RN_CACHE"
    dir=$(mktemp -d "$RN_CACHE/.rootfs.XXXXXX")
    debootstrap --variant=minbase --include="$RN_ROOTFS_INCLUDE" bookworm "$dir" "$mirror" >"$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log" >&2; rm -rf "$dir"; die "debootstrap failed (log above)"; }
    # Images need no package caches, apt lists or documentation.
    rm -rf "$dir"/var/cache/apt/* "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc "$dir"/usr/share/man \
        "$dir"/usr/share/locale "$dir"/dev/*
    tar -C "$dir" --numeric-owner -cf "$tar.tmp" . && mv -f "$tar.tmp" "$tar"
    rm -rf "$dir" "$dir.log"
    log "root file system $tar ($(du -h "$tar" | cut -f1)) in $((SECONDS - t0))s"
}

rn_python_env() { # the virtualenv containers see
    local venv="${DEVCLUSTER_PYTHON_ENV:-$ROOT/.venv}"
    [[ -f "$venv/pyvenv.cfg" ]] || die "no virtualenv at $venv for the real node's images (run scripts/setup.sh, or set DEVCLUSTER_PYTHON_ENV)"
    echo "$venv"
}

rn_python_prefix() { # the interpreter the virtualenv was made from: mounted at its own path
    local home
    home=$(sed -n 's/^home *= *//p' "$1/pyvenv.cfg")
    home=$(dirname "$(realpath "$home/python3")")
    home=${home%/bin}
    case "$home" in
        /usr | /usr/local | /) die "the real node mounts the virtualenv's interpreter ($home) into every container, which would hide the image's own $home: make the virtualenv from a Python installed elsewhere (pyenv, uv, a /opt prefix)";;
    esac
    echo "$home"
}

# The dev images: the sandbox, and the e2e image whose python runs the mounted env (also the
# operator's wait-for-master init image here: `--init-image localhost/torchjob-e2e:dev`, since it
# has netcat-openbsd's `nc -z`, which Debian's busybox lacks).
rn_dev_images_spec() {
    cat <<EOF
[{"name": "localhost/pause:dev", "files": [{"path": "/pause", "source": "$RN_BIN/pause", "mode": 493}],
  "config": {"Entrypoint": ["/pause"]}},
 {"name": "localhost/torchjob-e2e:dev", "rootfs": true, "python": true, "config": {"Cmd": ["python"]}}]
EOF
}

rn_build() {
    rn_need_root
    rn_install_packages
    rn_go_build coredns coredns
    rn_go_build pause pause
    rn_build_rootfs
}

# ---------------------------------------------------------------------------------------- up

rn_record_sysctls() { # the kubelet sets them: `down` puts these values back
    local s
    for s in "${RN_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$(rn_state)/sysctl.orig"
}

rn_network_up() {
    ip link show "$RN_BRIDGE" >/dev/null 2>&1 && die "a bridge $RN_BRIDGE exists already: another real node is up on $RN_SUBNET (run '$0 down' with its TORCHJOB_DEVCLUSTER_DIR, or set DEVCLUSTER_POD_SUBNET)"
    ip link add "$RN_BRIDGE" type bridge
    # From here the bridge, its iptables rule and its cgroups are this node's: `down` (or a failed
    # `up`) removes them by this record, never by what its own environment says the subnet is.
    echo "$RN_SUBNET" >"$(rn_state)/subnet"
    log "pods' network: bridge $RN_BRIDGE on $RN_SUBNET"
    ip addr add "$RN_HOST/${RN_SUBNET#*/}" dev "$RN_BRIDGE"
    ip link set "$RN_BRIDGE" up
    # Pods reach each other and the host, nothing beyond (nothing can be reached anyway).
    iptables -w -I FORWARD -s "$RN_SUBNET" ! -d "$RN_SUBNET" -j DROP -m comment --comment "$RN_COMMENT"
    # N nodes: pods reach the other nodes' pods through the host, as they are (no NAT), ahead of the DROP.
    local i other routes="{\"dst\": \"$RN_API_IP/32\", \"gw\": \"$RN_HOST\"}"
    for ((i = 0; i < $(rn_count); i++)); do
        ((i == RN_I)) && continue
        other=$(rn_subnet_of "$i")
        iptables -w -I FORWARD -s "$RN_SUBNET" -d "$other" -j ACCEPT -m comment --comment "$RN_COMMENT"
        routes+=", {\"dst\": \"$other\", \"gw\": \"$RN_HOST\"}"
    done
    mkdir -p "$(rn_state)/cni/net.d" "$(rn_state)/cni/ipam"
    cat >"$(rn_state)/cni/net.d/10-torchjob.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "torchjob-dev",
 "plugins": [{"type": "bridge", "bridge": "$RN_BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": true,
              "ipam": {"type": "host-local", "dataDir": "$(rn_state)/cni/ipam",
                       "ranges": [[{"subnet": "$RN_SUBNET", "rangeStart": "$RN_NET.10", "gateway": "$RN_HOST"}]],
                       "routes": [$routes]}}]}
EOF
    rn_api_service_up
}

# The `kubernetes` Service (its ClusterIP, which in-cluster clients are told) leads to the API
# server, as kube-proxy would make it: pods route that one address to the host, which sends it to
# the API server on loopback (its certificate names the address). Nothing else of the host opens.
RN_API_IP=10.0.0.1 # the first address of dev-cluster.sh's --service-cluster-ip-range
rn_api_service_up() {
    sysctl -q -w "net.ipv4.conf.$RN_BRIDGE.route_localnet=1" >/dev/null
    iptables -w -t nat -I PREROUTING -i "$RN_BRIDGE" -d "$RN_API_IP" -p tcp --dport 443 -j DNAT \
        --to-destination "127.0.0.1:$(cat "$STATE/kube-apiserver.port")" -m comment --comment "$RN_COMMENT"
}

rn_base_spec() { # containerd's default OCI spec plus the read-only Python environment
    local venv=$1 prefix=$2
    ctr oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
for src, dst in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[2])):
    spec["mounts"].append({"destination": dst, "type": "bind", "source": src,
                           "options": ["rbind", "ro", "nosuid", "nodev"]})
json.dump(spec, sys.stdout, indent=1)' "$venv" "$prefix" "$VENV_IN_CONTAINER"
}

rn_containerd_up() {
    local d; d="$(rn_state)/containerd"
    mkdir -p "$d"
    local venv prefix
    venv=$(rn_python_env); prefix=$(rn_python_prefix "$venv")
    rn_base_spec "$venv" "$prefix" >"$d/base-spec.json"
    cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:dev"
  # root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (kubelet asks -998 for sandboxes)
  # fails every container with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "$d/base-spec.json"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$(rn_state)/cni/net.d"
EOF
    if registry_on; then # the dev cluster's registry, over plain HTTP (containerd's hosts.toml)
        mkdir -p "$d/certs.d/localhost:$REGISTRY_PORT"
        printf '  [plugins."io.containerd.grpc.v1.cri".registry]\n    config_path = "%s"\n' "$d/certs.d" >>"$d/config.toml"
        cat >"$d/certs.d/localhost:$REGISTRY_PORT/hosts.toml" <<EOF
server = "http://localhost:$REGISTRY_PORT"

[host."http://localhost:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
EOF
    fi
    start_proc "$(rn_comp containerd)" "$(rn_bin containerd)" --config "$d/config.toml"
    wait_for "$(rn_comp containerd)" "containerd's socket" ctr_ version
}

rn_import() { # <spec.json> <archive name>: build the spec's images (cached by content), import them
    local spec=$1 archive sources home
    # The interpreter's home, mounted at its own path: python images open the directories down to it
    # to every user (a pyenv under /root, 0700 in Debian, is out of reach of a non-root pod).
    home=$(rn_python_prefix "$(rn_python_env)")
    sources=$(python3 -c 'import json, sys
print("\n".join(f["source"] for i in json.load(open(sys.argv[1])) for f in i.get("files", []) if "source" in f))' "$spec")
    # shellcheck disable=SC2086 # one path a line
    archive="$RN_CACHE/$2-$(sha "$spec" "$(rn_rootfs_tar)" "$ROOT/hack/realnode/images.py" <(echo "$home") $sources).tar"
    # One build at a time per cache (real nodes of two test workers ask for the same images): the
    # second finds the first's archive; nor does its clean-up of older archives remove the new one.
    mkdir -p "$RN_CACHE" && exec 7>"$RN_CACHE/.images.lock"
    flock -w 1800 7 || die "could not get the lock $RN_CACHE/.images.lock"
    if [[ ! -s "$archive" ]]; then
        rm -f "$RN_CACHE/$2"-*.tar
        python3 "$ROOT/hack/realnode/images.py" --rootfs "$(rn_rootfs_tar)" --venv "$VENV_IN_CONTAINER" \
            --python-home "$home" --out "$archive" "$spec" || die "building the images of $spec failed"
    fi
    flock -u 7
    local t0=$SECONDS
    ctr_ images import "$archive" >/dev/null || die "importing $archive into containerd failed"
    log "imported $2 into $RN_NAME in $((SECONDS - t0))s"
}

rn_import_images() {
    rn_dev_images_spec >"$(rn_state)/dev-images.json"
    rn_import "$(rn_state)/dev-images.json" dev-images
    ctr_ images label localhost/pause:dev io.cri-containerd.pinned=pinned >/dev/null
}

# `dev-cluster.sh example-images`: stand-ins under the names the docs' examples and the operator's
# defaults use (nothing can be pulled here), so that their commands run as written: the image of
# examples/ddp/job.yaml with the example's script in its working directory, and busybox:1.36 (the
# operator's default wait-for-master init image) as the Debian root file system (sh and `nc -z`).
rn_example_images_spec() {
    cat <<EOF
[{"name": "docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "rootfs": true, "python": true,
  "files": [{"path": "/workspace/examples/ddp/train.py", "source": "$ROOT/examples/ddp/train.py"}],
  "config": {"WorkingDir": "/workspace"}},
 {"name": "docker.io/library/busybox:1.36", "rootfs": true, "config": {"Cmd": ["sh"]}}]
EOF
}

cmd_example_images() {
    [[ -S "$(rn_sock)" ]] || die "no real node is up in $STATE: run '$0 up --real-node' first"
    rn_example_images_spec >"$(rn_state)/example-images.json"
    local i
    for i in $(rn_nodes_up); do (rn_select "$i" && rn_import "$STATE/realnode/example-images.json" example-images); done
}

# `dev-cluster.sh image SPEC.json`: more local images for the node (see hack/realnode/images.py).
cmd_image() {
    [[ -f "${1:-}" ]] || die "usage: $0 image SPEC.json (a JSON list of images: see hack/realnode/images.py)"
    [[ -S "$(rn_sock)" ]] || die "no real node is up in $STATE: run '$0 up --real-node' first"
    local i spec; spec=$(realpath "$1")
    for i in $(rn_nodes_up); do (rn_select "$i" && rn_import "$spec" "images-$(basename "$1" .json)"); done
}

rn_coredns_up() {
    local d; d="$(rn_state)/coredns"
    mkdir -p "$d"
    cat >"$d/Corefile" <<EOF
cluster.local:53 {
    bind $RN_HOST
    errors
    kubernetes cluster.local {
        kubeconfig $KUBECONFIG_PATH torchjob-dev
        pods insecure
        ttl 5
    }
}
.:53 {
    bind $RN_HOST
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
    start_proc coredns "$RN_BIN/coredns" -conf "$d/Corefile"
    wait_for coredns "CoreDNS on $RN_HOST:53" rn_dns_answers kubernetes.default.svc.cluster.local
}

rn_dns_answers() { # <name>: CoreDNS answers (any rcode) for it
    python3 - "$RN_HOST" "$1" <<'EOF'
import random, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
qid = random.randint(0, 65535)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(1)
    s.sendto(q, (server, 53))
    data = s.recv(512)
sys.exit(0 if struct.unpack(">H", data[:2])[0] == qid else 1)
EOF
}

rn_cgroup_dirs() { # the node's cgroup root in every hierarchy (two nodes never share one)
    local c
    for c in /sys/fs/cgroup/*/; do
        [[ -f "$c/cgroup.procs" ]] && echo "$c$RN_BRIDGE"
    done
}

rn_kubelet_up() {
    local d; d="$(rn_state)/kubelet"
    mkdir -p "$d/root" "$d/pki" "$d/pod-logs"
    local c
    for c in $(rn_cgroup_dirs); do
        mkdir -p "$c"
        # A new v1 cpuset cgroup has no CPUs and no memory nodes until given its parent's.
        if [[ -f "$c/cpuset.cpus" ]]; then
            cat "$c/../cpuset.cpus" >"$c/cpuset.cpus"; cat "$c/../cpuset.mems" >"$c/cpuset.mems"
        fi
    done
    echo "nameserver $RN_HOST0" >"$d/resolv.conf"
    local port hport
    port=$(free_port); hport=$(free_port)
    cp "$KUBECONFIG_PATH" "$d/kubeconfig"
    rn_record_sysctls
    cat >"$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1; kubelet 1.36 refuses them unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$RN_BRIDGE
address: $RN_HOST
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
# The dev API server has no kubelet client certificate: anyone on the host may ask.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDNS: [$RN_HOST0]
clusterDomain: cluster.local
resolvConf: $d/resolv.conf
podLogsDir: $d/pod-logs
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
nodeStatusReportFrequency: 10s
syncFrequency: 10s
EOF
    start_proc "$(rn_comp kubelet)" "$(rn_bin "$BIN/kubelet")" \
        --config="$d/config.yaml" --kubeconfig="$d/kubeconfig" \
        --container-runtime-endpoint="unix://$(rn_sock)" \
        --hostname-override="$RN_NAME" --node-ip="$RN_HOST" \
        --root-dir="$d/root" --cert-dir="$d/pki" \
        --v=1
    wait_for "$(rn_comp kubelet)" "node $RN_NAME Ready" rn_node_ready
}

rn_node_ready() {
    api GET "/api/v1/nodes/$RN_NAME" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}

rn_up() { # node RN_I; CoreDNS with node 0
    rn_need_root
    mkdir -p "$(rn_state)"
    echo "$RN_NAME" >"$(rn_state)/name"
    rn_network_up
    rn_containerd_up
    rn_import_images
    ((RN_I > 0)) || rn_coredns_up
    rn_kubelet_up
    log "real node $RN_NAME Ready (pods on $RN_SUBNET, host at $RN_HOST, DNS at $RN_HOST0)"
}

rn_components() { # what dev-cluster.sh starts for the real nodes, in order
    local i
    for ((i = 0; i < $(rn_count); i++)); do
        if ((i == 0)); then echo containerd coredns kubelet; else echo "containerd-$i kubelet-$i"; fi
    done
}

rn_check_subnets() { # N nodes: a /24 each, said before anything starts (one node: as it always was)
    (($(rn_count) > 1)) || return 0
    local i sub
    for ((i = 0; i < $(rn_count); i++)); do
        sub=$(rn_subnet_of "$i")
        [[ "$sub" =~ ^[0-9]+\.[0-9]+\.([0-9]+)\.0/24$ ]] && ((BASH_REMATCH[1] <= 255)) \
            || die "real node $i of $(rn_count) has no pod /24 (got '$sub'): DEVCLUSTER_POD_SUBNETS names one a.b.c.0/24 per node (it names ${#RN_SUBNETS[@]}), or leave it out and node i takes DEVCLUSTER_POD_SUBNET's third number plus i"
    done
}

rn_up_all() {
    local i
    if (($(rn_count) > 1)); then # pods of one node reach another's through the host: it forwards
        mkdir -p "$STATE/realnode"
        sysctl -n net.ipv4.ip_forward >"$STATE/realnode/ip_forward.orig"
        sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
    fi
    for ((i = 0; i < $(rn_count); i++)); do rn_select "$i"; rn_up; done
    rn_select 0
}

# ---------------------------------------------------------------------------------------- down

rn_delete_pods() { # through the API, so that the kubelet tears each pod's network down (CNI DEL)
    [[ -f "$STATE/kube-apiserver.port" ]] && pid_alive kube-apiserver && pid_alive "$(rn_comp kubelet)" || return 0
    local pods
    pods=$(api GET "/api/v1/pods?fieldSelector=spec.nodeName%3D$RN_NAME" 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    print(p["metadata"]["namespace"], p["metadata"]["name"])' 2>/dev/null) || return 0
    [[ -n "$pods" ]] || return 0
    local ns name
    while read -r ns name; do
        api DELETE "/api/v1/namespaces/$ns/pods/$name" '{"gracePeriodSeconds": 0}' >/dev/null 2>&1 || true
    done <<<"$pods"
    for _ in $(seq 60); do # until no container runs (their records stay until the kubelet's GC)
        [[ -z "$(ctr_ tasks ls -q 2>/dev/null)" ]] && break
        sleep 0.5
    done
}

rn_kill_shims() { # shims and container processes of our containerd, by its socket path
    local pids
    pids=$(pgrep -f -- "-address $(rn_sock)" || true)
    [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
}

rn_kill_cgroups() { # every process still in the node's cgroups is one of its pods': kill, remove them
    local c dir
    for c in $(rn_cgroup_dirs); do
        [[ -d "$c" ]] || continue
        find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    done
    sleep 0.2
    for c in $(rn_cgroup_dirs); do
        [[ -d "$c" ]] || continue
        find "$c" -depth -type d 2>/dev/null | while read -r dir; do rmdir "$dir" 2>/dev/null || true; done
    done
}

rn_unmount_all() { # everything mounted under the state dir, deepest first (nothing mounted: fine)
    local m
    awk -v under="$(rn_state)/" 'index($5, under) == 1 { print $5 }' /proc/self/mountinfo | sort -r \
        | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}

rn_network_down() {
    ip link del "$RN_BRIDGE" 2>/dev/null || true
    rn_network_down_accepts
    local rule
    iptables -w -t nat -S PREROUTING 2>/dev/null | grep -- "-i $RN_BRIDGE " | grep -- "$RN_COMMENT" \
        | while read -r rule; do eval "iptables -w -t nat ${rule/-A/-D}" 2>/dev/null || true; done
    while iptables -w -D FORWARD -s "$RN_SUBNET" ! -d "$RN_SUBNET" -j DROP -m comment --comment "$RN_COMMENT" 2>/dev/null; do :; done
}

rn_network_down_accepts() { # the ACCEPT rules from this node's subnet to the other nodes'
    local rule
    iptables -w -S FORWARD 2>/dev/null | grep -- "-s $RN_SUBNET -d " | grep -- "-j ACCEPT" | grep -- "$RN_COMMENT" \
        | while read -r rule; do eval "iptables -w ${rule/-A/-D}" 2>/dev/null || true; done
}

rn_restore_sysctls() {
    [[ -f "$(rn_state)/sysctl.orig" ]] || return 0
    local kv
    while read -r kv; do sysctl -q -w "$kv" >/dev/null 2>&1 || true; done <"$(rn_state)/sysctl.orig"
}

rn_recorded_subnet() { # the subnet whose bridge this state's node created (none: it created none)
    local conf
    conf="$(rn_state)/cni/net.d/10-torchjob.conflist"
    if [[ -f "$(rn_state)/subnet" ]]; then
        cat "$(rn_state)/subnet"
    elif [[ -f "$conf" ]]; then # a node started before the subnet had a record of its own
        sed -n 's/.*"subnet": "\([^"]*\)".*/\1/p' "$conf"
    fi
}

# Whatever state it finds (a node up, half up, or half torn down): every step best effort (`try`,
# in dev-cluster.sh), so that one failing never leaves the rest running.
rn_down() {
    [[ -d "$(rn_state)" ]] || return 0
    # This node's names, not this environment's: local, so that an `up` that cleans a stale state
    # first goes on with its own.
    local RN_NAME=$RN_NAME RN_SUBNET=$RN_SUBNET RN_NET=$RN_NET RN_HOST=$RN_HOST RN_BRIDGE=$RN_BRIDGE subnet
    subnet=$(rn_recorded_subnet)
    [[ ! -f "$(rn_state)/name" ]] || RN_NAME=$(cat "$(rn_state)/name")
    [[ -z "$subnet" ]] || rn_use_subnet "$subnet"
    try rn_delete_pods
    try stop_proc "$(rn_comp kubelet)"
    ((RN_I > 0)) || try stop_proc coredns
    try rn_kill_shims
    # The bridge's name is its cgroups' name: only a node that made the bridge has pods in them.
    [[ -z "$subnet" ]] || try rn_kill_cgroups
    try stop_proc "$(rn_comp containerd)"
    try rn_unmount_all
    [[ -z "$subnet" ]] || try rn_network_down
    try rn_restore_sysctls
    ((RN_I > 0)) || try rn_restore_ip_forward
    rm -rf --one-file-system "$(rn_state)" 2>/dev/null || log "WARNING: could not remove all of $(rn_state)"
}

rn_restore_ip_forward() { # as it was before N nodes, unless another N-node dev cluster still forwards
    [[ -f "$(rn_state)/ip_forward.orig" ]] || return 0
    iptables -w -S FORWARD 2>/dev/null | grep -- "-j ACCEPT" | grep -q -- "$RN_COMMENT" && return 0
    sysctl -q -w "net.ipv4.ip_forward=$(cat "$(rn_state)/ip_forward.orig")" >/dev/null
}

rn_down_all() { # every node with a state here, node 0 (CoreDNS, the sysctls' first values) last
    local i
    for i in $(rn_nodes_up); do RN_I=$i; rn_down; done
    RN_I=0
}
