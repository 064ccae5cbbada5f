#!/usr/bin/env bash
# A real Kubernetes control plane for Kerf's end-to-end tests, on 127.0.0.1 only.
#
#   scripts/e2e-cluster.sh build        build (once, cached) etcd, kube-apiserver,
#                                       kube-controller-manager, kube-scheduler and kwok
#   scripts/e2e-cluster.sh start DIR    start them with state in DIR; writes DIR/kubeconfig
#                                       and DIR/pids; prints DIR/kubeconfig
#   scripts/e2e-cluster.sh stop DIR     stop what `start DIR` started
#   scripts/e2e-cluster.sh kill DIR C   SIGKILL component C (etcd, kube-apiserver, ...)
#   scripts/e2e-cluster.sh restart DIR C
#                                       start component C again with its command line
#   scripts/e2e-cluster.sh bin          print the directory holding the binaries
#   scripts/e2e-cluster.sh helm         build (once, cached) helm; print its path
#   scripts/e2e-cluster.sh karpenter-hash
#                                       build (once, cached) scripts/karpenter-hash over
#                                       Karpenter's Go modules; print the binary's path
#   scripts/e2e-cluster.sh karpenter-kwok
#                                       build (once, cached) Karpenter's kwok provider and
#                                       fetch the CRDs it runs on; print their directory
#                                       (DIR/kwok, DIR/crds)
#   scripts/e2e-cluster.sh karpenter-crds
#                                       fetch (once, cached) Karpenter's own CRDs (NodePool,
#                                       NodeClaim, EC2NodeClass, NodeOverlay, CapacityBuffer)
#                                       from the Go module proxy; print their directory
#
# Everything builds from the Go module proxy: Kubernetes at $KUBE_VERSION with each staging
# module replaced by its published v0.Y.Z, etcd through a small main calling etcdmain.Main, and
# kwok with `go install`. The cache is ~/.cache/kerf-e2e/<versions>/ (override: KERF_E2E_CACHE).
# `start` leaves the API server's priority and fairness off (the benchmarks time the control
# plane without its queues) unless KERF_E2E_APF is set (the fault suite's throttling case,
# `bench-vs-karpenter.py --few-seats`); with KERF_AUDIT_DIR set it audits the chart's
# ServiceAccount there. KERF_E2E_NODE_LEASE_SECONDS sets kwok's node lease (renewed every
# quarter of it) and kube-controller-manager's grace for a silent node to it; unset, kwok's
# 40 s lease with a 20 s grace (a node gone quiet is NotReady soon, as the repair tests want).
# The 50,000-pod race sets it: 4,500 nodes renewing every 10 s are 450 writes a second, which
# two vCPUs' API server cannot keep up with, and the node lifecycle then evicts Running pods.
# KERF_E2E_KWOK_PARALLELISM sets how many pods, nodes and node leases kwok works on at once
# (its own default is 4 of each): each is one API call waiting on a busy API server, so at
# 50,000 pods and 7,000 nodes four at a time is about 7 nodes and 7 pods a second, and nodes
# waiting for their first lease go Unknown; the race sets it past 10,000 pods.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
CACHE="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}"
BIN="$CACHE/bin"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
HELM_BIN="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/helm-${HELM_VERSION}/helm"
# the Karpenter release whose CRDs a drop-in user has installed (core and AWS provider)
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.15.0}"
KARPENTER_CRDS="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/karpenter-crds-${KARPENTER_VERSION}"

SCRIPTS="$(cd "$(dirname "$0")" && pwd)"

log() { echo "e2e-cluster: $*" >&2; }

need_go() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  if ! command -v go >/dev/null 2>&1; then
    log "go not found on PATH: the control plane builds from the Go module proxy (Go >= 1.25)"
    exit 1
  fi
  # an older go fetches the toolchain the modules ask for from the module proxy
  export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
}

