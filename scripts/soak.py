#!/usr/bin/env python3
"""A soak of kerf-operator: a real control plane with kwok, a workload that keeps changing,
faults drawn at random between its steps, and invariants checked from outside Kerf throughout.

  scripts/soak.py [--minutes N] [--seed S] [--keep] [--plant stuck-taint] [--operator PATH]
                  [--claim-bound S] [--disrupted-bound S] [--pending-bound S]

The benchmark of issue 68 runs by hand for two hours (`--minutes 120`, the default); CI's short
form (.ci/run) is `scripts/soak.py --minutes 2 --operator target/debug/kerf-operator`, the test
build's binary, since a release build would double CI's build time. Each run starts its own
control plane (scripts/e2e-cluster.sh), Karpenter kwok's CRDs, one KWOKNodeClass and one
NodePool, and `target/release/kerf-operator --cloud-provider kwok` (or `--operator`'s) as built
(this script builds nothing). The
operator reaches the API server only through a relay (`kubectl proxy` with a TCP relay in
front, as crates/kerf-operator/tests/support/proxy.rs), which the faults switch.

Workload, drawn from the seed (`--seed`, printed: the steps and the faults each repeat in a
replay; how they interleave, and the pods a step picks, depend on timing):
three Deployments (`web`, with a PodDisruptionBudget of maxUnavailable 1; `api`; `batch`)
scaled between 0 and 40 pods; running pods annotated `karpenter.sh/do-not-disrupt: "true"` and
the annotation taken off again; a NodePool template label changed (every node drifts); the
NodePool's first budget changed (its second budget allows no disruption one minute in three,
by schedule); spot capacity refused (`--kwok-no-capacity`) and returned, never refused in the
last 5 minutes (the operator remembers unavailable offerings for 3 minutes, as Karpenter, and
backs off from a failed command for 5: a fresh operator at the end remembers neither, so
runs of 5 minutes or less refuse none). The first steps take each kind once, in a random
order; four in five of the rest are scalings.

Faults, one at a time, between steps (the first 20-50 s in, each next 20-60 s after the last
one's window; 60-180 s and 60-240 s from 10 minutes on), each kind once before any repeats:
the operator SIGKILLed and started again with the same flags; kube-apiserver SIGKILLed for
15 s, etcd for 10 s (scripts/e2e-cluster.sh kill and restart); the relay answering 429 or 500
for 20 s (cutting the connections open, watches included), holding each request 2 s for 30 s,
or cutting every connection once. A fault's window lasts
from its start to its end plus a recovery allowance (90 s after the API server or etcd, 30 s
after the others); time inside a window does not count toward the bounds below.

Checked every 5 s from the API server's objects alone (a listing of nodes, NodeClaims, pods,
PodDisruptionBudgets, Deployments and NodePools; a watch of NodeClaims for the decisions),
never from Kerf's log or metrics:
  claim-without-node  no NodeClaim, not being deleted, without its Node past --claim-bound
                      (default 120 s: kwok nodes register in seconds; Karpenter allows 15 min)
  stuck-taint         no node tainted karpenter.sh/disrupted for --disrupted-bound (300 s)
                      while its NodeClaim is not being deleted
  pending-pod         no pod unbound past --pending-bound (180 s): every pod of the workload
                      fits the NodePool, whose limit (200 cpu) is far above the workload
  pdb                 a PodDisruptionBudget's disruptionsAllowed never below 0, and its
                      Deployment's pods bound, Running and not being deleted never fewer than
                      its replicas less maxUnavailable (from the pods: the budget's own
                      currentHealthy counts Ready, which kube-controller-manager takes from
                      every pod of a node whose kwok heartbeat runs late), except after a
                      scale-up until its pods have all run
  budget              when a node starts being disrupted (tainted, or its NodeClaim deleted),
                      its NodePool's disrupting nodes never more than the active budgets allow
                      (counted as Karpenter documents it: initialized nodes with a NodeClaim
                      whose instance is not terminating; the laxer of two successive samples)
  made-twice          no NodeClaim name made again under a new uid, no two NodeClaims with one
                      provider id, and no node of the NodePool left without a NodeClaim past
                      --claim-bound (an instance launched for a claim that was made anew).
                      NodeClaims deleted without a pod ever bound to their node are counted and
                      shown, not judged: a scale-in can leave a launch idle.
  operator-exit       the operator never exits by itself
At the end the faults stop, spot returns, the Deployments are scaled to 2 pods each, the
scheduled budget is dropped and do-not-disrupt taken off every pod (a cluster held still by a
budget window or by a pod that blocks a drain only waits), and it must
settle (nothing changes for 45 s, 90 s from 10 minutes on; within a third of the run, 3 to 15
minutes) with every NodeClaim holding a node, none being deleted, no node tainted and no pod
pending; then a fresh operator replaces the old one and, within 60 s, must create or delete no
NodeClaim, taint no node and evict no pod.

Sampled every minute (every 20 s below 10 minutes): the operator's resident memory, open file
descriptors and threads (/proc), its connections to the relay, the watches open on them (the
relay reads each request line) and the other connections idle over 30 s, and from its /metrics
`process_resident_memory_bytes`, `process_open_fds`, `tokio_alive_tasks` (the async runtime's
tasks, slope reported as RSS's) and any other family named for tasks or watches. Slopes per hour are least
squares within each operator process (a restart starts a new one), leaving out samples of a
process younger than 30 s and samples in a fault's window (a relay answering 429 closes every
connection).

`--plant stuck-taint` proves the checks can fail: a quarter into the run the script taints a
node karpenter.sh/disrupted:NoSchedule, marks it do-not-disrupt, and a ValidatingAdmissionPolicy
refuses any update that takes the taint off (Kerf's own clean-up of stale taints included).
The run must then report stuck-taint (with a bound shorter than what is left of the run, e.g.
`--disrupted-bound 60` in a 3-minute run) and the end state, and exit 1.

kwok never marks a pod Ready again once kube-controller-manager has marked it not Ready (a
late heartbeat, an API server outage), so a PodDisruptionBudget would count it unhealthy for
good and hold every drain of its node; the script plays that part of a kubelet (KubeletSync)
and reports how many pods it marked Ready again.

Beside the Deployments, a StatefulSet (`db`, scaled at random as they are) whose replicas each
claim a volume of one zone: its storage class has no provisioner and allows one zone, and as
many local PersistentVolumes of that zone are made at the start, so a replica's claim binds one
at its first scheduling (kube-scheduler's volume binding, as with a zonal EBS volume) and keeps
it through every scale-in, consolidation and drift: its pod may only ever run in that zone.
Prints progress on stderr and a Markdown
summary on stdout; exits 0 without violations, 1 with any, 2 when the run could not start.
Stops everything it started, on Ctrl-C and failure too; the work folder (control plane and
operator logs, and with a violation the cluster's state at the end, state-at-end.yaml) is
removed unless --keep is given or a violation was found.
"""

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "bench_vs_karpenter", os.path.join(ROOT, "scripts/bench-vs-karpenter.py"))
race = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race)
bench = race.bench

OPERATOR = os.path.join(ROOT, "target/release/kerf-operator")
E2E = os.path.join(ROOT, "scripts/e2e-cluster.sh")
NAMESPACE = "soak"
POOL = "soak"
TAINT = "karpenter.sh/disrupted"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
GENERATION_LABEL = "soak.kerf.dev/generation"
PLANTED_LABEL = "soak.kerf.dev/planted"

# name: (cpu, memory, most replicas)
DEPLOYMENTS = {"web": ("250m", "256Mi", 40), "api": ("200m", "128Mi", 40),
               "batch": ("500m", "512Mi", 30)}
PDB_DEPLOYMENT = "web"
# the StatefulSet: (cpu, memory, most replicas); each replica's claim binds, at its first
# scheduling, one of as many pre-made local volumes of one zone (no provisioner: kwok runs no
# CSI driver), and its pod may run only in that zone from then on, scaled in and out
STATEFULSET = "db"
STATEFUL = ("300m", "256Mi", 8)
VOLUME_ZONE = "test-zone-b"
STORAGE_CLASS = "soak-zonal"
FINAL_REPLICAS = 2
FIRST_BUDGET = "3"
BUDGET_CHOICES = ["1", "2", "3", "5", "20%", "50%"]

