#!/usr/bin/env python3
"""Benchmarks kerf-operator against a real control plane (scripts/e2e-cluster.sh) with kwok.

  scripts/bench-operator.py [--pods N] [--cpu MILLICORES] [--timeout SECONDS]

1. Latency: one pending pod; the time from its creation to "created nodeclaim" (the batch
   window is 1 s idle / 10 s max, so about 1 s of it is that window) and to Running.
2. Scale: a Deployment of N pods (default 10,000) of 700m cpu on c6a.2xlarge nodes (about ten
   pods a node, so 1,000 nodes for 10,000 pods); the time until every NodeClaim is created and
   every pod runs, and the operator's peak resident memory and CPU time (from /proc).

Prints one line per figure; docs/src/results/operator.md quotes them. Starts and stops everything it uses.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: bench}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: bench}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c6a.2xlarge]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: Never}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: bench}
spec:
  role: KarpenterNodeRole-bench
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
"""


def deployment(name, replicas, cpu):
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: "{cpu}m", memory: 256Mi}}}}}}]
"""


class Cluster:
    def __init__(self, directory):
        self.dir = directory
        subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "start", directory],
                       check=True, stdout=subprocess.DEVNULL)
        self.env = dict(os.environ, KUBECONFIG=os.path.join(directory, "kubeconfig"))

    def kubectl(self, *args, stdin=None):
        r = subprocess.run(["kubectl", *args], input=stdin, env=self.env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr}")
        return r.stdout

    def wait_established(self, *crds):
        """Waits until the API serves `crds`. `kubectl wait` fails at once, rather than
        waiting, on a CRD that has no status condition yet, so it is asked again for a minute."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.kubectl("wait", "--for=condition=Established", "--timeout=10s",
                             *(f"crd/{c}" for c in crds))
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self):
        subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "stop", self.dir])


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def log_lines(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def proc_stats(pid):
    """Peak resident memory (MiB) and CPU seconds of a process, and its resident memory now
    split into anonymous (heap, stacks) and file-backed (the binary's code) MiB."""
    hwm, split = 0, {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
            if line.startswith(("RssAnon:", "RssFile:")):
                split[line.split(":")[0]] = int(line.split()[1]) / 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    return hwm, cpu, (split.get("RssAnon", 0), split.get("RssFile", 0))


def operator_pid(pid):
    """The kerf-operator process: `pid` itself, or under a wrapper (a profiler) its
    descendant running the binary."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            if os.path.basename(os.readlink(f"/proc/{p}/exe")) == "kerf-operator":
                return p
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return pid


def running_pods(cluster, app):
    out = cluster.kubectl("get", "pods", "-l", f"app={app}",
                          "--field-selector=status.phase=Running", "-o", "name")
    return len(out.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--cpu", type=int, default=700, help="millicores per pod")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "-q", "-p", "kerf", "-p", "kerf-operator"],
                   cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="kerf-bench-")
    cluster = Cluster(work)
    operator = None
    try:
        crds = subprocess.run([os.path.join(ROOT, "target/release/kerf"), "crds"],
                              capture_output=True, text=True, check=True).stdout
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=crds)
        cluster.wait_established("nodepools.karpenter.sh", "nodeclaims.karpenter.sh",
                                 "ec2nodeclasses.karpenter.k8s.aws")
        cluster.kubectl("apply", "-f", "-", stdin=NODEPOOL)
        log_path = os.path.join(work, "operator.log")
        log = open(log_path, "w")
        # KERF_OPERATOR_WRAPPER runs the operator under a profiler, e.g. "heaptrack -o FILE"
        wrapper = os.environ.get("KERF_OPERATOR_WRAPPER", "").split()
        operator = subprocess.Popen(
            wrapper + [os.path.join(ROOT, "target/release/kerf-operator"), "--cloud-provider", "kwok"],
            env=cluster.env, stdout=log, stderr=log, start_new_session=True)
        time.sleep(2)

        # 1. one pending pod
        cluster.kubectl("apply", "-f", "-", stdin=deployment("single", 1, args.cpu))
        deadline = time.time() + 120
        while running_pods(cluster, "single") < 1:
            if time.time() > deadline:
                raise RuntimeError("the single pod never ran")
            time.sleep(0.2)
        pod = json.loads(cluster.kubectl("get", "pods", "-l", "app=single", "-o", "json"))["items"][0]
        created = ts(pod["metadata"]["creationTimestamp"])
        lines = log_lines(log_path)
        found = next(ts(l["time"]) for l in lines if l.get("message") == "found provisionable pod(s)")
        claim = next(ts(l["time"]) for l in lines if l.get("message") == "created nodeclaim")
        started = max(ts(c["lastTransitionTime"]) for c in pod["status"]["conditions"]
                      if c.get("lastTransitionTime"))
        print(f"single pod: created -> nodeclaim created {claim - created:.3f} s "
              f"(batch window closed -> nodeclaim {1000 * (claim - found):.0f} ms); "
              f"created -> running {started - created:.1f} s")

        # 2. N pods
        t0 = time.time()
        cluster.kubectl("apply", "-f", "-", stdin=deployment("bench", args.pods, args.cpu))
        peak_rss, cpu, split = 0.0, 0.0, (0.0, 0.0)
        deadline = t0 + args.timeout
        # listing N pods makes the API server (on the same 2 vCPUs) serialize them all, so
        # the pods are counted every N/1000 s (5 to 60) and the operator's memory read every
        # 5 s (Ready is no use here: the node lifecycle controller marks pods not ready when
        # a loaded kwok's heartbeats run late)
        interval = min(60.0, max(5.0, args.pods / 1000))
        last_count, n, claims = 0.0, 0, 0
        while True:
            rss, cpu, split = proc_stats(operator_pid(operator.pid))
            peak_rss = max(peak_rss, rss)
            if time.time() - last_count >= interval:
                n = running_pods(cluster, "bench")
                claims = len(cluster.kubectl("get", "nodeclaims", "-o", "name").split())
                last_count = time.time()
                print(f"  {time.time() - t0:6.0f} s: {n} pods running, {claims} nodeclaims, "
                      f"operator {rss:.0f} MiB ({split[0]:.0f} anonymous, {split[1]:.0f} "
                      f"file), {cpu:.1f} s cpu", flush=True)
            if n >= args.pods:
                break
            if time.time() > deadline:
                raise RuntimeError(f"only {n} of {args.pods} pods ran in {args.timeout} s")
            time.sleep(5)
        done = time.time() - t0
        lines = log_lines(log_path)
        created = [ts(l["time"]) for l in lines if l.get("message") == "created nodeclaim"]
        nodes = len(cluster.kubectl("get", "nodes", "-o", "name").split())
        print(f"{args.pods} pods: nodeclaims created by {max(created) - t0:.1f} s, all pods "
              f"running by {done:.0f} s, {nodes} nodes")
        print(f"operator: peak RSS {peak_rss:.0f} MiB, CPU {cpu:.1f} s; resident at the end "
              f"{split[0]:.0f} MiB anonymous, {split[1]:.0f} MiB file-backed")
    finally:
        if operator:
            # SIGINT first, to the whole group (a wrapper and the operator under it): the
            # operator stops cleanly, so a profiler around it writes its data
            os.killpg(operator.pid, signal.SIGINT)
            try:
                operator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(operator.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
