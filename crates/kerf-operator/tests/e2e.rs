//! `kerf-operator --cloud-provider kwok` against a real control plane: pods bound by the real
//! kube-scheduler on nodes Kerf launched, consolidation through the real Eviction API, a
//! PodDisruptionBudget that holds a node, and a restart that picks up where it was.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{ControlPlane, Operator, root, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");

fn seed_004() -> Vec<u8> {
    std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed 004")
}

fn json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&cp.kubectl_ok(&all, None)).expect("kubectl json")
}

fn items(cp: &ControlPlane, args: &[&str]) -> Vec<Value> {
    json(cp, args)["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Pods of `app` that are Running, with their nodes.
fn running(cp: &ControlPlane, app: &str) -> Vec<(String, String)> {
    items(cp, &["get", "pods", "-l", &format!("app={app}")])
        .iter()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn nodeclaims(cp: &ControlPlane) -> Vec<Value> {
    items(cp, &["get", "nodeclaims"])
}

fn ready_nodeclaims(cp: &ControlPlane) -> usize {
    nodeclaims(cp)
        .iter()
        .filter(|c| {
            c["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["type"] == "Ready" && k["status"] == "True")
        })
        .count()
}

fn messages(op: &Operator, message: &str) -> usize {
    op.lines()
        .iter()
        .filter(|l| l["message"] == message)
        .count()
}

fn scale(cp: &ControlPlane, replicas: usize) {
    cp.kubectl_ok(
        &[
            "scale",
            "deployment/inflate",
            &format!("--replicas={replicas}"),
        ],
        None,
    );
}

fn all_running(cp: &ControlPlane, n: usize) {
    wait_for(
        &format!("{n} inflate pods running"),
        LIMIT,
        || (running(cp, "inflate").len() == n).then_some(()),
        || format!("{:?}", running(cp, "inflate")),
    );
}

#[test]
fn the_seed_walkthrough_scales_out_and_consolidates_back() {
    let cp = ControlPlane::start("walkthrough");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);

    scale(&cp, 5);
    all_running(&cp, 5);
    let claims = nodeclaims(&cp);
    assert_eq!(claims.len(), 1, "5 pods of 1 cpu fit one node: {claims:?}");
    let table = cp.kubectl_ok(&["get", "nodeclaims"], None);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    );
    assert!(table.contains("on-demand"), "{table}");
    wait_for(
        "the nodeclaim Ready",
        LIMIT,
        || (ready_nodeclaims(&cp) == 1).then_some(()),
        || table.clone(),
    );

    scale(&cp, 12);
    all_running(&cp, 12);
    assert!(nodeclaims(&cp).len() >= 2);

    scale(&cp, 5);
    all_running(&cp, 5);
    scale(&cp, 1);
    all_running(&cp, 1);
    wait_for(
        "consolidation down to one node",
        Duration::from_secs(240),
        || (nodeclaims(&cp).len() == 1 && items(&cp, &["get", "nodes"]).len() == 1).then_some(()),
        || format!("{} nodeclaims", nodeclaims(&cp).len()),
    );
    assert!(messages(&op, "disrupting node(s)") >= 1);
    assert!(messages(&op, "deleted nodeclaim") >= 1);
    // what `kubectl describe` lists: Karpenter's events, about the objects by UID
    let about = |events: &[Value], reason: &str, kind: &str| {
        events
            .iter()
            .filter(|e| {
                e["reason"] == reason
                    && e["regarding"]["kind"] == kind
                    && e["regarding"]["uid"]
                        .as_str()
                        .is_some_and(|u| !u.is_empty())
                    && e["reportingController"] == "karpenter"
            })
            .count()
    };
    wait_for(
        "Nominated and DisruptionTerminating events",
        LIMIT,
        || {
            let events = items(&cp, &["get", "events.events.k8s.io", "-A"]);
            (about(&events, "Nominated", "Pod") >= 5
                && about(&events, "DisruptionTerminating", "Node") >= 1
                && about(&events, "DisruptionTerminating", "NodeClaim") >= 1)
                .then_some(())
        },
        || {
            format!(
                "{:?}",
                items(&cp, &["get", "events.events.k8s.io", "-A"])
                    .iter()
                    .map(|e| (e["reason"].clone(), e["regarding"]["kind"].clone()))
                    .collect::<Vec<_>>()
            )
        },
    );
    all_running(&cp, 1);
    // nothing left half-deleted: every node has its nodeclaim and the other way round
    let claims = nodeclaims(&cp);
    let nodes = items(&cp, &["get", "nodes"]);
    assert_eq!(
        claims[0]["status"]["nodeName"],
        nodes[0]["metadata"]["name"]
    );
}

const GUARDED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: guarded}
spec:
  replicas: 1
  selector: {matchLabels: {app: guarded}}
  template:
    metadata: {labels: {app: guarded}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pinned}
spec:
  replicas: 1
  selector: {matchLabels: {app: pinned}}
  template:
    metadata:
      labels: {app: pinned}
      annotations: {karpenter.sh/do-not-disrupt: "true"}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guarded}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: guarded}}