CHECK_EVERY_SECONDS = 5
KUBELET_SYNC_SECONDS = 10
# spot is never refused in the last minutes of the changes: the operator remembers unavailable
# offerings for 3 minutes (as Karpenter) and backs off from a failed command for 5, and a
# fresh operator, remembering neither, must find the settled cluster as the old one left it
SPOT_QUIET_SECONDS = 5 * 60
OPERATOR_YOUNG_SECONDS = 30
FRESH_OPERATOR_SECONDS = 60
KUBECTL_TIMEOUT_SECONDS = 30
# most steps are scalings; the rest draw these kinds
STEP_KINDS = ["drift", "budget", "spot", "protect"]
SCALINGS_PER_OTHER_STEP = 4
STEP_GAP_SECONDS = (10, 30)
# seconds from the start to the first fault, and from the end of one fault's window (its
# recovery included) to the next: faults are no more than about a third of a long run, so
# that the bounds, which do not count time in a fault's window, still bite
FIRST_FAULT_SECONDS = {"short": (20, 50), "long": (60, 180)}
FAULT_GAP_SECONDS = {"short": (20, 60), "long": (60, 240)}
# fault: (what it does, how long it lasts in seconds, recovery allowance in seconds)
FAULTS = {
    "operator-kill": ("the operator SIGKILLed, started again after 0-5 s", 5, 30),
    "apiserver-kill": ("kube-apiserver SIGKILLed, started again 15 s later (kube-scheduler "
                       "restarted then, as losing its Lease would)", 15, 90),
    "etcd-kill": ("etcd SIGKILLed, started again 10 s later (kube-scheduler restarted then)",
                  10, 90),
    "relay-429": ("the relay answers 429 to every request for 20 s", 20, 30),
    "relay-500": ("the relay answers 500 to every request for 20 s", 20, 30),
    "relay-hold": ("the relay holds every request 2 s, for 30 s", 30, 30),
    "watch-cut": ("the relay cuts every connection, watches included", 0, 30),
}

CLUSTER = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: default}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {POOL}}}
spec:
  template:
    metadata:
      labels: {{{GENERATION_LABEL}: "0"}}
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements:
      - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}
      - {{key: karpenter.kwok.sh/instance-size, operator: In, values: ["2", "4"]}}
      expireAfter: Never
  limits: {{cpu: "200"}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 15s
    budgets:
    - nodes: "{FIRST_BUDGET}"
    - nodes: "0"
      schedule: "*/3 * * * *"
      duration: 1m
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {PDB_DEPLOYMENT}, namespace: {NAMESPACE}}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: {PDB_DEPLOYMENT}}}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {STORAGE_CLASS}}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions:
  - {{key: topology.kubernetes.io/zone, values: [{VOLUME_ZONE}]}}
""" + "".join(f"""---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: soak-{STATEFULSET}-{i}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {STORAGE_CLASS}
  local: {{path: /var/soak/{i}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: topology.kubernetes.io/zone, operator: In, values: [{VOLUME_ZONE}]}}
""" for i in range(STATEFUL[2]))

PLANTED_POLICY = f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: soak-planted-stuck-taint}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [nodes]}}
  validations:
  - expression: >-
      !(has(oldObject.spec.taints) && oldObject.spec.taints.exists(t, t.key == '{TAINT}'))
      || (has(object.spec.taints) && object.spec.taints.exists(t, t.key == '{TAINT}'))
    message: "scripts/soak.py --plant stuck-taint: this node keeps its {TAINT} taint"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: soak-planted-stuck-taint}}
spec:
  policyName: soak-planted-stuck-taint
  validationActions: [Deny]
  matchResources:
    objectSelector:
      matchLabels: {{{PLANTED_LABEL}: "true"}}
"""


def pods_manifest(kind, name, replicas, cpu, memory, spec="", mounts="", claims=""):
    """A Deployment or StatefulSet of `replicas` pause pods asking for `cpu` and `memory`,
    with `spec` lines added to its spec, `mounts` to its container and `claims` after its
    template."""
    return f"""
apiVersion: apps/v1
kind: {kind}
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  replicas: {replicas}{spec}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: c
        image: pause
        resources: {{requests: {{cpu: "{cpu}", memory: "{memory}"}}}}{mounts}
{claims}"""


def deployment(name, replicas):
    cpu, memory, _ = DEPLOYMENTS[name]
    return pods_manifest("Deployment", name, replicas, cpu, memory)


def statefulset(replicas):
    cpu, memory, _ = STATEFUL
    return pods_manifest(
        "StatefulSet", STATEFULSET, replicas, cpu, memory,
        spec=f"\n  podManagementPolicy: Parallel\n  serviceName: {STATEFULSET}",
        mounts="\n        volumeMounts: [{name: data, mountPath: /data}]",
        claims=f"""  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: {STORAGE_CLASS}
      resources: {{requests: {{storage: 1Gi}}}}
""")


def most_replicas(name):
    """How many replicas a workload of the soak may be scaled to."""
    return STATEFUL[2] if name == STATEFULSET else DEPLOYMENTS[name][2]


def kubectl(env, *args, stdin=None, timeout=KUBECTL_TIMEOUT_SECONDS):
    """kubectl with a bound on the request and on the process; its output, or RuntimeError."""
    try:
        r = subprocess.run(["kubectl", f"--request-timeout={timeout}s", *args], input=stdin,
                           env=env, capture_output=True, text=True, timeout=timeout + 10)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"kubectl {' '.join(args)}: no answer in {timeout + 10} s") from e
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def stamp(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def utc(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")


# --- cron, for the budget check (read here, not taken from Kerf: a checker that imports the
# checked code checks nothing) ---

CRON_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]


def cron_field(text, low, high):
    """The values one crontab field allows: `*`, `N`, `A-B`, each with an optional `/STEP`,
    joined by commas (day of week 7 is Sunday, as 0)."""
    values = set()
    for part in text.split(","):
        body, _, step = part.partition("/")
        if body == "*":
            start, end = low, high
        elif "-" in body:
            start, end = (int(x) for x in body.split("-", 1))
        else:
            start = int(body)
            end = high if step else start
        values.update(range(start, end + 1, int(step) if step else 1))
    return {0 if (high == 6 and v == 7) else v for v in values}


def cron_fires(schedule, t):
    """Whether a five-field crontab `schedule` fires at the minute holding Unix time `t`
    (UTC); day of month and day of week are either-or when both are given, as cron reads them."""
    fields = schedule.split()
    if len(fields) != 5:
        raise ValueError(f"schedule {schedule!r}: five fields expected")
    sets = [cron_field(f, lo, hi) for f, (lo, hi) in zip(fields, CRON_RANGES)]
    d = datetime.fromtimestamp(t, timezone.utc)
    weekday = (d.weekday() + 1) % 7
    dom, dow = d.day in sets[2], weekday in sets[4]
    day = (dom or dow) if fields[2] != "*" and fields[4] != "*" else (dom and dow)
    return d.minute in sets[0] and d.hour in sets[1] and d.month in sets[3] and day


def duration_seconds(text):
    total, number = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number) * units[ch]
            number = ""
    return total


