#!/usr/bin/env python3
"""Kerf and Karpenter v1.15.0 side by side on Karpenter's own performance workload.

  scripts/bench-vs-karpenter.py [--scale N] [--only kerf|karpenter|floor]... [--quiet SECONDS]
                                [--all-types] [--no-scale-in] [--few-seats] [--node-lease S]
                                [--operator PATH]

"Basic Deployment" of Karpenter's performance suite (test/suites/performance/basic_test.go):
500 pods of 900m/3100Mi and 500 of 3500m/28Gi (times --scale / 1000), one on-demand NodePool
on Karpenter kwok's instance types smaller than 32 cpu, consolidateAfter 30s; then both
Deployments scaled to 350 (70 %). Each autoscaler gets a fresh control plane of the same build
(scripts/e2e-cluster.sh) and the same instance types (Karpenter kwok's, which
`kerf-operator --cloud-provider kwok` offers for a KWOKNodeClass). Measured: seconds until
every pod runs; seconds until consolidation settles after the scale-in (the last change of
the node count before --quiet seconds without one); nodes and $/hour at both points; requested
over allocatable cpu and memory; the controller's peak RSS and CPU seconds (from /proc); the
API requests it made until every pod ran, by method (its own `client_go_request_total`).
`floor` is the control plane alone: the same pods onto pre-made kwok nodes of 256 cpu /
2 TiB (ten a thousand pods), no autoscaler in the loop. `--all-types` offers every Karpenter
kwok type (no 32-cpu cap); `--no-scale-in` stops once every pod runs (the 50,000-pod run);
`--few-seats` turns the API server's priority and fairness on and runs the autoscaler as the
ServiceAccount kube-system/kerf (cluster-admin), whose requests fixtures/apf/kerf-few-seats.yaml
puts on one seat that answers the rest 429 (the count is reported). From 10,000 pods kwok's
node leases last --node-lease seconds (default 240, renewed every quarter of it) and
kube-controller-manager waits as long on a silent node: at kwok's 40 s, 4,500 nodes renew 450
times a second, more than two vCPUs' API server keeps up with, and the node lifecycle then
evicts Running pods (scripts/e2e-cluster.sh, KERF_E2E_NODE_LEASE_SECONDS); and kwok works on
--kwok-parallelism pods, nodes and leases at once (default 16; kwok's own 4 made about 7 nodes
and 7 pods a second of 7,000 nodes and 50,000 pods, KERF_E2E_KWOK_PARALLELISM). Each run's work folder
(the autoscaler's log beside the control plane's) is kept and named, so the two logs of one
run can be read side by side. Prints a Markdown table (docs/src/results/race.md quotes it).
"""

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_operator",
                                               os.path.join(ROOT, "scripts/bench-operator.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CLUSTER = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.kwok.sh/instance-size, operator: Lt, values: ["32"]}  # SIZE
      expireAfter: Never
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
    budgets: [{nodes: "100%"}]
"""


def deployment(name, replicas, cpu, memory):
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, testing/cluster: unspecified}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: c, image: pause, resources: {{requests: {{cpu: "{cpu}", memory: "{memory}"}}}}}}]
"""


def floor_node(i):
    return f"""
apiVersion: v1
kind: Node
metadata:
  name: floor-{i}
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels: {{kubernetes.io/os: linux, kubernetes.io/hostname: floor-{i}, type: kwok}}
status:
  capacity: {{cpu: "256", memory: 2Ti, pods: "1024"}}
  allocatable: {{cpu: "256", memory: 2Ti, pods: "1024"}}
"""


def floor_nodes(scale):
    """Ten 256-cpu / 2 TiB nodes a thousand pods: room for the mix at any --scale."""
    return 10 * max(1, -(-scale // 1000))


def price(instance_type, capacity_type):
    """Karpenter kwok's price rule: 0.025 $/cpu + 0.001 $/GB an hour, spot 70 % of that."""
    family, size = instance_type.split("-")[:2]
    cpu = int(size.rstrip("x"))
    memory_gib = cpu * {"c": 2, "s": 4, "m": 8}[family]
    p = 0.025 * cpu + 0.001 * memory_gib * 2**30 / 1e9
    return p * 0.7 if capacity_type == "spot" else p


def quantity(text):
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    return float(text)


def state(cluster):
    """Nodes (with price), pods running, and requests over allocatable."""
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-o", "json"))["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    cost = 0.0
    alloc_cpu = alloc_mem = 0.0
    draining = 0
    for n in nodes:
        labels = n["metadata"].get("labels", {})
        t = labels.get("node.kubernetes.io/instance-type")
        if t:
            cost += price(t, labels.get("karpenter.sh/capacity-type", "on-demand"))
        a = n["status"].get("allocatable", {})
        alloc_cpu += quantity(a.get("cpu", "0"))
        alloc_mem += quantity(a.get("memory", "0"))
        taints = n.get("spec", {}).get("taints", [])
        if n["metadata"].get("deletionTimestamp") or any(
                x["key"] == "karpenter.sh/disrupted" for x in taints):
            draining += 1
    req_cpu = req_mem = 0.0
    for p in running:
        for c in p["spec"]["containers"]:
            r = c.get("resources", {}).get("requests", {})
            req_cpu += quantity(r.get("cpu", "0"))
            req_mem += quantity(r.get("memory", "0"))
    return {
        "nodes": len(nodes), "running": len(running), "cost": cost, "draining": draining,
        "cpu": req_cpu / alloc_cpu if alloc_cpu else 0.0,
        "memory": req_mem / alloc_mem if alloc_mem else 0.0,
    }


class RunningWatch:
    """Counts the pods Running from one watch of the namespace's pods (`kubectl get -w`), so that
    polling costs the API server nothing: listing the pods every few seconds (50,000 of them
    pending at first) was most of kube-apiserver's work in a 50,000-pod run and slowed the
    very thing measured. It selects Running pods only (`status.phase=Running`): a pending pod's
    scheduling and status writes never reach it, and kubectl's own CPU, which shares the
    machine with the control plane, stays small. The watch is opened again if it ends (the API
    server closes watches after 30 to 60 minutes) or goes quiet while the Deployments say more
    pods are available than it counted (`restart`: at 50,000 pods kubectl's watch once stopped
    delivering for minutes without ending); its first list counts afresh. The watch starts from
    the API server's watch cache (`resourceVersion=0`, the Running pods sent as ADDED first):
    `kubectl get --watch` lists from etcd first, and at 50,000 pods on a busy API server that
    list outlasted the request timeout every time, so a whole run counted 0."""

    def __init__(self, cluster):
        import threading
        self.cluster = cluster
        self.lock = threading.Lock()
        self.phases = {}
        self.stopped = False
        self.last_event = time.time()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self):
        path = ("/api/v1/namespaces/default/pods?watch=1&resourceVersion=0"
                "&fieldSelector=status.phase%3DRunning")
        while not self.stopped:
            proc = subprocess.Popen(
                ["kubectl", "get", "--raw", path],
                env=self.cluster.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.proc = proc
            # a watch opened again lists afresh: the count may dip while it does, never rise
            # past the truth, so a run is never taken for finished early
            current = {}
            with self.lock:
                self.phases = current
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                    kind, pod = event["type"], event["object"]
                    name = pod["metadata"]["name"]
                except (ValueError, KeyError, TypeError):
                    continue
                if kind == "ERROR":
                    break  # the cache has moved past it: opened again
                self.last_event = time.time()
                with self.lock:
                    if kind == "DELETED":
                        current.pop(name, None)
                    elif kind in ("ADDED", "MODIFIED"):
                        current[name] = pod.get("status", {}).get("phase", "")
            proc.terminate()
            proc.wait()
            if not self.stopped:
                time.sleep(1)

    def running(self):
        with self.lock:
            return sum(1 for phase in self.phases.values() if phase == "Running")

    def restart(self):
        """Ends the current watch: the follower opens another, which lists afresh."""
        proc = getattr(self, "proc", None)
        if proc and proc.poll() is None:
            proc.terminate()
        self.last_event = time.time()

    def stop(self):
        self.stopped = True
        self.restart()


def available(cluster):
    """The pods the Deployments count available (Ready), from their two objects: a check of the
    watch's count that costs the API server nothing."""
    try:
        out = cluster.kubectl("get", "deployments", "-n", "default", "-o",
                              "jsonpath={.items[*].status.availableReplicas}")
    except RuntimeError:
        return 0  # a busy API server's refusal: asked again a minute later
    return sum(int(n) for n in out.split())


def count_running(cluster):
    """The Running pods of the namespace, from one listing."""
    phases = cluster.kubectl("get", "pods", "-n", "default", "-o",
                             "jsonpath={.items[*].status.phase}")
    return phases.split().count("Running")


def last_running(cluster, t0):
    """Seconds from t0 to the last pod's container start (kwok's Running), as the API server
    stamped it (whole seconds): the polling loop only notices a second or two later, more at
    10,000 pods (where kwok's Ready conditions trail the phase by minutes)."""
    from datetime import datetime
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-o", "json"))["items"]
    started = [datetime.fromisoformat(s["state"]["running"]["startedAt"].replace("Z", "+00:00"))
               .timestamp()
               for p in pods for s in p["status"].get("containerStatuses", [])
               if "running" in s.get("state", {})]
    return max(started) - t0 if started else float("nan")


def few_seats(cluster, work):
    """Puts the ServiceAccount kube-system/kerf (cluster-admin) on the one seat of
    fixtures/apf/kerf-few-seats.yaml and returns a kubeconfig that authenticates as it (the
    admin's, in system:masters, is exempt from priority and fairness)."""
    cluster.kubectl("apply", "-f", os.path.join(ROOT, "fixtures/apf/kerf-few-seats.yaml"))
    cluster.kubectl("create", "serviceaccount", "kerf", "-n", "kube-system")
    cluster.kubectl("create", "clusterrolebinding", "kerf-bench", "--clusterrole=cluster-admin",
                    "--serviceaccount=kube-system:kerf")
    token = cluster.kubectl("create", "token", "kerf", "-n", "kube-system",
                            "--duration=24h").strip()
    with open(cluster.env["KUBECONFIG"]) as f:
        admin = f.read().splitlines()
    path = os.path.join(work, "kubeconfig-kube-system-kerf")
    with open(path, "w") as f:
        for line in admin:
            f.write(f"    token: {token}\n" if line.strip().startswith("token:") else line + "\n")
    return path


def rejected(cluster):
    """Requests the API server's priority and fairness turned away from the few seats."""
    total = 0.0
    for line in cluster.kubectl("get", "--raw", "/metrics").splitlines():
        if (line.startswith("apiserver_flowcontrol_rejected_requests_total{")
                and 'flow_schema="kerf-few-seats"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


# the kerf-operator binary raced: target/release's, built at the start, unless --operator
OPERATOR = [os.path.join(ROOT, "target/release/kerf-operator")]


def start_autoscaler(who, cluster, work, kubeconfig=None):
    log = open(os.path.join(work, f"{who}.log"), "w")
    metrics_port = free_port()
    env = dict(cluster.env, DISABLE_LEADER_ELECTION="true", METRICS_PORT=str(metrics_port),
               HEALTH_PROBE_PORT=str(free_port()), BIND_ADDRESS="127.0.0.1")
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    if who == "kerf":
        command = [OPERATOR[0], "--cloud-provider", "kwok"]
    else:
        kwok = subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "karpenter-kwok"],
                              capture_output=True, text=True, check=True).stdout.strip()
        command = [os.path.join(kwok, "kwok")]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    proc.metrics_port = metrics_port
    return proc


def requests_by_method(proc):
    """The API requests the autoscaler has made so far, by method, as its own
    `client_go_request_total` counts them (both autoscalers serve it): what a burst costs the
    API server, and what the client's QPS budget spends."""
    url = f"http://127.0.0.1:{proc.metrics_port}/metrics"
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except OSError as e:
        print(f"reading {url}: {e}", file=sys.stderr)
        return {}
    counts = {}
    for line in text.splitlines():
        if not line.startswith("client_go_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        method = re.search(r'method="([^"]*)"', labels)
        if method:
            counts[method.group(1)] = counts.get(method.group(1), 0) + int(float(value))
    return dict(sorted(counts.items()))


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(who, args):
    work = tempfile.mkdtemp(prefix=f"kerf-race-{who}-")
    cluster = bench.Cluster(work)
    proc = None
    small, large = args.scale // 2, args.scale - args.scale // 2
    total = small + large
    out = {"who": who}
    try:
        kwok = subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "karpenter-kwok"],
                              capture_output=True, text=True, check=True).stdout.strip()
        aws = subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "karpenter-crds"],
                             capture_output=True, text=True, check=True).stdout.strip()
        cluster.kubectl("apply", "--server-side", "-f",
                        os.path.join(aws, "karpenter.k8s.aws_ec2nodeclasses.yaml"))
        cluster.kubectl("apply", "--server-side", "-f", os.path.join(kwok, "crds"))
        cluster.wait_established("nodepools.karpenter.sh", "nodeclaims.karpenter.sh",
                                 "kwoknodeclasses.karpenter.kwok.sh")
        if who == "floor":
            for i in range(floor_nodes(args.scale)):
                cluster.kubectl("apply", "-f", "-", stdin=floor_node(i))
            time.sleep(5)
        else:
            pools = CLUSTER
            if args.all_types:
                pools = "\n".join(l for l in CLUSTER.splitlines() if "# SIZE" not in l)
            cluster.kubectl("apply", "-f", "-", stdin=pools)
            seats = few_seats(cluster, work) if args.few_seats else None
            proc = start_autoscaler(who, cluster, work, seats)
            time.sleep(3)
        watch = RunningWatch(cluster)
        t0 = time.time()
        cluster.kubectl("apply", "-f", "-", stdin=deployment("small-resource-app", small, "900m", "3100Mi"))
        cluster.kubectl("apply", "-f", "-", stdin=deployment("large-resource-app", large, "3500m", "28Gi"))
        peak = cpu = 0.0

        def sample():
            nonlocal peak, cpu
            if proc:
                rss, cpu, _ = bench.proc_stats(proc.pid)
                peak = max(peak, rss)

        next_report = 300 if total >= 10000 else None
        next_listing = time.time() + 60
        next_check = time.time() + 60
        ready = 0
        while True:
            sample()
            running = watch.running()
            if running >= total:
                break
            if time.time() >= next_check:
                # every pod Ready is Running: the Deployments' count ends the run as well; a
                # watch that counted less and has said nothing for a minute is opened again
                next_check = time.time() + 60
                ready = available(cluster)
                if ready >= total:
                    print(f"{who}: the watch counted {running}, the Deployments {ready} "
                          "available", file=sys.stderr)
                    break
                if ready > running and time.time() - watch.last_event > 60:
                    print(f"{who}: the watch counted {running} and was quiet, the Deployments "
                          f"{ready} available: watching again", file=sys.stderr)
                    watch.restart()
            if running >= total * 0.9 and time.time() >= next_listing:
                # at 10,000 pods the watch falls short by a few hundred with every pod Running
                # (9,807 and 9,932 in two runs, kubectl's watch missing updates): near the
                # end, a listing once a minute has the last word
                next_listing = time.time() + 60
                listed = count_running(cluster)
                if listed >= total:
                    print(f"{who}: the watch counted {running}, a listing {listed}",
                          file=sys.stderr)
                    break
            if time.time() - t0 > args.timeout:
                watch.stop()
                raise RuntimeError(f"{who}: {running} of {total} pods ran in {args.timeout} s")
            if next_report and time.time() - t0 >= next_report:
                next_report += 300
                print(f"{who}: {running} of {total} pods Running after {time.time() - t0:.0f} s "
                      f"({ready} available a minute ago or less)", file=sys.stderr)
            time.sleep(1)
        watch.stop()
        out["up"] = time.time() - t0
        s = state(cluster)
        out["up_stamped"] = last_running(cluster, t0)
        if proc:
            out["requests_up"] = requests_by_method(proc)
        out["at_up"] = s
        if who != "floor" and not args.no_scale_in:
            scaled = int(small * 0.7), int(large * 0.7)
            t1 = time.time()
            cluster.kubectl("scale", "deployment", "small-resource-app", f"--replicas={scaled[0]}")
            cluster.kubectl("scale", "deployment", "large-resource-app", f"--replicas={scaled[1]}")
            last_change, last = time.time(), None
            while time.time() - last_change < args.quiet:
                sample()
                s = state(cluster)
                shape = (s["nodes"], s["draining"])
                if shape != last:
                    last, last_change = shape, time.time()
                if time.time() - t1 > args.timeout:
                    out["unsettled"] = True
                    break
                time.sleep(2)
            out["settled"] = last_change - t1
            out["at_settled"] = s
        sample()
        out["rss"], out["cpu_s"] = peak, cpu
        if args.few_seats:
            out["rejected"] = rejected(cluster)
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.stop()
        print(f"{who}: logs in {work}", file=sys.stderr)
    out["work"] = work
    # each run's figures as soon as it ends: a long run's are not lost if a later one fails
    print(f"{who}: {json.dumps(out)}", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=1000, help="pods in all (half of each kind)")
    ap.add_argument("--only", action="append", choices=["karpenter", "kerf", "floor"])
    ap.add_argument("--quiet", type=int, default=60,
                    help="seconds without a node change that count as settled")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--all-types", action="store_true",
                    help="every Karpenter kwok type, not only those under 32 cpu")
    ap.add_argument("--no-scale-in", action="store_true",
                    help="stop once every pod runs")
    ap.add_argument("--few-seats", action="store_true",
                    help="the autoscaler's requests on one seat of the API server's "
                         "priority and fairness (fixtures/apf/kerf-few-seats.yaml)")
    ap.add_argument("--operator", metavar="PATH",
                    help="run this kerf-operator binary (default: build target/release's)")
    ap.add_argument("--node-lease", type=int,
                    help="kwok's node lease in seconds (default: kwok's 40 below 10,000 pods, "
                         "240 from there)")
    ap.add_argument("--kwok-parallelism", type=int,
                    help="pods, nodes and leases kwok works on at once (default: kwok's 4 "
                         "below 10,000 pods, 16 from there)")
    args = ap.parse_args()
    # a run stopped with SIGTERM still stops its control plane and autoscaler (the finally
    # of run), as ^C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    lease = args.node_lease or (240 if args.scale >= 10000 else None)
    if lease:
        os.environ["KERF_E2E_NODE_LEASE_SECONDS"] = str(lease)
    parallelism = args.kwok_parallelism or (16 if args.scale >= 10000 else None)
    if parallelism:
        os.environ["KERF_E2E_KWOK_PARALLELISM"] = str(parallelism)
    if args.few_seats:
        # scripts/e2e-cluster.sh turns priority and fairness on
        os.environ["KERF_E2E_APF"] = "1"
    runs = args.only or ["karpenter", "kerf", "floor"]
    if args.operator:
        OPERATOR[0] = os.path.abspath(args.operator)
    elif "kerf" in runs:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "kerf-operator"], cwd=ROOT,
                       check=True)
    results = [run(who, args) for who in runs]
    print(f"\n{args.scale} pods, then 70 % of them:\n")
    print("| | " + " | ".join(r["who"] for r in results) + " |")
    print("|---|" + "---|" * len(results))

    def row(name, f):
        print(f"| {name} | " + " | ".join(f(r) for r in results) + " |")

    row("every pod Running (s): stamped by the API server; seen by polling",
        lambda r: f"{r['up_stamped']:.0f}; {r['up']:.1f}")
    row("API requests until every pod ran, by method",
        lambda r: ", ".join(f"{m} {n}" for m, n in r.get("requests_up", {}).items()) or "–")
    row("nodes, $/hour at scale-out",
        lambda r: f"{r['at_up']['nodes']}, {r['at_up']['cost']:.2f}" if r["who"] != "floor" else f"{floor_nodes(args.scale)} pre-made")
    row("requests/allocatable cpu, memory",
        lambda r: f"{r['at_up']['cpu']:.2f}, {r['at_up']['memory']:.2f}")
    row("consolidation settled after scale-in (s)",
        lambda r: (f"not by {args.timeout}" if r.get("unsettled") else f"{r['settled']:.0f}")
        if "settled" in r else "–")
    row("nodes, $/hour after scale-in",
        lambda r: f"{r['at_settled']['nodes']}, {r['at_settled']['cost']:.2f}" if "at_settled" in r else "–")
    row("controller peak RSS (MiB)", lambda r: f"{r['rss']:.0f}" if r["who"] != "floor" else "–")
    row("controller CPU (s)", lambda r: f"{r['cpu_s']:.1f}" if r["who"] != "floor" else "–")
    if args.few_seats:
        row("requests turned away (429)", lambda r: str(r.get("rejected", "–")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
