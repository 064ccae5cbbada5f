#!/usr/bin/env bash
# Kerf on a local cluster, in one command: a real control plane with kwok on 127.0.0.1, Kerf's
# CRDs, `kerf-operator --cloud-provider kwok`, and seed 004's NodePool and `inflate`
# Deployment (Karpenter's getting-started guide). It scales `inflate` up, shows the NodeClaims
# Kerf launches and the pods running on them, scales it back to 0, shows consolidation take
# the nodes away, and tears everything down.
#
#   scripts/demo.sh [--replicas N] [--keep]
#
#   --replicas N  how far to scale inflate (default 10; one cpu a pod)
#   --keep        leave the cluster and the operator running at the end, and print how to
#                 reach them and how to stop them
#
# Needs what the tests need (Go for the control plane's first build, about 20 minutes, cached
# under ~/.cache/kerf-e2e; kubectl; a Rust toolchain for kerf-operator). KERF_OPERATOR=PATH
# runs that operator binary instead of building one (`cargo build --release -p kerf-operator`),
# and the `kerf` beside it (or KERF=PATH) for `kerf crds`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPLICAS=10
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) REPLICAS="${2:?--replicas needs a number}"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$REPLICAS" in
  ''|*[!0-9]*) echo "demo: --replicas must be a whole number, not '$REPLICAS'" >&2; exit 2 ;;
esac
command -v kubectl >/dev/null 2>&1 || { echo "demo: kubectl not found on PATH" >&2; exit 1; }

# headings in bold on a terminal, plain in a log
if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
say() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
elapsed() { echo "$(( $(date +%s) - START ))s"; }

if [ -n "${KERF_OPERATOR:-}" ]; then
  OPERATOR="$KERF_OPERATOR"
else
  say "building kerf-operator and kerf (cargo build --release; about 16 minutes the first time)"
  cargo build --release -q -p kerf-operator -p kerf --manifest-path "$ROOT/Cargo.toml"
  OPERATOR="$ROOT/target/release/kerf-operator"
fi
# the kerf command line beside the operator (KERF=PATH to name another)
KERF="${KERF:-$(dirname "$OPERATOR")/kerf}"
[ -x "$KERF" ] || KERF="cargo run -q --manifest-path $ROOT/Cargo.toml -p kerf --"

say "building the control plane (cached after the first time)"
"$ROOT/scripts/e2e-cluster.sh" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kerf-demo.XXXXXX")"
OPERATOR_PID=""
teardown() {
  [ -n "$OPERATOR_PID" ] && kill "$OPERATOR_PID" 2>/dev/null && wait "$OPERATOR_PID" 2>/dev/null
  "$ROOT/scripts/e2e-cluster.sh" stop "$WORK" >/dev/null 2>&1 || true
  echo "demo: stopped; the operator's log and the cluster's state are in $WORK"
}
if [ "$KEEP" -eq 0 ]; then trap teardown EXIT; fi

say "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok in $WORK"
"$ROOT/scripts/e2e-cluster.sh" start "$WORK" >/dev/null
export KUBECONFIG="$WORK/kubeconfig"

say "installing Kerf's CRDs and seed 004 (a NodePool, an EC2NodeClass, the inflate Deployment)"
$KERF crds | kubectl apply --server-side -f - >/dev/null
kubectl wait --for=condition=Established crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh \
  crd/ec2nodeclasses.karpenter.k8s.aws --timeout=60s >/dev/null
kubectl apply -f "$ROOT/fixtures/seeds/004-getting-started.yaml"

say "starting kerf-operator --cloud-provider kwok (log: $WORK/operator.log)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
METRICS_PORT="$(free_port)" HEALTH_PROBE_PORT="$(free_port)" BIND_ADDRESS=127.0.0.1 \
  "$OPERATOR" --cloud-provider kwok --disable-leader-election true >"$WORK/operator.log" 2>&1 &
OPERATOR_PID=$!

# Waits until CHECK (a shell command) succeeds, showing the NodeClaims as they change; fails
# after LIMIT seconds with the operator's last log lines.
watch_until() {
  local what="$1" limit="$2" check="$3" shown="" now
  local deadline=$(( $(date +%s) + limit ))
  while ! eval "$check"; do
    now="$(kubectl get nodeclaims --no-headers 2>/dev/null | awk '{print $1, $2, $3, $4, $6}' | sort)"
    if [ "$now" != "$shown" ]; then
      echo "--- $(elapsed): NodeClaims (name type capacity zone ready)"
      [ -n "$now" ] && echo "$now" || echo "(none)"
      shown="$now"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "demo: $what did not happen within ${limit}s; the operator's last lines:" >&2
      tail -n 20 "$WORK/operator.log" >&2
      exit 1
    fi
    if ! kill -0 "$OPERATOR_PID" 2>/dev/null; then
      echo "demo: kerf-operator exited; its last lines:" >&2
      tail -n 20 "$WORK/operator.log" >&2
      exit 1
    fi
    sleep 1
  done
}
running() {
  [ "$(kubectl get pods -l app=inflate --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)" -eq "$REPLICAS" ]
}
no_nodeclaims() {
  [ "$(kubectl get nodeclaims --no-headers 2>/dev/null | wc -l)" -eq 0 ]
}

START=$(date +%s)
say "kubectl scale deployment/inflate --replicas $REPLICAS"
kubectl scale deployment/inflate --replicas "$REPLICAS" >/dev/null
watch_until "every inflate pod Running" 180 running
echo "demo: all $REPLICAS inflate pods Running after $(elapsed)"
kubectl get nodeclaims
kubectl get pods -l app=inflate -o wide --no-headers | awk '{print $1, $3, $7}' | column -t

START=$(date +%s)
say "kubectl scale deployment/inflate --replicas 0 (consolidateAfter is 1m)"
kubectl scale deployment/inflate --replicas 0 >/dev/null
watch_until "every node consolidated away" 300 no_nodeclaims
echo "demo: every node gone after $(elapsed)"

say "what Kerf logged (the messages Karpenter logs)"
grep -o '"message":"[^"]*"' "$WORK/operator.log" | sort | uniq -c | sort -rn | head -n 12

if [ "$KEEP" -eq 1 ]; then
  say "left running"
  echo "export KUBECONFIG=$WORK/kubeconfig"
  echo "stop with: kill $OPERATOR_PID; $ROOT/scripts/e2e-cluster.sh stop $WORK"
fi