"#;

#[test]
fn a_pdb_and_do_not_disrupt_keep_their_pods_through_expiry() {
    let cp = ControlPlane::start("pdb");
    cp.install_crds();
    // seed 004 with nodes that expire after 20 seconds
    let seed = String::from_utf8(seed_004())
        .expect("utf-8")
        .replace("expireAfter: 720h", "expireAfter: 20s");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(seed.as_bytes()));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(GUARDED.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    let (_, node) = wait_for(
        "the guarded pod running",
        LIMIT,
        || running(&cp, "guarded").into_iter().next(),
        || format!("{:?}", running(&cp, "guarded")),
    );
    let (pinned, pinned_node) = wait_for(
        "the pinned pod running",
        LIMIT,
        || running(&cp, "pinned").into_iter().next(),
        || format!("{:?}", running(&cp, "pinned")),
    );
    wait_for(
        "expiry to start",
        LIMIT,
        || (messages(&op, "deleting expired nodeclaim") >= 1).then_some(()),
        || format!("{:?}", op.lines().last()),
    );
    // the Eviction API refuses while the budget allows nothing: the pod stays where it is,
    // and its node stays (tainted) with it
    std::thread::sleep(Duration::from_secs(15));
    let now = running(&cp, "guarded");
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].1, node, "the guarded pod moved");
    let n = json(&cp, &["get", "node", &node]);
    let taints: Vec<&str> = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert!(taints.contains(&"karpenter.sh/disrupted"), "{taints:?}");
    // once the budget is gone, the guarded pod is evicted; the pinned one never is
    cp.kubectl_ok(&["delete", "pdb", "guarded"], None);
    wait_for(
        "the guarded pod evicted from the expired node",
        LIMIT,
        || (!running(&cp, "guarded").iter().any(|(_, n)| *n == node)).then_some(()),
        || format!("{:?}", running(&cp, "guarded")),
    );
    assert_eq!(running(&cp, "pinned"), [(pinned, pinned_node)]);
}

#[test]
fn a_restarted_operator_picks_up_its_nodeclaims() {
    let cp = ControlPlane::start("restart");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let first = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 12);
    all_running(&cp, 12);
    let before: Vec<String> = nodeclaims(&cp)
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    first.kill();
    let second = Operator::start(&cp, OPERATOR, 2, &[]);
    // no new capacity for pods that already run, no orphan collected by mistake
    std::thread::sleep(Duration::from_secs(5));
    let after: Vec<String> = nodeclaims(&cp)
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(before, after);
    assert_eq!(messages(&second, "created nodeclaim"), 0);
    assert_eq!(
        messages(&second, "garbage collecting instance without nodeclaim"),
        0
    );
    // and it still consolidates what the first one launched
    scale(&cp, 1);
    wait_for(
        "consolidation by the restarted operator",
        Duration::from_secs(240),
        || (nodeclaims(&cp).len() == 1).then_some(()),
        || format!("{} nodeclaims", nodeclaims(&cp).len()),
    );
    all_running(&cp, 1);
}