build_kubernetes() {
  local src="$CACHE/src/kubernetes"
  mkdir -p "$src"
  local staging_version="v0.${KUBE_VERSION#v1.}"
  local major minor
  major=1
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  (
    cd "$src"
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    {
      echo "module kerf.dev/e2e/kubernetes"
      echo
      echo "go 1.25.0"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      echo "replace ("
      grep -E '=> \./staging/src/' "$gomod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } >go.mod
    cat >tools.go <<'EOF'
//go:build tools

// Package tools pins the Kubernetes commands the end-to-end tests run.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
EOF
    go mod tidy
    local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
    for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
      if [ ! -x "$BIN/$cmd" ]; then
        log "building $cmd $KUBE_VERSION"
        go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
        mv "$BIN/$cmd.tmp" "$BIN/$cmd"
      fi
    done
  )
}

build_etcd() {
  local src="$CACHE/src/etcd"
  mkdir -p "$src"
  (
    cd "$src"
    cat >go.mod <<EOF
module kerf.dev/e2e/etcd

go 1.25.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
    cat >main.go <<'EOF'
// Command etcd runs etcd's server main: `go install` of the server module is refused
// because its go.mod has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
    go mod tidy
    log "building etcd $ETCD_VERSION"
    go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .
    mv "$BIN/etcd.tmp" "$BIN/etcd"
  )
}

build_kwok() {
  log "building kwok $KWOK_VERSION"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local dir
  dir="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  # The node stages (initialize, heartbeat) and pod stages (ready, complete, delete) kwok
  # ships for fast fake nodes.
  : >"$CACHE/stages.yaml.tmp"
  for f in "$dir"/kustomize/stage/node/fast/*.yaml "$dir"/kustomize/stage/pod/fast/*.yaml; do
    [ -f "$f" ] || continue
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    { echo "---"; cat "$f"; } >>"$CACHE/stages.yaml.tmp"
  done
  mv "$CACHE/stages.yaml.tmp" "$CACHE/stages.yaml"
}

# helm lints and renders charts/ in crates/kerf-operator/tests/chart.rs
build_helm() {
  log "building helm $HELM_VERSION"
  GOBIN="$(dirname "$HELM_BIN")" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

cmd_helm() {
  if [ ! -x "$HELM_BIN" ]; then
    need_go
    build_helm
  fi
  echo "$HELM_BIN"
}

# Karpenter's CRDs as its release ships them, from the module zips on the Go module proxy
# (the same source the control plane builds from)
cmd_karpenter_crds() {
  if [ ! -f "$KARPENTER_CRDS/autoscaling.x-k8s.io_capacitybuffers.yaml" ]; then
    local proxy tmp
    proxy="$(go env GOPROXY 2>/dev/null || true)"
    proxy="${proxy%%,*}"
    case "$proxy" in http*) ;; *) proxy="https://proxy.golang.org" ;; esac
    tmp="$(mktemp -d)"
    log "fetching Karpenter $KARPENTER_VERSION CRDs from $proxy"
    curl -fsSL -o "$tmp/core.zip" "$proxy/sigs.k8s.io/karpenter/@v/$KARPENTER_VERSION.zip"
    curl -fsSL -o "$tmp/aws.zip" "$proxy/github.com/aws/karpenter-provider-aws/@v/$KARPENTER_VERSION.zip"
    mkdir -p "$tmp/crds"
    python3 - "$tmp" "$KARPENTER_VERSION" <<'PY'
import sys, zipfile
tmp, version = sys.argv[1], sys.argv[2]
wanted = {
    "core.zip": ("sigs.k8s.io/karpenter@" + version + "/pkg/apis/crds/",
                 ["karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml",
                  "karpenter.sh_nodeoverlays.yaml", "autoscaling.x-k8s.io_capacitybuffers.yaml"]),
    "aws.zip": ("github.com/aws/karpenter-provider-aws@" + version + "/pkg/apis/crds/",
                ["karpenter.k8s.aws_ec2nodeclasses.yaml"]),
}
for archive, (prefix, names) in wanted.items():
    with zipfile.ZipFile(f"{tmp}/{archive}") as z:
        for name in names:
            with open(f"{tmp}/crds/{name}", "wb") as out:
                out.write(z.read(prefix + name))
PY
    mkdir -p "$(dirname "$KARPENTER_CRDS")"
    rm -rf "$KARPENTER_CRDS"
    mv "$tmp/crds" "$KARPENTER_CRDS"
    rm -rf "$tmp"
  fi
  echo "$KARPENTER_CRDS"
}

# scripts/karpenter-hash (Karpenter's own hash functions over its API types) built against
# Karpenter's modules from the Go module proxy; cached by version and by the program's text
cmd_karpenter_hash() {
  local sum dir
  sum="$(sha256sum "$SCRIPTS/karpenter-hash/main.go" | cut -c1-12)"
  dir="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/karpenter-hash-${KARPENTER_VERSION}-$sum"
  if [ ! -x "$dir/karpenter-hash" ]; then
    need_go
    log "building karpenter-hash over Karpenter $KARPENTER_VERSION"
    mkdir -p "$dir/src"
    cp "$SCRIPTS/karpenter-hash/main.go" "$dir/src/main.go"
    (
      cd "$dir/src"
      printf 'module kerf.dev/e2e/karpenter-hash\n\ngo 1.26\n\nrequire github.com/aws/karpenter-provider-aws %s\n' \
        "$KARPENTER_VERSION" >go.mod
      # the provider's SDK client for Timestream (loaded, never called) at a release the
      # proxy still serves: it no longer serves the v1.43.1 the provider asks for
      printf '\nreplace github.com/aws/aws-sdk-go-v2/service/timestreamwrite => github.com/aws/aws-sdk-go-v2/service/timestreamwrite v1.43.0\n' >>go.mod
      # only the packages main.go imports (`go mod tidy` would fetch every test dependency
      # of the AWS provider, some of which the proxy no longer serves)
      go get "github.com/aws/karpenter-provider-aws@$KARPENTER_VERSION"
      go build -mod=mod -o "$dir/karpenter-hash" .
    )
  fi
  echo "$dir/karpenter-hash"
}

# Karpenter's own kwok provider (`go install sigs.k8s.io/karpenter/kwok`), the autoscaler Kerf
# is compared with and handed over to; and the CRDs it runs on (its NodePool and NodeClaim
# CRDs, which allow the karpenter.kwok.sh labels, and KWOKNodeClass) from the same module
KARPENTER_KWOK="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/karpenter-kwok-${KARPENTER_VERSION}"
cmd_karpenter_kwok() {
  if [ ! -x "$KARPENTER_KWOK/kwok" ] || [ ! -f "$KARPENTER_KWOK/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" ]; then
    need_go
    log "building Karpenter $KARPENTER_VERSION's kwok provider"
    mkdir -p "$KARPENTER_KWOK"
    GOBIN="$KARPENTER_KWOK" go install "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION"
    local zip
    zip="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" | sed -n 's/.*"Zip": "\(.*\)",/\1/p')"
    python3 - "$zip" "$KARPENTER_VERSION" "$KARPENTER_KWOK/crds" <<'PY'
import os, sys, zipfile
archive, version, out = sys.argv[1:4]
prefix = "sigs.k8s.io/karpenter@" + version + "/kwok/"
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(archive) as z:
    for name in ["charts/crds/karpenter.sh_nodepools.yaml", "charts/crds/karpenter.sh_nodeclaims.yaml",
                 "apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"]:
        with open(os.path.join(out, os.path.basename(name)), "wb") as f:
            f.write(z.read(prefix + name))
PY
  fi
  echo "$KARPENTER_KWOK"
}

cmd_build() {
  need_go
  mkdir -p "$BIN"
  [ -x "$BIN/etcd" ] || build_etcd
  [ -x "$BIN/kwok" ] && [ -f "$CACHE/stages.yaml" ] || build_kwok
  [ -x "$HELM_BIN" ] || build_helm
  cmd_karpenter_crds >/dev/null
  cmd_karpenter_hash >/dev/null
  cmd_karpenter_kwok >/dev/null
  if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
    build_kubernetes
  fi
  log "binaries in $BIN"
}

# N free loopback ports, distinct, drawn at random from below the kernel's ephemeral range:
# a port asked of the kernel (bind to 0) is one that any outgoing connection of the tests
# running beside this one may take before the component binds it; every socket is held until
# all are chosen.
free_ports() {
  python3 -c 'import random, socket, sys
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
held = []
while len(held) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(10000, max(low, 11000))))
        held.append(s)
    except OSError:
        s.close()
print(" ".join(str(s.getsockname()[1]) for s in held))
for s in held: s.close()' "$1"
}

wait_for() {
  local what="$1" deadline=$((SECONDS + $2)) pid
  shift 2
  pid="$(pid_of "$DIR" "$what")"
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "$what did not come up; see the logs in $DIR"
      return 1
    fi
    if [ -n "$pid" ] && ! running "$pid"; then
      log "$what exited: $(tail -n 3 "$DIR/$what.log" 2>/dev/null)"
      return 1
    fi
    sleep 0.2
  done
}

# Starts component NAME in the background, its output to $DIR/NAME.log, and records its pid
# and its command line (so `restart` can start it again exactly so).
launch() {
  local name="$1"
  shift
  printf '%q ' "$@" >"$DIR/cmd-$name"
  "$@" >>"$DIR/$name.log" 2>&1 &
  echo "$name $!" >>"$DIR/pids"
}

# Whether process PID still runs or holds what it had (its ports): a component a finished run
# of this script started is no child of the next run, and once it exits it stays a zombie
# (state Z) until PID 1 reaps it, which `kill -0` still finds. A zombie whose other threads
# are still exiting still holds the process's files, its listening sockets among them.
running() {
  local state
  [ -e "/proc/$1" ] || return 1
  state="$(awk '{sub(/.*\) /, ""); print $1}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] || return 1
  [ "$state" != Z ] && return 0
  [ "$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -gt 1 ]
}

pid_of() {
  awk -v n="$2" '$1 == n {p = $2} END {print p}' "$1/pids"
}

# Kills component NAME of the control plane in DIR at once (SIGKILL, as a crash would).
cmd_kill() {
  local pid
  pid="$(pid_of "$1" "$2")"
  [ -n "$pid" ] || { log "no $2 in $1/pids"; exit 1; }
  kill -9 "$pid" 2>/dev/null || true
  while running "$pid"; do sleep 0.05; done
}

# Starts component NAME of the control plane in DIR again with the command line it had.
cmd_restart() {
  DIR="$(cd "$1" && pwd)"
  [ -f "$DIR/cmd-$2" ] || { log "no $2 was started in $DIR"; exit 1; }
  local pid
  pid="$(pid_of "$DIR" "$2")"
  if [ -n "$pid" ] && running "$pid"; then
    log "$2 is running (pid $pid)"
    exit 1
  fi
  eval "launch $2 $(cat "$DIR/cmd-$2")"
}

# Starts the control plane in DIR; a component that does not come up (most often a port that
# another control plane, started beside this one, took between free_ports and the bind) stops
# what was started and the whole is tried again on fresh ports, three times at most.
cmd_start() {
  DIR="$(mkdir -p "$1" && cd "$1" && pwd)"
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if [ ! -x "$BIN/$b" ]; then
      log "$BIN/$b missing: run scripts/e2e-cluster.sh build first"
      exit 1
    fi
  done
  local attempt
  for attempt in 1 2 3; do
    if start_once; then
      echo "$DIR/kubeconfig"
      return 0
    fi
    log "attempt $attempt: the control plane did not come up; stopping what started"
    cmd_stop "$DIR"
    rm -rf "$DIR/etcd" "$DIR/pki"
  done
  exit 1
}

# Runs as an `if` condition, where `set -e` does not hold: each step that can fail says so.
start_once() {
  : >"$DIR/pids" || return 1
  local etcd_port etcd_peer api_port kcm_port sched_port kwok_port
  read -r etcd_port etcd_peer api_port kcm_port sched_port kwok_port <<<"$(free_ports 6)"

  launch etcd "$BIN/etcd" --data-dir "$DIR/etcd" --name kerf-e2e \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "kerf-e2e=http://127.0.0.1:$etcd_peer" \
    --quota-backend-bytes 2147483648 --log-level warn

  openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null || return 1
  local token
  token="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  echo "$token,kerf-e2e-admin,kerf-e2e-admin,system:masters" >"$DIR/tokens.csv" || return 1

  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health" || return 1

  # with KERF_AUDIT_DIR set, the API server logs there every request the chart's
  # ServiceAccount makes (scripts/rbac-audit.py compares them with the chart's RBAC)
  local audit=()
  if [ -n "${KERF_AUDIT_DIR:-}" ]; then
    mkdir -p "$KERF_AUDIT_DIR" || return 1
    cat >"$DIR/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:serviceaccount:kube-system:kerf"]
- level: None
EOF
    audit=(--audit-policy-file "$DIR/audit-policy.yaml"
      --audit-log-path "$KERF_AUDIT_DIR/$(basename "$DIR").log")
  fi

  local apf=false
  if [ -n "${KERF_E2E_APF:-}" ]; then
    apf=true
  fi

  launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --cert-dir "$DIR/pki" --token-auth-file "$DIR/tokens.csv" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$DIR/sa.key" --service-account-signing-key-file "$DIR/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged \
    --enable-priority-and-fairness=$apf ${audit[@]+"${audit[@]}"}

  cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kerf-e2e
  cluster:
    server: https://127.0.0.1:$api_port
    insecure-skip-tls-verify: true
users:
- name: kerf-e2e-admin
  user:
    token: $token
contexts:
- name: kerf-e2e
  context: {cluster: kerf-e2e, user: kerf-e2e-admin}
current-context: kerf-e2e
EOF
  wait_for kube-apiserver 60 curl -skf -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz" ||
    return 1

  local lease=() grace=20s
  if [ -n "${KERF_E2E_NODE_LEASE_SECONDS:-}" ]; then
    lease=(--node-lease-duration-seconds "$KERF_E2E_NODE_LEASE_SECONDS")
    grace="${KERF_E2E_NODE_LEASE_SECONDS}s"
  fi
  local kwok_config=(--config "$CACHE/stages.yaml")
  if [ -n "${KERF_E2E_KWOK_PARALLELISM:-}" ]; then
    local n="$KERF_E2E_KWOK_PARALLELISM"
    case "$n" in *[!0-9]*) log "KERF_E2E_KWOK_PARALLELISM must be a number, not $n"; return 1 ;; esac
    printf '%s\n' "apiVersion: config.kwok.x-k8s.io/v1alpha1" "kind: KwokConfiguration" "options:" \
      "  podPlayStageParallelism: $n" "  nodePlayStageParallelism: $n" "  nodeLeaseParallelism: $n" \
      >"$DIR/kwok-options.yaml"
    kwok_config+=(--config "$DIR/kwok-options.yaml")
  fi

  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$DIR/kubeconfig" --authentication-kubeconfig "$DIR/kubeconfig" \
    --authorization-kubeconfig "$DIR/kubeconfig" --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --leader-elect=false --service-account-private-key-file "$DIR/sa.key" \
    --use-service-account-credentials=false --cluster-signing-duration 24h \
    --node-monitor-grace-period "$grace" --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10 \
    --kube-api-qps 200 --kube-api-burst 400

  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$DIR/kubeconfig" --authentication-kubeconfig "$DIR/kubeconfig" \
    --authorization-kubeconfig "$DIR/kubeconfig" --bind-address 127.0.0.1 --secure-port "$sched_port" \
    --leader-elect=false --kube-api-qps 200 --kube-api-burst 400

  launch kwok "$BIN/kwok" --kubeconfig "$DIR/kubeconfig" "${kwok_config[@]}" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --server-address "127.0.0.1:$kwok_port" --node-ip 127.0.0.1 ${lease[@]+"${lease[@]}"}

  wait_for kube-scheduler 60 curl -skf "https://127.0.0.1:$sched_port/healthz" || return 1
  wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:$kcm_port/healthz" || return 1
  # without kwok no node turns Ready: a test would wait out its whole limit on pending pods
  wait_for kwok 60 curl -sf "http://127.0.0.1:$kwok_port/healthz" || return 1
  # a health check can be answered by whoever holds a port a component could not bind (CI
  # once saw kube-controller-manager exit `address already in use` while another control
  # plane's answered for it): every component must still be running a moment later
  sleep 1
  local name pid
  while read -r name pid; do
    if ! running "$pid"; then
      log "$name exited: $(tail -n 3 "$DIR/$name.log" 2>/dev/null)"
      return 1
    fi
  done <"$DIR/pids"
}

# stop_pids "PID ...": SIGTERM them, wait up to 5 s for all, SIGKILL what is left.
stop_pids() {
  local pids="$1" alive pid
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive=0
    for pid in $pids; do running "$pid" && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
}

cmd_stop() {
  local dir="$1"
  [ -f "$dir/pids" ] || return 0
  # The clients are asked to stop together, then etcd (each takes 1-3 s to shut down; one
  # after the other they took 10 s, paid by every test; etcd asked beside kube-apiserver waits
  # for it, 8 s); whatever still runs after 5 s is killed.
  stop_pids "$(awk '$1 != "etcd" {print $2}' "$dir/pids")"
  stop_pids "$(awk '$1 == "etcd" {print $2}' "$dir/pids")"
  rm -f "$dir/pids"
}

case "${1:-}" in
  build) cmd_build ;;
  start) [ -n "${2:-}" ] || { log "usage: $0 start DIR"; exit 2; }; cmd_start "$2" ;;
  stop) [ -n "${2:-}" ] || { log "usage: $0 stop DIR"; exit 2; }; cmd_stop "$2" ;;
  kill) [ -n "${3:-}" ] || { log "usage: $0 kill DIR COMPONENT"; exit 2; }; cmd_kill "$2" "$3" ;;
  restart) [ -n "${3:-}" ] || { log "usage: $0 restart DIR COMPONENT"; exit 2; }; cmd_restart "$2" "$3" ;;
  bin) echo "$BIN" ;;
  helm) cmd_helm ;;
  karpenter-crds) cmd_karpenter_crds ;;
  karpenter-hash) cmd_karpenter_hash ;;
  karpenter-kwok) cmd_karpenter_kwok ;;
  *) log "usage: $0 build | start DIR | stop DIR | kill DIR COMPONENT | restart DIR COMPONENT | bin | helm | karpenter-crds | karpenter-hash | karpenter-kwok"; exit 2 ;;
esac
