#!/usr/bin/env bash
# Every test, as CI runs them: installs what the tests need (scripts/install-test-deps.sh),
# builds the workspace's test binaries once, then runs them in three streams at once and fails
# if any fails:
#
#   operator | the operator's end-to-end, Karpenter side-by-side, chart and AWS tests
#   faults   | its takeover (handover.rs), fault suite and image tests
#              Both on real control planes, moto and Karpenter, mostly waiting on their timers
#              (on 2 cores the CPUs sat 95 % idle through the fault suite), so their two lanes
#              of control planes run side by side; then, on a whole run, the chart's RBAC
#              against all their API servers' audit logs
#   rest     | every other crate's tests and doc tests, then a 40-seed swarm smoke run:
#              CPU-bound, run under `nice` so that the operator's timers keep their pace
#
# The binaries are run as `cargo test --workspace` runs them (from their package's directory),
# but straight from the one build: a `cargo test -p` per stream would resolve features apart
# and build much of the workspace again. Each line is prefixed with its stream. Arguments go to
# every test binary (e.g. `--nocapture`, or a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
scripts/install-test-deps.sh
list="$(mktemp)"
trap 'rm -f "$list"' EXIT
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    package = os.path.dirname(m["manifest_path"])
    kind = "test" if m["profile"]["test"] else "bin:" + m["target"]["name"]
    print("\t".join([kind, os.path.basename(package), package, m["target"]["src_path"], m["executable"]]))
' >"$list"
kerf="$(awk -F'\t' '$1 == "bin:kerf" {print $5}' "$list")"

# Runs the test binaries `keep` selects (an awk condition on the package's directory name, $2,
# and the target's source file, $4), one after another as cargo does; stops at the first
# failure.
run_tests() {
  local keep="$1"
  shift
  local kind name dir src exe ran=0
  # the list comes in on fd 3 and the tests get no stdin: nothing they start can eat the list
  while IFS=$'\t' read -r -u 3 kind name dir src exe; do
    echo "     Running ${src#"$root"/} (${exe#"$root"/})"
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" "$@" </dev/null) || return 1
    ran=$((ran + 1))
  done 3< <(awk -F'\t' "\$1 == \"test\" && ($keep)" "$list")
  echo "$ran test binaries passed"
}

# the operator's test binaries of the `faults` lane; the `operator` lane runs the others
faults_lane='$2 == "kerf-operator" && $4 ~ /tests\/(handover|faults|image)\.rs$/'
operator_lane='$2 == "kerf-operator" && $4 !~ /tests\/(handover|faults|image)\.rs$/'

rest() {
  # this stream and all it starts yield the CPUs to the operator's
  renice -n 10 -p "$BASHPID" >/dev/null
  run_tests '$2 != "kerf-operator"' "$@"
  cargo test --workspace --locked --doc
  # swarm testing: generated scenarios, every invariant checked; a failure is shrunk and
  # written under target/swarm-failures. The test build's binary runs them (its scheduling,
  # core and simulator crates are optimised); thousands of seeds are run by hand on a release
  # build (the book, docs/src/simulator.md, "Swarm testing").
  "$kerf" simulate --swarm 40 --seed 1 --failures target/swarm-failures
}

prefixed() {
  local name="$1"
  shift
  "$@" 2>&1 | sed -u "s/^/$name | /"
  return "${PIPESTATUS[0]}"
}

# every request the chart's ServiceAccount makes is audited; a whole run's requests must use
# every permission the chart grants and no other (scripts/rbac-audit.py)
audit="$root/target/rbac-audit"
rm -rf "$audit"
export KERF_AUDIT_DIR="$audit"
prefixed operator run_tests "$operator_lane" "$@" &
operator_pid=$!
prefixed faults run_tests "$faults_lane" "$@" &
faults_pid=$!
prefixed rest rest "$@" &
rest_pid=$!
failed=()
wait "$operator_pid" || failed+=(operator)
wait "$faults_pid" || failed+=(faults)
wait "$rest_pid" || failed+=(rest)
if [ ${#failed[@]} -eq 0 ] && [ $# -eq 0 ]; then
  prefixed operator python3 scripts/rbac-audit.py "$audit" || failed+=(rbac-audit)
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: every test passed"