fn claim_names(cp: &ControlPlane) -> Vec<String> {
    nodeclaims(cp)
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_template_change_drifts_and_replaces_the_node() {
    let cp = ControlPlane::start("drift");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 3);
    all_running(&cp, 3);
    let before = claim_names(&cp);
    assert_eq!(before.len(), 1);
    cp.kubectl_ok(
        &[
            "patch",
            "nodepool",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"metadata":{"labels":{"team":"checkout"}}}}}"#,
        ],
        None,
    );
    wait_for(
        "the drifted node replaced",
        Duration::from_secs(180),
        || {
            let now = claim_names(&cp);
            (now.len() == 1 && now != before).then_some(())
        },
        || format!("{:?}", claim_names(&cp)),
    );
    all_running(&cp, 3);
    let drifted = op
        .lines()
        .into_iter()
        .any(|l| l["message"] == "marking drifted" && l["reason"] == "NodePoolDrifted");
    assert!(drifted);
    let node = items(&cp, &["get", "nodes"]).remove(0);
    assert_eq!(node["metadata"]["labels"]["team"], "checkout");
}

#[test]
fn limits_hold_and_invalid_nodepools_are_rejected_with_kerfs_message() {
    let cp = ControlPlane::start("limits");
    cp.install_crds();
    let seed = String::from_utf8(seed_004())
        .expect("utf-8")
        .replace("cpu: 1000", "cpu: 8");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(seed.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 12);
    wait_for(
        "the limit reached",
        LIMIT,
        || {
            op.lines()
                .iter()
                .any(|l| l["message"] == "could not schedule pod")
                .then_some(())
        },
        || format!("{:?}", op.lines().last()),
    );
    std::thread::sleep(Duration::from_secs(5));
    let cpus: i64 = items(&cp, &["get", "nodes"])
        .iter()
        .map(|n| {
            n["status"]["capacity"]["cpu"]
                .as_str()
                .and_then(|c| c.parse::<i64>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert!(
        cpus > 0 && cpus <= 8,
        "{cpus} cpus launched under a limit of 8"
    );
    assert!(running(&cp, "inflate").len() < 12);
    let pool = json(&cp, &["get", "nodepool", "default"]);
    assert_eq!(pool["status"]["resources"]["cpu"], "8", "{pool}");

    let invalid = seed.replace(
        "consolidateAfter: 1m",
        "consolidateAfter: 1m\n    budgets:\n    - nodes: \"10%\"\n      schedule: \"0 9 * * *\"",
    );
    let out = cp.kubectl(&["apply", "-f", "-"], Some(invalid.as_bytes()));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'schedule' must be set with 'duration'"),
        "{err}"
    );
}

#[test]
fn orphans_from_a_crash_are_launched_or_collected() {
    let cp = ControlPlane::start("orphans");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    // as left by an operator that died between creating a NodeClaim and launching it, and
    // by one that died after launching an instance whose NodeClaim it never wrote
    let unlaunched = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-crash
  labels: {karpenter.sh/nodepool: default}
  finalizers: [karpenter.sh/termination]
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [c6a.large]}
  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: v1
kind: Node
metadata:
  name: default-ghost
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {karpenter.sh/nodepool: default}
spec:
  providerID: kwok://default-ghost
"#;
    cp.kubectl_ok(&["apply", "-f", "-"], Some(unlaunched.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    wait_for(
        "the unlaunched nodeclaim launched and ready",
        LIMIT,
        || (ready_nodeclaims(&cp) == 1).then_some(()),
        || format!("{:?}", nodeclaims(&cp)),
    );
    wait_for(
        "the instance without a nodeclaim collected",
        LIMIT,
        || {
            (!cp.kubectl(&["get", "node", "default-ghost"], None)
                .status
                .success())
            .then_some(())
        },
        || format!("{:?}", op.lines().last()),
    );
    assert_eq!(claim_names(&cp), ["default-crash"]);
    let node = json(&cp, &["get", "node", "default-crash"]);
    assert_eq!(
        node["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        "c6a.large"
    );
}

const BATCH: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: batch}
spec:
  replicas: 3
  selector: {matchLabels: {app: batch}}
  template:
    metadata: {labels: {app: batch}}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: karpenter.sh/nodepool, operator: In, values: [batch, batch-fallback]}
      containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
"#;

#[test]
fn without_spot_capacity_the_fallback_nodepool_launches_and_spot_takes_over_when_it_returns() {
    let cp = ControlPlane::start("fallback");
    cp.install_crds();
    // seed 000: a spot NodePool of weight 100 and an on-demand fallback of weight 10
    let seed =
        std::fs::read(root().join("fixtures/seeds/000-spot-fallback.yaml")).expect("seed 000");
    let pools: Vec<&str> = std::str::from_utf8(&seed)
        .expect("utf-8")
        .split("\n---\n")
        .filter(|d| d.contains("kind: NodePool"))
        .collect();
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(pools.join("\n---\n").as_bytes()),
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(BATCH.as_bytes()));
    let dry = cp.dir.join("no-capacity");
    std::fs::write(&dry, "spot\n").expect("no-capacity file");
    let op = Operator::start(
        &cp,
        OPERATOR,
        1,
        &["--kwok-no-capacity", dry.to_str().expect("utf-8 path")],
    );
    wait_for(
        "the batch pods running",
        LIMIT,
        || (running(&cp, "batch").len() == 3).then_some(()),
        || format!("{:?}", op.lines().last()),
    );
    assert!(messages(&op, "failed launching nodeclaim") >= 1);
    for n in items(&cp, &["get", "nodes"]) {
        let labels = &n["metadata"]["labels"];
        assert_eq!(
            labels["karpenter.sh/nodepool"], "batch-fallback",
            "{labels}"
        );
        assert_eq!(
            labels["karpenter.sh/capacity-type"], "on-demand",
            "{labels}"
        );
    }
    // spot capacity returns: once the insufficient-capacity errors age out (3 minutes),
    // consolidation replaces the on-demand node with a cheaper spot node of the heavier
    // NodePool, and nothing else has to happen for it
    std::fs::write(&dry, "").expect("no-capacity file");
    wait_for(
        "the batch pods back on spot",
        Duration::from_secs(360),
        || {
            let pods = running(&cp, "batch");
            let nodes = items(&cp, &["get", "nodes"]);
            let on_spot = |node: &str| {
                nodes.iter().any(|n| {
                    n["metadata"]["name"] == node
                        && n["metadata"]["labels"]["karpenter.sh/nodepool"] == "batch"
                        && n["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
                })
            };
            (pods.len() == 3 && pods.iter().all(|(_, node)| on_spot(node))).then_some(())
        },
        || format!("{:?}", op.lines().last()),
    );
    assert!(messages(&op, "disrupting node(s)") >= 1);
}

#[test]
fn a_scenario_file_replays_against_the_control_plane_beside_its_simulation() {
    // `kerf` is built beside `kerf-operator` by `cargo test --workspace`
    let kerf = std::path::Path::new(OPERATOR).with_file_name("kerf");
    assert!(
        kerf.exists(),
        "{} is missing: build it with `cargo build -p kerf`",
        kerf.display()
    );
    let cp = ControlPlane::start("replay");
    cp.install_crds();
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    let scenario = root().join("fixtures/scenarios/burst.yaml");
    let out = std::process::Command::new(&kerf)
        .args(["replay", "-o", "json", "--every", "2s"])
        .arg(&scenario)
        .env("KUBECONFIG", &cp.kubeconfig)
        .output()
        .expect("kerf replay runs");
    assert!(
        out.status.success(),
        "kerf replay: {}\noperator: {:?}",
        String::from_utf8_lossy(&out.stderr),
        op.lines().last()
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("kerf replay -o json");
    let (real, sim) = (&v["replay"], &v["simulation"]);
    let samples = real["timeline"].as_array().expect("timeline");
    assert!(
        samples.last().expect("samples")["t"].as_f64() >= Some(180.0),
        "{samples:?}"
    );
    let peak = |timeline: &Value| {
        timeline
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["nodes"].as_u64())
            .max()
    };
    // 20 pods of one cpu on c6a nodes: the real control plane and the simulation peak at the
    // same node count, every pod runs, and both end with one node for the last three pods
    assert_eq!(peak(&real["timeline"]), peak(&sim["timeline"]), "{v}");
    assert_eq!(samples.last().expect("samples")["pending_pods"], 0);
    let shapes = |nodes: &Value| -> Vec<(String, String)> {
        let mut out: Vec<_> = nodes
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                (
                    n["nodepool"].as_str().unwrap_or("").to_string(),
                    n["capacity_type"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        out.sort();
        out
    };
    assert_eq!(
        shapes(&real["nodes"]),
        shapes(&sim["final"]["nodes"]),
        "{v}"
    );
    assert!(
        real["max_pod_pending_seconds"].as_f64() < Some(60.0),
        "{}",
        real["max_pod_pending_seconds"]
    );
}