def budget_active(budget, t):
    """A budget with a schedule applies for `duration` from each time the schedule fires."""
    schedule = budget.get("schedule")
    if not schedule:
        return True
    length = duration_seconds(budget.get("duration", "0s"))
    minute = int(t // 60) * 60
    back = minute
    while back > t - length - 60:
        if back + length > t and cron_fires(schedule, back):
            return True
        back -= 60
    return False


def allowed_disruptions(pool, nodes, t):
    """The fewest nodes any active budget of `pool` (one naming no reason) lets be disrupted
    at `t`, of `nodes` nodes; percentages round up. None when no budget applies."""
    allowed = None
    for b in pool.get("spec", {}).get("disruption", {}).get("budgets", []):
        if b.get("reasons") or not budget_active(b, t):
            continue
        value = b["nodes"]
        n = -(-nodes * int(value[:-1]) // 100) if value.endswith("%") else int(value)
        allowed = n if allowed is None else min(allowed, n)
    return allowed


# --- the relay in front of the API server ---

class Relay:
    """`kubectl proxy` (plain HTTP on loopback, authenticating as the admin) with a TCP relay
    in front of it, the operator's only way to the API server: it passes requests on (`pass`),
    holds each for a while first (`hold`), or answers every request itself with an error
    status (`answer`, cutting the connections open when it starts, watches included). It
    counts the connections open, those whose last request is a watch (from each request
    line), and the others that have carried nothing for IDLE_SECONDS (kept alive in the
    client's pool, or a request left waiting). Ported from
    crates/kerf-operator/tests/support/proxy.rs."""

    IDLE_SECONDS = 30

    def __init__(self, env, work):
        self.upstream = race.free_port()
        self.proxy = subprocess.Popen(
            ["kubectl", "proxy", "--address=127.0.0.1", f"--port={self.upstream}"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.upstream), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("kubectl proxy did not listen within 30 s")
                time.sleep(0.2)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.mode = ("pass", None)
        self.open = {}
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()
        self.kubeconfig = os.path.join(work, "kubeconfig-relay")
        with open(self.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: relay\n  cluster:\n"
                    f"    server: http://127.0.0.1:{self.port}\nusers:\n- name: relay\n"
                    "  user: {}\ncontexts:\n- name: relay\n  context: {cluster: relay, "
                    "user: relay}\ncurrent-context: relay\n")

    def set(self, mode, argument=None):
        with self.lock:
            self.mode = (mode, argument)
        if mode == "answer":
            self.cut()

    def cut(self):
        with self.lock:
            conns = list(self.open.values())
        for c in conns:
            for s in (c["client"], c["server"]):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def counts(self):
        """(connections open, watches open, other connections idle) through the relay."""
        quiet = time.time() - self.IDLE_SECONDS
        with self.lock:
            conns = list(self.open.values())
        return (len(conns), sum(1 for c in conns if c["watch"]),
                sum(1 for c in conns if not c["watch"] and c["active"] < quiet))

    def stop(self):
        self.stopped = True
        try:
            self.listener.close()
        except OSError:
            pass
        self.cut()
        self.proxy.terminate()
        try:
            self.proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proxy.kill()

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        with self.lock:
            mode, argument = self.mode
        if mode == "answer":
            self._answer(client, argument)
            return
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        conn = {"client": client, "server": server, "watch": False, "active": time.time()}
        with self.lock:
            self.open[id(conn)] = conn

        def back():
            try:
                while True:
                    data = server.recv(65536)
                    if not data:
                        break
                    conn["active"] = time.time()
                    client.sendall(data)
            except OSError:
                pass
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        returning = threading.Thread(target=back, daemon=True)
        returning.start()
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                with self.lock:
                    mode, argument = self.mode
                if mode == "hold":
                    time.sleep(argument)
                conn["active"] = time.time()
                line = data.split(b"\r\n", 1)[0]
                if re.match(rb"^(GET|POST|PUT|PATCH|DELETE) \S+ HTTP/1", line):
                    conn["watch"] = bool(re.search(rb"[?&]watch=(true|1)\b", line))
                server.sendall(data)
        except OSError:
            pass
        try:
            server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        returning.join(timeout=5)
        with self.lock:
            self.open.pop(id(conn), None)
        client.close()
        server.close()

    @staticmethod
    def _answer(client, code):
        """Reads one request and answers it with `code` and a Kubernetes Status."""
        reason = {429: "TooManyRequests", 503: "ServiceUnavailable"}.get(code, "InternalError")
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": f"the soak's relay answers {code}", "reason": reason,
                           "code": code}).encode()
        client.settimeout(10)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            left = (int(match.group(1)) if match else 0) - len(head.split(b"\r\n\r\n", 1)[1])
            while left > 0:
                chunk = client.recv(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
            client.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
                           f"Retry-After: 1\r\nContent-Length: {len(body)}\r\n"
                           "Connection: close\r\n\r\n".encode() + body)
        except OSError:
            pass
        finally:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()


# --- the operator ---

class Operator:
    """kerf-operator with the kwok cloud provider, through the relay; started again with the
    same flags, ports and log file after each kill."""

    def __init__(self, operator, work, env, kubeconfig, no_capacity):
        self.metrics_port, self.health_port = race.free_port(), race.free_port()
        self.env = dict(env, KUBECONFIG=kubeconfig, DISABLE_LEADER_ELECTION="true",
                        METRICS_PORT=str(self.metrics_port),
                        HEALTH_PROBE_PORT=str(self.health_port), BIND_ADDRESS="127.0.0.1")
        self.command = [operator, "--cloud-provider", "kwok", "--kwok-no-capacity", no_capacity]
        self.log_path = os.path.join(work, "kerf-operator.log")
        self.proc = None
        self.started_at = 0.0
        self.starts = 0

    def start(self):
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=log,
                                         start_new_session=True)
        self.started_at = time.time()
        self.starts += 1

    def exited(self):
        """The exit code if the process ended, else None."""
        return self.proc.poll() if self.proc else None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stop(self):
        if not self.proc or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
        except ProcessLookupError:
            pass

    def http(self, port, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except OSError:
            return None, ""

    def wait_ready(self, limit):
        deadline = time.time() + limit
        while self.http(self.health_port, "/readyz")[0] != 200:
            if self.exited() is not None:
                raise RuntimeError(f"kerf-operator exited ({self.exited()}); see {self.log_path}")
            if time.time() > deadline:
                raise RuntimeError(f"kerf-operator not ready within {limit} s; see {self.log_path}")
            time.sleep(0.5)


# --- the run's shared record ---

class Record:
    """What the workload, the faults and the checks share: the fault windows, the violations,
    the decisions and the samples. Everything under one lock."""

    def __init__(self, t0):
        self.t0 = t0
        self.lock = threading.Lock()
        self.windows = []          # [start, end or None, recovery seconds, kind]
        self.violations = []       # (time, check, object, message)
        self.reported = set()
        self.steps = {}
        self.faults = {}
        self.pdb_disarmed = {}     # Deployment -> the replicas its pods must reach first
        self.samples = []
        self.planted_node = None

    def say(self, text):
        print(f"[{time.time() - self.t0:6.0f}s] {text}", file=sys.stderr, flush=True)

    def violation(self, key, check, obj, message):
        with self.lock:
            if key in self.reported:
                return
            self.reported.add(key)
            self.violations.append((time.time(), check, obj, message))
        self.say(f"VIOLATION {check}: {obj}: {message}")

    def fault_started(self, kind, recovery):
        with self.lock:
            window = [time.time(), None, recovery, kind]
            self.windows.append(window)
            self.faults[kind] = self.faults.get(kind, 0) + 1
        return window

    def fault_ended(self, window):
        with self.lock:
            window[1] = time.time()

    def in_fault(self, t):
        with self.lock:
            return any(w[0] <= t <= (w[1] if w[1] is not None else t) + w[2]
                       for w in self.windows)

    def unfaulted(self, start, end):
        """Seconds of [start, end] outside every fault window (recovery included)."""
        with self.lock:
            spans = sorted((max(w[0], start),
                            min((w[1] if w[1] is not None else end) + w[2], end))
                           for w in self.windows)
        covered, reach = 0.0, start
        for a, b in spans:
            a = max(a, reach)
            if b > a:
                covered += b - a
                reach = b
        return (end - start) - covered


# --- decisions: every NodeClaim the API server made or removed ---

class ClaimWatch:
    """A watch of NodeClaims (`kubectl get -w`), opened again whenever it ends (an API server
    outage ends it): every uid created and deleted, and each name's uids. The checks' listings
    add what a watch missed while it was down."""

    def __init__(self, env, record):
        self.env, self.record = env, record
        self.lock = threading.Lock()
        self.uids_by_name = {}
        self.created, self.deleted = set(), set()
        self.stopped = False
        self.proc = None
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def seen(self, name, uid):
        with self.lock:
            if uid in self.created:
                return
            self.created.add(uid)
            earlier = self.uids_by_name.setdefault(name, [])
            earlier.append(uid)
            again = len(earlier) > 1
        if again:
            self.record.violation(("made-twice", "name", name, uid), "made-twice",
                                  f"nodeclaim/{name}",
                                  f"the name was made again under a new uid {uid}")

    def gone(self, uid):
        with self.lock:
            self.deleted.add(uid)

    def _follow(self):
        template = '{.type} {.object.metadata.name} {.object.metadata.uid}{"\\n"}'
        while not self.stopped:
            self.proc = subprocess.Popen(
                ["kubectl", "get", "nodeclaims", "--watch", "--output-watch-events",
                 "-o", f"jsonpath={template}"],
                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if self.stopped:
                self.proc.terminate()
            for line in self.proc.stdout:
                parts = line.split()
                if len(parts) != 3:
                    continue
                self.seen(parts[1], parts[2])
                if parts[0] == "DELETED":
                    self.gone(parts[2])
            self.proc.wait()
            if not self.stopped:
                time.sleep(1)

    def stop(self):
        self.stopped = True
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()


# --- the checks ---

def conditions(obj):
    return {c["type"]: c.get("status") for c in obj.get("status", {}).get("conditions", [])}


def tainted(node):
    return any(t.get("key") == TAINT for t in node.get("spec", {}).get("taints", []) or [])


class Checker:
    """Lists the cluster every CHECK_EVERY_SECONDS and runs each check over the listing;
    samples the operator on its own period. Listing nodes before NodeClaims errs on the side of
    the operator: a NodeClaim read later has had more time to be deleted or to terminate."""

    def __init__(self, env, record, claims, operator, relay, args, sample_every):
        self.env, self.record, self.claims = env, record, claims
        self.operator, self.relay, self.args = operator, relay, args
        self.sample_every = sample_every
        self.taint_since = {}
        self.leak_since = {}
        self.previous = None
        self.hosted = set()        # NodeClaim uids whose node had a pod bound
        self.claim_node = {}       # NodeClaim uid -> node name
        self.live = set()
        self.idle = set()
        self.stopped = False
        self.last_sample = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopped = True
        self.thread.join(timeout=60)

    def listing(self):
        out = kubectl(self.env, "get", "nodes,nodeclaims,pods,pdb,deployments,nodepools", "-A",
                      "-o", "json", timeout=15)
        by = {"Node": [], "NodeClaim": [], "Pod": [], "PodDisruptionBudget": [],
              "Deployment": [], "NodePool": []}
        for item in json.loads(out)["items"]:
            by.setdefault(item["kind"], []).append(item)
        for kind in ("Pod", "PodDisruptionBudget", "Deployment"):
            by[kind] = [o for o in by[kind] if o["metadata"]["namespace"] == NAMESPACE]
        return by

    def _run(self):
        while not self.stopped:
            began = time.time()
            try:
                state = self.listing()
            except (RuntimeError, ValueError):
                state = None
            if state is not None:
                try:
                    self.check(state, time.time())
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    # a checker that cannot read the cluster must not pass the run
                    self.record.violation(("checker", repr(e)), "checker", "listing",
                                          f"could not be checked: {e!r}")
            if time.time() - self.last_sample >= self.sample_every:
                self.last_sample = time.time()
                self.sample()
            time.sleep(max(0.0, CHECK_EVERY_SECONDS - (time.time() - began)))

    # each check reads one listing taken at `now`

    def check(self, s, now):
        nodes = {n["metadata"]["name"]: n for n in s["Node"]}
        by_provider = {n.get("spec", {}).get("providerID"): n for n in s["Node"]
                       if n.get("spec", {}).get("providerID")}
        claims = s["NodeClaim"]
        node_of = {}
        for c in claims:
            m, st = c["metadata"], c.get("status", {})
            self.claims.seen(m["name"], m["uid"])
            node = by_provider.get(st.get("providerID")) or nodes.get(st.get("nodeName", ""))
            node_of[m["uid"]] = node
            if node:
                self.claim_node[m["uid"]] = node["metadata"]["name"]
        uids = {c["metadata"]["uid"] for c in claims}
        for uid in self.live - uids:
            self.claims.gone(uid)
            if uid not in self.hosted:
                self.idle.add(uid)
        self.live = uids
        bound_nodes = {p["spec"].get("nodeName") for p in s["Pod"] if p["spec"].get("nodeName")}
        for uid, name in self.claim_node.items():
            if name in bound_nodes:
                self.hosted.add(uid)
        self.check_claims(claims, node_of, now)
        self.check_taints(nodes, claims, node_of, now)
        self.check_pods(s["Pod"], now)
        self.check_pdbs(s["PodDisruptionBudget"], s["Deployment"], s["Pod"], now)
        self.check_budgets(s["NodePool"], claims, node_of, now)
        self.check_identity(s["Node"], claims, now)
        self.previous = (now, s, node_of)

    def check_claims(self, claims, node_of, now):
        for c in claims:
            m = c["metadata"]
            if m.get("deletionTimestamp") or node_of[m["uid"]]:
                continue
            age = self.record.unfaulted(stamp(m["creationTimestamp"]), now)
            if age > self.args.claim_bound:
                self.record.violation(("claim", m["uid"]), "claim-without-node",
                                      f"nodeclaim/{m['name']}",
                                      f"no node {age:.0f} s (outside faults) after its creation")

    def check_taints(self, nodes, claims, node_of, now):
        claim_by_node = {node_of[c["metadata"]["uid"]]["metadata"]["name"]: c
                         for c in claims if node_of[c["metadata"]["uid"]]}
        still = set()
        for name, n in nodes.items():
            if not tainted(n) or n["metadata"].get("deletionTimestamp"):
                continue
            c = claim_by_node.get(name)
            if c and c["metadata"].get("deletionTimestamp"):
                continue
            key = (name, n["metadata"]["uid"])
            still.add(key)
            since = self.taint_since.setdefault(key, now)
            held = self.record.unfaulted(since, now)
            if held > self.args.disrupted_bound:
                self.record.violation(("taint", key, since), "stuck-taint", f"node/{name}",
                                      f"tainted {TAINT} for {held:.0f} s (outside faults) "
                                      "with no NodeClaim deletion under way")
        self.taint_since = {k: v for k, v in self.taint_since.items() if k in still}

    def check_pods(self, pods, now):
        for p in pods:
            m = p["metadata"]
            if p["spec"].get("nodeName") or m.get("deletionTimestamp"):
                continue
            waited = self.record.unfaulted(stamp(m["creationTimestamp"]), now)
            if waited > self.args.pending_bound:
                self.record.violation(("pod", m["uid"]), "pending-pod",
                                      f"pod/{NAMESPACE}/{m['name']}",
                                      f"unbound {waited:.0f} s (outside faults)")

    def check_pdbs(self, pdbs, deployments, pods, now):
        """Each PodDisruptionBudget (an integer maxUnavailable over one Deployment's `app`
        label) against the pods themselves: bound, Running and not being deleted, never fewer
        than the Deployment's replicas less maxUnavailable. The budget's own currentHealthy
        is not used: it counts Ready pods, and kube-controller-manager marks every pod of a
        node not Ready when a loaded kwok's heartbeats run late, evictions or none."""
        replicas = {d["metadata"]["name"]: d["spec"].get("replicas", 1) for d in deployments}
        for pdb in pdbs:
            name, st = pdb["metadata"]["name"], pdb.get("status", {})
            if st.get("disruptionsAllowed", 0) < 0:
                self.record.violation(("pdb-allowed", name), "pdb", f"pdb/{NAMESPACE}/{name}",
                                      f"disruptionsAllowed {st['disruptionsAllowed']}")
            app = pdb["spec"].get("selector", {}).get("matchLabels", {}).get("app")
            unavailable = pdb["spec"].get("maxUnavailable")
            if app not in replicas or not isinstance(unavailable, int):
                continue
            up = sum(1 for p in pods
                     if p["metadata"].get("labels", {}).get("app") == app
                     and p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                     and not p["metadata"].get("deletionTimestamp"))
            least = replicas[app] - unavailable
            with self.record.lock:
                target = self.record.pdb_disarmed.get(app)
                if target is not None and target == replicas[app] and up >= least:
                    # every pod of the last scale-up has run: checked from now on
                    del self.record.pdb_disarmed[app]
            if target is not None or self.record.in_fault(now):
                continue
            if up < least:
                # one report an episode: the key is released once the pods are back
                self.record.violation(("pdb", name), "pdb", f"pdb/{NAMESPACE}/{name}",
                                      f"{up} of deployment/{app}'s {replicas[app]} pods "
                                      f"running, fewer than {least} (maxUnavailable "
                                      f"{unavailable})")
            else:
                with self.record.lock:
                    self.record.reported.discard(("pdb", name))

    def pool_disruption(self, claims, node_of):
        """Per NodePool: the nodes that count for its budgets, and those disrupting."""
        out = {}
        for c in claims:
            n = node_of[c["metadata"]["uid"]]
            if not n or conditions(c).get("InstanceTerminating") == "True":
                continue
            labels = n["metadata"].get("labels", {})
            if labels.get("karpenter.sh/initialized") != "true":
                continue
            pool = labels.get("karpenter.sh/nodepool") or c["metadata"].get(
                "labels", {}).get("karpenter.sh/nodepool", "")
            counted, disrupting = out.setdefault(pool, (set(), set()))
            name = n["metadata"]["name"]
            counted.add(name)
            if c["metadata"].get("deletionTimestamp") or tainted(n):
                disrupting.add(name)
        return out

    def check_budgets(self, pools, claims, node_of, now):
        current = self.pool_disruption(claims, node_of)
        if self.previous is None:
            return
        then, s_before, node_of_before = self.previous
        before = self.pool_disruption(s_before["NodeClaim"], node_of_before)
        pools_before = {p["metadata"]["name"]: p for p in s_before["NodePool"]}
        for pool in pools:
            name = pool["metadata"]["name"]
            counted, disrupting = current.get(name, (set(), set()))
            counted_then, disrupting_then = before.get(name, (set(), set()))
            started = disrupting - disrupting_then
            if not started:
                continue
            total = max(len(counted), len(counted_then))
            limits = [allowed_disruptions(pool, total, now),
                      allowed_disruptions(pools_before.get(name, pool), total, then)]
            if any(a is None for a in limits):
                continue
            allowed = max(limits)
            if len(disrupting) > allowed:
                self.record.violation(("budget", name, tuple(sorted(started))), "budget",
                                      f"nodepool/{name}",
                                      f"{len(disrupting)} nodes disrupting "
                                      f"({', '.join(sorted(disrupting))}) where the budgets "
                                      f"allow {allowed} of {total}")

    def check_identity(self, nodes, claims, now):
        providers = {}
        for c in claims:
            pid = c.get("status", {}).get("providerID")
            if pid:
                providers.setdefault(pid, []).append(c["metadata"]["name"])
        for pid, names in providers.items():
            if len(names) > 1:
                self.record.violation(("made-twice", "provider", pid), "made-twice", pid,
                                      f"held by NodeClaims {', '.join(sorted(names))}")
        still = set()
        for n in nodes:
            m = n["metadata"]
            if "karpenter.sh/nodepool" not in m.get("labels", {}) or m.get("deletionTimestamp"):
                continue
            if n.get("spec", {}).get("providerID") in providers or any(
                    c.get("status", {}).get("nodeName") == m["name"] for c in claims):
                continue
            still.add(m["uid"])
            since = self.leak_since.setdefault(m["uid"], now)
            if self.record.unfaulted(since, now) > self.args.claim_bound:
                self.record.violation(("made-twice", "leak", m["uid"]), "made-twice",
                                      f"node/{m['name']}",
                                      f"a node of the NodePool without a NodeClaim for "
                                      f"{now - since:.0f} s")
        self.leak_since = {k: v for k, v in self.leak_since.items() if k in still}

    def sample(self):
        """The operator's resident memory, descriptors, threads, relay connections and
        watches, and its /metrics process and task figures."""
        op = self.operator
        if op.proc is None or op.exited() is not None:
            return
        pid = op.proc.pid
        row = {"t": time.time(), "pid": pid, "age": time.time() - op.started_at}
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        row["rss_mib"] = int(line.split()[1]) / 1024
            row["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
            row["threads"] = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            return
        row["connections"], row["watches"], row["idle"] = self.relay.counts()
        row["in_fault"] = self.record.in_fault(row["t"])
        _, text = op.http(op.metrics_port, "/metrics")
        extra = {}
        for line in text.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, value = line.rsplit(" ", 1)
            family = name.split("{", 1)[0]
            if family in ("process_resident_memory_bytes", "process_open_fds") or re.search(
                    r"tokio|_tasks?\b|_tasks?_|watch(es|ers)?\b", family):
                try:
                    extra[name] = float(value)
                except ValueError:
                    pass
        row["metrics"] = extra
        row["tasks"] = extra.get("tokio_alive_tasks")
        with self.record.lock:
            self.record.samples.append(row)


# --- the workload ---

class Workload:
    """The workload's steps, drawn from a seeded RNG."""

    def __init__(self, env, record, rng, no_capacity):
        self.env, self.record, self.rng = env, record, rng
        self.no_capacity = no_capacity
        self.spot_until = float("inf")   # no spot refused from then on
        self.replicas = {}
        self.generation = 0
        self.spot_refused = False
        self.protected = []
        self.deck = []
        self.dealt = False

    def apply_initial(self):
        for name, (_, _, most) in DEPLOYMENTS.items():
            self.replicas[name] = self.rng.randint(2, most // 2)
            with self.record.lock:
                self.record.pdb_disarmed[name] = self.replicas[name]
            kubectl(self.env, "apply", "-f", "-", stdin=deployment(name, self.replicas[name]))
        self.replicas[STATEFULSET] = self.rng.randint(1, STATEFUL[2] // 2)
        kubectl(self.env, "apply", "-f", "-", stdin=statefulset(self.replicas[STATEFULSET]))
        self.record.say("workload: " + ", ".join(f"{k} {v}" for k, v in self.replicas.items()))

    def draw(self):
        """The next kind of step: the first ones take each kind once, in a random order, a
        scaling after every two; then SCALINGS_PER_OTHER_STEP scalings to each other step, in
        a random order."""
        if not self.deck:
            if not self.dealt:
                others = STEP_KINDS[:]
                self.rng.shuffle(others)
                order = []
                for i, kind in enumerate(others):
                    order += [kind, "scale"] if i % 2 else [kind]
                self.dealt = True
            else:
                order = STEP_KINDS + ["scale"] * (SCALINGS_PER_OTHER_STEP * len(STEP_KINDS))
                self.rng.shuffle(order)
            self.deck = order[::-1]
        return self.deck.pop()

    def step(self):
        kind = self.draw()
        text = getattr(self, f"step_{kind}")()
        with self.record.lock:
            self.record.steps[kind] = self.record.steps.get(kind, 0) + 1
        self.record.say(f"step {kind}: {text}")

    def scale(self, name, replicas):
        with self.record.lock:
            # a scale-up leaves pods to start; the PDB is checked again once they run
            if replicas > self.replicas.get(name, 0) or name in self.record.pdb_disarmed:
                self.record.pdb_disarmed[name] = replicas
        kind = "statefulset" if name == STATEFULSET else "deployment"
        kubectl(self.env, "scale", "-n", NAMESPACE, f"{kind}/{name}", f"--replicas={replicas}")
        self.replicas[name] = replicas

    def step_scale(self):
        name = self.rng.choice(sorted(DEPLOYMENTS) + [STATEFULSET])
        replicas = self.rng.randint(0, most_replicas(name))
        was = self.replicas[name]
        self.scale(name, replicas)
        return f"{name} {was} -> {replicas}"

    def step_drift(self):
        self.generation += 1
        patch = {"spec": {"template": {"metadata": {"labels": {
            GENERATION_LABEL: str(self.generation)}}}}}
        kubectl(self.env, "patch", "nodepool", POOL, "--type=merge", "-p", json.dumps(patch))
        return f"NodePool template label {GENERATION_LABEL}={self.generation} (every node drifts)"

    def step_budget(self):
        pool = json.loads(kubectl(self.env, "get", "nodepool", POOL, "-o", "json"))
        budgets = pool["spec"]["disruption"]["budgets"]
        budgets[0]["nodes"] = self.rng.choice(BUDGET_CHOICES)
        kubectl(self.env, "patch", "nodepool", POOL, "--type=merge", "-p",
                json.dumps({"spec": {"disruption": {"budgets": budgets}}}))
        return f"first budget nodes {budgets[0]['nodes']!r} (the scheduled one stays)"

    def lift_schedules(self):
        """Drops the budgets with a schedule: a cluster held still by a budget window is not
        settled, it only waits for the window to end (a fresh operator started near its end
        would be taken for changing a settled cluster). Returns how many were dropped."""
        pool = json.loads(kubectl(self.env, "get", "nodepool", POOL, "-o", "json"))
        budgets = pool["spec"]["disruption"]["budgets"]
        kept = [b for b in budgets if not b.get("schedule")]
        kubectl(self.env, "patch", "nodepool", POOL, "--type=merge", "-p",
                json.dumps({"spec": {"disruption": {"budgets": kept}}}))
        return len(budgets) - len(kept)

    def step_spot(self):
        if not self.spot_refused and time.time() >= self.spot_until:
            return (f"spot capacity left alone: none is refused in the last "
                    f"{SPOT_QUIET_SECONDS // 60} minutes")
        self.spot_refused = not self.spot_refused
        self.write_capacity()
        return "spot capacity refused" if self.spot_refused else "spot capacity returned"

    def return_spot_if_late(self):
        if self.spot_refused and time.time() >= self.spot_until:
            self.spot_refused = False
            self.write_capacity()
            self.record.say(f"spot capacity returned, {SPOT_QUIET_SECONDS // 60} minutes "
                            "before the end of the changes")

    def write_capacity(self):
        with open(self.no_capacity, "w") as f:
            f.write("spot\n" if self.spot_refused else "# spot available\n")

    def running_pods(self):
        """The running pods on nodes not being disrupted (a pod marked do-not-disrupt on a
        node already draining holds the drain, as it should, until the pod goes)."""
        pods = json.loads(kubectl(self.env, "get", "pods", "-n", NAMESPACE, "-o", "json"))
        nodes = json.loads(kubectl(self.env, "get", "nodes", "-o", "json"))["items"]
        calm = {n["metadata"]["name"] for n in nodes
                if not tainted(n) and not n["metadata"].get("deletionTimestamp")}
        return [p["metadata"]["name"] for p in pods["items"]
                if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") in calm
                and not p["metadata"].get("deletionTimestamp")]

    def unprotect(self, pod):
        """Takes the annotation off one pod; a pod gone since it was listed (scaled in, or its
        node drained) has nothing to take off."""
        try:
            kubectl(self.env, "annotate", "-n", NAMESPACE, f"pod/{pod}", f"{DO_NOT_DISRUPT}-")
        except RuntimeError as e:
            if "NotFound" not in str(e):
                raise

    def unprotect_all(self):
        """Only this harness annotates pods, and only the ones it remembers: taking it off
        those, one by one, cannot fail on a pod deleted meanwhile as `--all` does."""
        for pod in self.protected:
            self.unprotect(pod)
        self.protected = []

    def step_protect(self):
        """Takes the annotation off the pods the last such step annotated, and puts it on two
        other running pods (chosen by an RNG of their own, drawn from the step's, so that the
        steps after repeat whatever pods are running)."""
        running = set(self.running_pods())
        released = [p for p in self.protected if p in running]
        for pod in self.protected:
            self.unprotect(pod)
        choice = random.Random(self.rng.random())
        candidates = sorted(running - set(self.protected))
        self.protected = []
        for pod in choice.sample(candidates, min(2, len(candidates))):
            try:
                kubectl(self.env, "annotate", "-n", NAMESPACE, f"pod/{pod}",
                        f"{DO_NOT_DISRUPT}=true", "--overwrite")
                self.protected.append(pod)
            except RuntimeError as e:
                if "NotFound" not in str(e):
                    raise
        return (f"{DO_NOT_DISRUPT} on {', '.join(self.protected) or 'no pod (none running)'}"
                f"; off {', '.join(released) or 'none'}")


# --- faults ---

class Faults:
    """The faults, one at a time: the API server's and etcd's are waited out here (nothing
    else can talk to the cluster meanwhile); the operator's and the relay's run beside the
    workload and are healed by `tick` when their time comes."""

    def __init__(self, work, env, record, rng, operator, relay):
        self.work, self.env, self.record, self.rng = work, env, record, rng
        self.operator, self.relay = operator, relay
        self.active = None         # (kind, heal at, window)
        self.last = None
        self.deck = []

    def draw(self):
        if not self.deck:
            self.deck = sorted(FAULTS)
            self.rng.shuffle(self.deck)
        return self.deck.pop()

    def inject(self):
        kind = self.draw()
        self.last = kind
        what, lasts, recovery = FAULTS[kind]
        self.record.say(f"fault {kind}: {what}")
        window = self.record.fault_started(kind, recovery)
        if kind in ("apiserver-kill", "etcd-kill"):
            component = "kube-apiserver" if kind == "apiserver-kill" else "etcd"
            subprocess.run([E2E, "kill", self.work, component], check=True)
            time.sleep(lasts)
            subprocess.run([E2E, "restart", self.work, component], check=True,
                           stdout=subprocess.DEVNULL)
            self.api_back()
            # a kube-scheduler elected by a Lease loses it in an outage longer than its renew
            # deadline (10 s) and is started afresh by its kubelet; this one runs without
            # election, and kept running across an outage its cache can be left corrupt (a
            # binding sent as the server died: "Scheduler cache is corrupted") and bind no
            # pod again, so it is restarted as an elected one would be
            subprocess.run([E2E, "kill", self.work, "kube-scheduler"], check=True)
            subprocess.run([E2E, "restart", self.work, "kube-scheduler"], check=True,
                           stdout=subprocess.DEVNULL)
            self.record.fault_ended(window)
            return
        if kind == "operator-kill":
            self.operator.kill()
            lasts = self.rng.uniform(0, lasts)
        elif kind == "relay-429":
            self.relay.set("answer", 429)
        elif kind == "relay-500":
            self.relay.set("answer", 500)
        elif kind == "relay-hold":
            self.relay.set("hold", 2.0)
        elif kind == "watch-cut":
            self.relay.cut()
        self.active = (kind, time.time() + lasts, window)

    def api_back(self):
        deadline = time.time() + 120
        while True:
            try:
                kubectl(self.env, "get", "--raw", "/readyz", timeout=5)
                return
            except RuntimeError:
                if time.time() > deadline:
                    raise RuntimeError("the API server did not come back within 120 s")
                time.sleep(0.5)

    def tick(self, heal_now=False):
        if self.active is None:
            return
        kind, heal_at, window = self.active
        if time.time() < heal_at and not heal_now:
            return
        if kind == "operator-kill":
            self.operator.start()
        elif kind.startswith("relay-"):
            self.relay.set("pass")
        self.record.fault_ended(window)
        self.active = None
        self.record.say(f"fault {kind} over")


# --- what kwok leaves out ---

class KubeletSync:
    """Plays the one part of a kubelet that kwok's stages leave out: once
    kube-controller-manager has marked a pod not Ready (its node's heartbeat ran late, or the
    API server was down), kwok never marks it Ready again, as a kubelet's next status sync
    would. A PodDisruptionBudget then counts the pod unhealthy for good and every drain of
    its node waits forever, which is no fault of the autoscaler. Every KUBELET_SYNC_SECONDS,
    a Running pod whose containers are ready, on a Ready node, gets its Ready condition back;
    the count is reported."""

    def __init__(self, env):
        self.env = env
        self.restored = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped:
            try:
                self.sync()
            except (RuntimeError, ValueError):
                pass
            time.sleep(KUBELET_SYNC_SECONDS)

    def sync(self):
        pods = json.loads(kubectl(self.env, "get", "pods", "-n", NAMESPACE, "-o", "json",
                                  timeout=15))["items"]
        nodes = json.loads(kubectl(self.env, "get", "nodes", "-o", "json", timeout=15))["items"]
        ready = {n["metadata"]["name"] for n in nodes if conditions(n).get("Ready") == "True"}
        for p in pods:
            c = conditions(p)
            if (p["status"].get("phase") == "Running" and p["spec"].get("nodeName") in ready
                    and not p["metadata"].get("deletionTimestamp")
                    and c.get("ContainersReady") == "True" and c.get("Ready") == "False"):
                patch = {"status": {"conditions": [{
                    "type": "Ready", "status": "True",
                    "lastTransitionTime": datetime.now(timezone.utc).strftime(
                        "%Y-%m-%dT%H:%M:%SZ")}]}}
                try:
                    kubectl(self.env, "patch", "pod", "-n", NAMESPACE, p["metadata"]["name"],
                            "--subresource=status", "-p", json.dumps(patch), timeout=15)
                    self.restored += 1
                except RuntimeError:
                    pass

    def stop(self):
        self.stopped = True


# --- the planted bug ---

def plant_stuck_taint(env, record):
    """Taints one initialized node of the NodePool (one hosting pods if any), marks it
    do-not-disrupt, and has the API server refuse any update taking the taint off. Returns
    the node's name, or None if no node fits yet."""
    nodes = json.loads(kubectl(env, "get", "nodes", "-l", f"karpenter.sh/nodepool={POOL}",
                               "-o", "json"))["items"]
    pods = json.loads(kubectl(env, "get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    busy = {p["spec"].get("nodeName") for p in pods}
    fit = sorted((n["metadata"]["name"] not in busy, n["metadata"]["name"]) for n in nodes
                 if n["metadata"].get("labels", {}).get("karpenter.sh/initialized") == "true"
                 and not tainted(n) and not n["metadata"].get("deletionTimestamp"))
    if not fit:
        return None
    name = fit[0][1]
    kubectl(env, "apply", "-f", "-", stdin=PLANTED_POLICY)
    kubectl(env, "annotate", f"node/{name}", f"{DO_NOT_DISRUPT}=true", "--overwrite")
    kubectl(env, "label", f"node/{name}", f"{PLANTED_LABEL}=true", "--overwrite")
    # the policy and its binding take a moment to be enforced
    time.sleep(3)
    kubectl(env, "taint", "nodes", name, f"{TAINT}:NoSchedule", "--overwrite")
    record.say(f"planted: node/{name} tainted {TAINT}:NoSchedule, and kept so")
    return name


# --- the end ---

def shape(s):
    """What must not change once the cluster has settled."""
    return (frozenset(c["metadata"]["uid"] for c in s["NodeClaim"]),
            frozenset(n["metadata"]["name"] for n in s["Node"]),
            frozenset(n["metadata"]["name"] for n in s["Node"] if tainted(n)),
            frozenset(c["metadata"]["uid"] for c in s["NodeClaim"]
                      if c["metadata"].get("deletionTimestamp")),
            frozenset(p["metadata"]["uid"] for p in s["Pod"]))


def settle(checker, record, quiet, limit):
    """Waits until the listing's shape holds for `quiet` seconds (at most `limit`); then the
    settled state's own checks. Returns the last listing and the seconds it took."""
    began = time.time()
    last, since, s = None, time.time(), None
    while time.time() - began < limit:
        try:
            s = checker.listing()
        except (RuntimeError, ValueError):
            time.sleep(CHECK_EVERY_SECONDS)
            continue
        now_shape = shape(s)
        if now_shape != last:
            last, since = now_shape, time.time()
        elif time.time() - since >= quiet:
            break
        time.sleep(CHECK_EVERY_SECONDS)
    else:
        record.violation(("settle",), "settled", "cluster",
                         f"still changing {limit:.0f} s after the last step")
    took = time.time() - began
    if s is None:
        return None, took
    nodes = {n["metadata"]["name"]: n for n in s["Node"]}
    providers = {n.get("spec", {}).get("providerID") for n in s["Node"]}
    for c in s["NodeClaim"]:
        m, st = c["metadata"], c.get("status", {})
        if m.get("deletionTimestamp"):
            record.violation(("end-deleting", m["uid"]), "settled", f"nodeclaim/{m['name']}",
                             "still being deleted at the end")
        elif st.get("providerID") not in providers and st.get("nodeName") not in nodes:
            record.violation(("end-claim", m["uid"]), "settled", f"nodeclaim/{m['name']}",
                             "without a node at the end")
    for name, n in nodes.items():
        if tainted(n):
            record.violation(("end-taint", name), "settled", f"node/{name}",
                             f"tainted {TAINT} at the end")
    for p in s["Pod"]:
        if not p["spec"].get("nodeName"):
            record.violation(("end-pod", p["metadata"]["uid"]), "settled",
                             f"pod/{NAMESPACE}/{p['metadata']['name']}", "pending at the end")
    return s, took


def fresh_operator(checker, record, operator, settled):
    """Replaces the operator with a fresh one and watches for FRESH_OPERATOR_SECONDS that it
    changes nothing: no NodeClaim made or deleted, no node tainted, no pod evicted."""
    claims, _, taints, _, pods = shape(settled)
    operator.stop()
    operator.start()
    record.say(f"fresh operator started (pid {operator.proc.pid}); watching "
               f"{FRESH_OPERATOR_SECONDS} s")
    deadline = time.time() + FRESH_OPERATOR_SECONDS
    while time.time() < deadline:
        time.sleep(CHECK_EVERY_SECONDS)
        try:
            s = checker.listing()
        except (RuntimeError, ValueError):
            continue
        now_claims, _, now_taints, _, now_pods = shape(s)
        names = {c["metadata"]["uid"]: c["metadata"]["name"] for c in s["NodeClaim"]}
        for uid in now_claims - claims:
            record.violation(("fresh-made", uid), "fresh-operator",
                             f"nodeclaim/{names.get(uid, uid)}", "created by a fresh operator")
        for uid in claims - now_claims:
            record.violation(("fresh-gone", uid), "fresh-operator", f"nodeclaim uid {uid}",
                             "deleted by a fresh operator")
        for name in now_taints - taints:
            record.violation(("fresh-taint", name), "fresh-operator", f"node/{name}",
                             "tainted by a fresh operator")
        for uid in pods - now_pods:
            record.violation(("fresh-pod", uid), "fresh-operator", f"pod uid {uid}",
                             "gone under a fresh operator")


def dump_state(env, work, record):
    """Saves the cluster as it ends (nodes, NodeClaims, NodePools, pods, budgets, Deployments,
    events) in the work folder, for a violation to be looked into after the cluster is gone."""
    path = os.path.join(work, "state-at-end.yaml")
    try:
        text = kubectl(env, "get", "nodes,nodeclaims,nodepools,pods,pdb,deployments,events",
                       "-A", "-o", "yaml", timeout=60)
    except RuntimeError as e:
        record.say(f"could not save the cluster's state: {e}")
        return
    with open(path, "w") as f:
        f.write(text)
    record.say(f"the cluster's state at the end: {path}")


# --- the summary ---

def pooled_slope(samples, key):
    """Least-squares slope per hour of `key` over time, within each operator process (each
    its own intercept), leaving out samples of processes younger than OPERATOR_YOUNG_SECONDS
    and samples taken in a fault's window (a relay answering 429 closes every connection).
    Returns (slope, processes, samples) or None when there is no spread in time."""
    groups = {}
    for s in samples:
        if (s.get(key) is not None and s["age"] >= OPERATOR_YOUNG_SECONDS
                and not s.get("in_fault")):
            groups.setdefault(s["pid"], []).append((s["t"], s[key]))
    sxx = sxy = 0.0
    used = 0
    for points in groups.values():
        if len(points) < 2:
            continue
        tm = sum(t for t, _ in points) / len(points)
        ym = sum(y for _, y in points) / len(points)
        sxx += sum((t - tm) ** 2 for t, _ in points)
        sxy += sum((t - tm) * (y - ym) for t, y in points)
        used += len(points)
    if sxx == 0:
        return None
    return sxy / sxx * 3600, sum(1 for p in groups.values() if len(p) >= 2), used


def summary(args, record, claims, checker, kubelet, phases):
    out = []
    with record.lock:
        violations = list(record.violations)
        samples = list(record.samples)
        steps, faults = dict(record.steps), dict(record.faults)
    with claims.lock:
        created, deleted = len(claims.created), len(claims.deleted)
    out.append(f"## Soak: {args.minutes:g} minutes, seed {args.seed}"
               + (f", planted {args.plant}" if args.plant else ""))
    out.append("")
    plant = f" --plant {args.plant}" if args.plant else ""
    out.append(f"Replays the same steps and faults (not their timing): `scripts/soak.py "
               f"--minutes {args.minutes:g} --seed {args.seed}{plant}`")
    out.append("")
    out.append("| | |")
    out.append("|---|---|")
    out.append("| phases | " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()) + " |")

    def counted(d):
        return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"

    out.append(f"| workload steps | {sum(steps.values())} ({counted(steps)}) |")
    out.append(f"| faults survived | {sum(faults.values())} ({counted(faults)}) |")
    out.append(f"| decisions | {created + deleted} (NodeClaims created {created}, deleted "
               f"{deleted}; {len(checker.idle)} deleted without a pod ever bound to their "
               f"node) |")
    out.append(f"| violations | {len(violations)} |")
    out.append(f"| pods marked Ready again (kwok's missing kubelet sync) | {kubelet.restored} |")
    for key, label, unit in [("rss_mib", "operator RSS", " MiB"), ("tasks", "tokio tasks", ""),
                             ("threads", "threads", ""),
                             ("fds", "open fds", ""), ("watches", "watches open", ""),
                             ("connections", "API connections", ""),
                             ("idle", f"of them idle over {Relay.IDLE_SECONDS} s", "")]:
        values = [s[key] for s in samples if s.get(key) is not None]
        if not values:
            out.append(f"| {label} | no sample |")
            continue
        digits = 1 if unit else 0
        slope = pooled_slope(samples, key)
        slope_text = (f"slope {slope[0]:+.{digits + 1}f}{unit} an hour ({slope[2]} samples of "
                      f"{slope[1]} operator processes)" if slope else "slope: too few samples")
        out.append(f"| {label} | {min(values):.{digits}f} to {max(values):.{digits}f}{unit}, "
                   f"{slope_text} |")
    out.append("")
    if samples:
        out.append("Samples (* in a fault's window, left out of the slopes):")
        out.append("")
        out.append("| t (s) | pid | RSS MiB | tasks | fds | threads | connections | watches | "
                   "idle | /metrics RSS MiB | /metrics fds |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in samples:
            m = s["metrics"]
            rss = m.get("process_resident_memory_bytes")
            fds = m.get("process_open_fds")
            mark = "*" if s.get("in_fault") else ""
            tasks = s.get("tasks")
            out.append(f"| {s['t'] - record.t0:.0f}{mark} | {s['pid']} | {s['rss_mib']:.1f} | "
                       + (f"{tasks:.0f}" if tasks is not None else "–") + " | "
                       f"{s['fds']} | {s['threads']} | {s['connections']} | {s['watches']} | "
                       f"{s['idle']} | "
                       + (f"{rss / 2**20:.1f}" if rss is not None else "–") + " | "
                       + (f"{fds:.0f}" if fds is not None else "–") + " |")
        out.append("")
    if violations:
        out.append("Violations:")
        out.append("")
        for t, check, obj, message in violations:
            out.append(f"- {utc(t)} (+{t - record.t0:.0f} s) **{check}** {obj}: {message}")
        out.append("")
    return "\n".join(out)


# --- the run ---

class Stop(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=120,
                    help="minutes of workload and faults, before settling (default 120)")
    ap.add_argument("--seed", type=int, help="the RNG's seed (default: from the clock)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--plant", choices=["stuck-taint"], help="plant a bug the checks must catch")
    ap.add_argument("--operator", default=OPERATOR,
                    help="the kerf-operator binary (default target/release/kerf-operator)")
    ap.add_argument("--claim-bound", type=float, default=120,
                    help="seconds a NodeClaim may be without its node (default 120)")
    ap.add_argument("--disrupted-bound", type=float, default=300,
                    help="seconds a node may carry the disrupted taint with no deletion "
                         "under way (default 300)")
    ap.add_argument("--pending-bound", type=float, default=180,
                    help="seconds a pod may stay unbound (default 180)")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 1_000_000
    if not os.access(args.operator, os.X_OK):
        print(f"soak: {args.operator} not found: build it (cargo build --release "
              "-p kerf-operator for the default)", file=sys.stderr)
        return 2
    short = args.minutes < 10
    sample_every = 20 if short else 60
    quiet = 45 if short else 90
    settle_limit = min(900, max(180, args.minutes * 60 / 3))

    def stop_on_term(signum, frame):
        raise Stop(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop_on_term)
    # one RNG a stream, each from the seed: the steps and the faults each repeat in a replay
    # whatever the timing makes of how they interleave
    rng_steps, rng_faults, rng_timing = (random.Random(f"{args.seed}/{stream}")
                                         for stream in ("steps", "faults", "timing"))
    work = tempfile.mkdtemp(prefix="kerf-soak-")
    t0 = time.time()
    record = Record(t0)
    record.say(f"seed {args.seed}, {args.minutes:g} minutes, work folder {work}")
    relay = operator = claims = checker = kubelet = None
    code = 2
    phases = {}
    try:
        cluster = bench.Cluster(work)
        env = cluster.env
        kwok = subprocess.run([E2E, "karpenter-kwok"], capture_output=True, text=True,
                              check=True).stdout.strip()
        aws = subprocess.run([E2E, "karpenter-crds"], capture_output=True, text=True,
                             check=True).stdout.strip()
        kubectl(env, "apply", "--server-side", "-f",
                os.path.join(aws, "karpenter.k8s.aws_ec2nodeclasses.yaml"))
        kubectl(env, "apply", "--server-side", "-f", os.path.join(kwok, "crds"))
        cluster.wait_established("nodepools.karpenter.sh", "nodeclaims.karpenter.sh",
                                 "kwoknodeclasses.karpenter.kwok.sh")
        kubectl(env, "apply", "-f", "-", stdin=CLUSTER)
        relay = Relay(env, work)
        kubelet = KubeletSync(env)
        no_capacity = os.path.join(work, "no-capacity")
        workload = Workload(env, record, rng_steps, no_capacity)
        workload.write_capacity()
        operator = Operator(args.operator, work, env, relay.kubeconfig, no_capacity)
        operator.start()
        operator.wait_ready(120)
        record.say(f"control plane and operator up (pid {operator.proc.pid})")
        claims = ClaimWatch(env, record)
        checker = Checker(env, record, claims, operator, relay, args, sample_every)
        faults = Faults(work, env, record, rng_faults, operator, relay)
        workload.apply_initial()
        checker.start()
        phases["start"] = time.time() - t0

        began = time.time()
        end = began + args.minutes * 60
        workload.spot_until = end - SPOT_QUIET_SECONDS
        plant_at = began + max(30.0, args.minutes * 60 / 4) if args.plant else None
        length = "short" if short else "long"
        next_step = began + rng_timing.uniform(*STEP_GAP_SECONDS)
        next_fault = began + rng_timing.uniform(*FIRST_FAULT_SECONDS[length])
        while time.time() < end:
            faults.tick()
            workload.return_spot_if_late()
            if faults.active is None and next_fault is None:
                next_fault = (time.time() + FAULTS[faults.last][2]
                              + rng_timing.uniform(*FAULT_GAP_SECONDS[length]))
            status = operator.exited()
            if status is not None and not (faults.active and faults.active[0] == "operator-kill"):
                record.violation(("operator-exit", operator.starts), "operator-exit",
                                 f"pid {operator.proc.pid}", f"exited by itself ({status})")
                operator.start()
            if plant_at and time.time() >= plant_at and record.planted_node is None:
                try:
                    record.planted_node = plant_stuck_taint(env, record)
                except RuntimeError as e:
                    record.say(f"planting failed, trying again: {e}")
            if next_fault is not None and time.time() >= next_fault:
                faults.inject()
                next_fault = None
            elif time.time() >= next_step:
                try:
                    workload.step()
                except RuntimeError as e:
                    record.say(f"step failed: {e}")
                next_step = time.time() + rng_timing.uniform(*STEP_GAP_SECONDS)
            time.sleep(0.5)
        phases["changes and faults"] = time.time() - began

        # the end: faults healed, spot back, the workload scaled in, then settled
        faults.tick(heal_now=True)
        relay.set("pass")
        workload.spot_refused = False
        workload.write_capacity()
        if operator.exited() is not None:
            operator.start()
        for name in [*DEPLOYMENTS, STATEFULSET]:
            workload.scale(name, FINAL_REPLICAS)
        lifted = workload.lift_schedules()
        workload.unprotect_all()
        record.say(f"settling: faults over, each Deployment and the StatefulSet at "
                   f"{FINAL_REPLICAS} pods, "
                   f"{lifted} scheduled budget(s) lifted, {DO_NOT_DISRUPT} off every pod")
        settled, took = settle(checker, record, quiet, settle_limit)
        phases["settling"] = took
        record.say(f"settled after {took:.0f} s")
        if settled is not None:
            began = time.time()
            fresh_operator(checker, record, operator, settled)
            phases["fresh operator"] = time.time() - began
        checker.stop()
        code = 1 if record.violations else 0
        if record.violations:
            dump_state(env, work, record)
    except (KeyboardInterrupt, Stop) as e:
        record.say(f"stopped ({e or 'Ctrl-C'})")
        code = 130
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        record.say(f"the run failed: {e}")
        code = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if checker:
            checker.stopped = True
        if claims:
            claims.stop()
        if kubelet:
            kubelet.stop()
        if operator:
            operator.stop()
        if relay:
            relay.stop()
        # also after a start that failed half-way (a no-op when nothing was started)
        subprocess.run([E2E, "stop", work])
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if claims and checker:
        print(summary(args, record, claims, checker, kubelet, phases))
    if args.keep or code != 0:
        record.say(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
