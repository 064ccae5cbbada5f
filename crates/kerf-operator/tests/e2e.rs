//! `kerf-operator --cloud-provider kwok` against a real control plane: pods bound by the real
//! kube-scheduler on nodes Kerf launched, consolidation through the real Eviction API, a
//! PodDisruptionBudget that holds a node, and a restart that picks up where it was.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{
    ControlPlane, Operator, chart_env, condition_true, created_by, http_get, root, wait_for,
};

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
        .filter(|c| condition_true(c, "Ready"))
        .count()
}

fn messages(op: &Operator, message: &str) -> usize {
    op.lines()
        .iter()
        .filter(|l| l["message"] == message)
        .count()
}

/// The chart's RBAC was enough: the API server refused no call the operator made.
fn nothing_refused(op: &Operator) {
    let forbidden: Vec<Value> = op
        .lines()
        .into_iter()
        .filter(|l| l.to_string().contains("forbidden"))
        .collect();
    assert!(forbidden.is_empty(), "{forbidden:?}");
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
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(op.health_port, "/readyz").0 == 200).then_some(()),
        || format!("{:?}", http_get(op.health_port, "/readyz")),
    );
    assert_eq!(http_get(op.health_port, "/healthz").0, 200);

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

    nothing_refused(&op);
    // every query of both Karpenter dashboards finds its metrics and labels
    let (status, metrics) = http_get(op.metrics_port, "/metrics");
    assert_eq!(status, 200, "{metrics}");
    let missing = unmet(&metrics);
    assert!(missing.is_empty(), "{}\n\n{metrics}", missing.join("\n"));
    let counted = |sample: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with(sample))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert!(counted("karpenter_nodes_created_total") >= 2.0, "{metrics}");
    assert!(
        counted("karpenter_nodes_terminated_total") >= 1.0,
        "{metrics}"
    );
    assert!(
        counted("karpenter_voluntary_disruption_decisions_total") >= 1.0,
        "{metrics}"
    );
    assert!(
        counted("karpenter_pods_startup_duration_seconds_count") >= 5.0,
        "{metrics}"
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

/// Every condition of an object's status, with its type and transition time.
fn conditions(object: &Value) -> Vec<(String, Option<String>)> {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or("").to_string(),
                c["lastTransitionTime"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn karpenters_own_crds_accept_every_write() {
    // a user replacing Karpenter keeps its CRDs, whose validation is stricter than Kerf's
    // (every condition needs lastTransitionTime; NodePool conditions a message and reason)
    let cp = ControlPlane::start("karpenter-crds");
    cp.install_karpenter_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 3);
    all_running(&cp, 3);
    wait_for(
        "the nodeclaim Ready",
        LIMIT,
        || (ready_nodeclaims(&cp) == 1).then_some(()),
        || {
            format!(
                "{:?}",
                nodeclaims(&cp).iter().map(conditions).collect::<Vec<_>>()
            )
        },
    );
    let claim = &nodeclaims(&cp)[0];
    let mut types: Vec<String> = conditions(claim).into_iter().map(|(t, _)| t).collect();
    // ordered by transition time, Ready last, as operatorpkg orders them
    assert_eq!(types.last().map(String::as_str), Some("Ready"), "{types:?}");
    types.sort();
    let all = [
        "ConsistentStateFound",
        "Initialized",
        "Launched",
        "Ready",
        "Registered",
    ];
    assert_eq!(types, all);
    assert!(
        conditions(claim).iter().all(|(_, at)| at.is_some()),
        "{:?}",
        conditions(claim)
    );
    let pool = json(&cp, &["get", "nodepool", "default"]);
    wait_for(
        "the nodepool's status",
        LIMIT,
        || {
            let pool = json(&cp, &["get", "nodepool", "default"]);
            (pool["status"]["nodes"] == 1).then_some(())
        },
        || format!("{:?}", pool["status"]),
    );
    let pool = json(&cp, &["get", "nodepool", "default"]);
    assert!(
        conditions(&pool)
            .iter()
            .any(|(t, at)| t == "Ready" && at.is_some()),
        "{:?}",
        pool["status"]
    );
    // empty, the node is consolidated away, its NodeClaim's finalizer released
    scale(&cp, 0);
    wait_for(
        "the empty node consolidated",
        Duration::from_secs(240),
        || (nodeclaims(&cp).is_empty() && items(&cp, &["get", "nodes"]).is_empty()).then_some(()),
        || format!("{} nodeclaims", nodeclaims(&cp).len()),
    );
    let refused: Vec<Value> = op
        .lines()
        .into_iter()
        .filter(|l| l["level"] == "ERROR")
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}

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
    nothing_refused(&op);
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
    cp.patch_nodepool(
        "default",
        r#"{"spec":{"template":{"metadata":{"labels":{"team":"checkout"}}}}}"#,
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
    // same node count, every pod runs, and at the last sample both hold the same nodes for
    // the last three pods (compared at that sample: a consolidation the simulation finishes
    // in the run's last instant is a second or two later on the control plane)
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
    let sampled: Vec<Value> = (sim["timeline"].as_array().and_then(|t| t.last()))
        .and_then(|s| s["by_pool"].as_array())
        .into_iter()
        .flatten()
        .flat_map(|b| {
            let node =
                serde_json::json!({"nodepool": b["nodepool"], "capacity_type": b["capacity_type"]});
            std::iter::repeat_n(node, b["nodes"].as_u64().unwrap_or(0) as usize)
        })
        .collect();
    assert_eq!(
        shapes(&real["nodes"]),
        shapes(&Value::Array(sampled)),
        "{v}"
    );
    assert!(
        real["max_pod_pending_seconds"].as_f64() < Some(60.0),
        "{}",
        real["max_pod_pending_seconds"]
    );
}

/// Labels Prometheus puts on every series itself (the target's and the server's), which no
/// exporter writes.
const TARGET_LABELS: [&str; 3] = ["cluster", "job", "instance"];

/// A `by (...)` label a dashboard groups by that Karpenter does not export either: the
/// capacity dashboard groups `karpenter_voluntary_disruption_decisions_total` by NodePool, but
/// Karpenter counts decisions per NodePool in
/// `karpenter_voluntary_disruption_decisions_by_nodepool_total` (which Kerf exports too).
const NOT_EXPORTED_BY_KARPENTER: [(&str, &str); 1] =
    [("karpenter_voluntary_disruption_decisions_total", "nodepool")];

/// The PromQL expressions (and template variable options) of a Grafana dashboard.
fn dashboard_queries(file: &str) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "query", Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let path = root()
        .join("../shared/data/karpenter-dashboards")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut out = Vec::new();
    walk(
        &serde_json::from_str(&text).expect("dashboard JSON"),
        &mut out,
    );
    out
}

/// What one query asks of the exporter: (metric, label) pairs, a label `None` for the metric
/// alone. Only Karpenter's and controller-runtime's metrics are the exporter's.
fn demands(query: &str) -> Vec<(String, Option<String>)> {
    let ours = |m: &str| m.starts_with("karpenter_") || m.starts_with("controller_runtime_");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = query.chars().collect();
    let mut out = Vec::new();
    let mut metrics_here = Vec::new();
    let mut by_labels = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !(chars[i].is_ascii_alphabetic() || chars[i] == '_')
            || (i > 0 && (ident(chars[i - 1]) || chars[i - 1] == '$'))
        {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && ident(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if word == "by" && chars.get(j) == Some(&'(') {
            let end = chars[j..]
                .iter()
                .position(|c| *c == ')')
                .map_or(chars.len(), |p| j + p);
            let list: String = chars[j + 1..end].iter().collect();
            by_labels.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('$'))
                    .map(String::from),
            );
            i = end;
            continue;
        }
        if word == "label_values" && chars.get(j) == Some(&'(') {
            let end = chars[j..]
                .iter()
                .position(|c| *c == ')')
                .map_or(chars.len(), |p| j + p);
            let args: String = chars[j + 1..end].iter().collect();
            if let Some((m, l)) = args.split_once(',') {
                let m = m.split('{').next().unwrap_or("").trim();
                if ours(m) {
                    out.push((m.to_string(), Some(l.trim().to_string())));
                }
            }
            i = end;
            continue;
        }
        if !ours(&word) {
            continue;
        }
        out.push((word.clone(), None));
        metrics_here.push(word.clone());
        if chars.get(j) == Some(&'{') {
            let end = chars[j..]
                .iter()
                .position(|c| *c == '}')
                .map_or(chars.len(), |p| j + p);
            let inner: String = chars[j + 1..end].iter().collect();
            for matcher in inner.split(',') {
                let name: String = matcher.trim().chars().take_while(|c| ident(*c)).collect();
                if !name.is_empty() && !TARGET_LABELS.contains(&name.as_str()) {
                    out.push((word.clone(), Some(name)));
                }
            }
            i = end;
        }
    }
    // a grouping label must be on at least one of the expression's metrics
    for l in by_labels {
        if TARGET_LABELS.contains(&l.as_str()) {
            continue;
        }
        let exempt = metrics_here
            .iter()
            .any(|m| NOT_EXPORTED_BY_KARPENTER.contains(&(m.as_str(), l.as_str())));
        if !exempt && !metrics_here.is_empty() {
            out.push((format!("any of {}", metrics_here.join(" ")), Some(l)));
        }
    }
    out
}

/// Each sample name of an exposition with the labels it carries somewhere.
fn exposition(
    text: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if let Some(rest) = line[name_end..].strip_prefix('{') {
            for pair in rest.split("\",") {
                if let Some((k, _)) = pair.split_once("=\"") {
                    labels.insert(k.trim_start_matches([',', '{']).to_string());
                }
            }
        }
    }
    out
}

/// What the dashboards ask that `metrics` lacks.
fn unmet(metrics: &str) -> Vec<String> {
    let exported = exposition(metrics);
    let has = |metric: &str, label: Option<&str>| {
        metric
            .split(' ')
            .filter(|m| *m != "any" && *m != "of")
            .any(|m| {
                exported
                    .get(m)
                    .is_some_and(|labels| label.is_none_or(|l| labels.contains(l)))
            })
    };
    let mut missing = Vec::new();
    for file in [
        "karpenter-capacity-dashboard.json",
        "karpenter-performance-dashboard.json",
    ] {
        for query in dashboard_queries(file) {
            // the distribution panel's template variable: labels to group pod states by
            if !query.contains('(') && query.contains(',') && !query.contains('{') {
                for l in query.split(',') {
                    if !has("karpenter_pods_state", Some(l.trim())) {
                        missing.push(format!("{file}: karpenter_pods_state without {l}"));
                    }
                }
                continue;
            }
            for (metric, label) in demands(&query) {
                if !has(&metric, label.as_deref()) {
                    missing.push(format!("{file}: {metric} {label:?} in {query}"));
                }
            }
        }
    }
    missing
}

#[test]
fn the_dashboard_checker_finds_what_an_exposition_lacks() {
    let full = "karpenter_nodes_created_total{nodepool=\"a\",zone=\"z\"} 1\n";
    assert!(
        demands(
            "sum by(cluster,nodepool) (karpenter_nodes_created_total{nodepool=~\"$nodepool\"})"
        )
        .iter()
        .all(|(m, l)| {
            let e = exposition(full);
            m.split(' ').any(|m| {
                e.get(m)
                    .is_some_and(|s| l.as_ref().is_none_or(|l| s.contains(l)))
            })
        })
    );
    // a planted gap: the nodepool label missing, then the metric missing
    let missing = unmet("karpenter_nodes_created_total{zone=\"z\"} 1\n");
    assert!(
        missing
            .iter()
            .any(|m| m.contains("karpenter_nodes_created_total Some(\"nodepool\")")),
        "{missing:?}"
    );
    assert!(
        missing.iter().any(|m| m.contains("karpenter_pods_state")),
        "{missing:?}"
    );
    assert!(
        missing
            .iter()
            .any(|m| m.contains("controller_runtime_reconcile_time_seconds_bucket")),
        "{missing:?}"
    );
}

#[test]
fn of_two_replicas_one_acts_and_the_other_takes_over_when_it_dies() {
    let cp = ControlPlane::start("leader");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let replica = |n: u32, id: &str| {
        let mut env = chart_env(&cp, true);
        env.push(("LEADER_ELECTION_IDENTITY", id.to_string()));
        Operator::spawn(&cp, OPERATOR, n, &["--cloud-provider", "kwok"], &env)
    };
    let acquired = |op: &Operator| messages(op, "successfully acquired lease");
    let a = replica(1, "replica-a");
    wait_for(
        "replica a to lead",
        LIMIT,
        || (acquired(&a) == 1).then_some(()),
        || format!("{:?}", a.lines()),
    );
    let b = replica(2, "replica-b");
    wait_for(
        "replica b ready",
        LIMIT,
        || (http_get(b.health_port, "/readyz").0 == 200).then_some(()),
        || format!("{:?}", b.lines()),
    );
    scale(&cp, 5);
    all_running(&cp, 5);
    // the candidate watches and serves metrics but acts on nothing
    assert_eq!(acquired(&b), 0, "{:?}", b.lines());
    assert!(created_by(&b).is_empty());
    assert_eq!(http_get(b.metrics_port, "/metrics").0, 200);
    let by_a = created_by(&a);
    assert!(!by_a.is_empty());

    // a crash: no release, so b waits out the lease (15 s) before it acts
    a.kill();
    let killed = std::time::Instant::now();
    wait_for(
        "replica b to take over",
        Duration::from_secs(40),
        || (acquired(&b) == 1).then_some(()),
        || format!("{:?}", b.lines()),
    );
    let took = killed.elapsed();
    println!("takeover after a crash: {took:?}");
    // the lease's 15 s, then up to a few 2 s retry periods (more on 2 busy CPUs): a second
    // lease period waited out would be a bug
    assert!(took <= Duration::from_secs(26), "takeover took {took:?}");
    scale(&cp, 12);
    all_running(&cp, 12);
    let by_b = created_by(&b);
    assert!(!by_b.is_empty(), "{:?}", b.lines());
    assert!(by_a.is_disjoint(&by_b), "{by_a:?} {by_b:?}");
    for claim in claim_names(&cp) {
        assert!(
            by_a.contains(&claim) || by_b.contains(&claim),
            "{claim} made twice or by none"
        );
    }

    // a rollout: SIGTERM, the Lease handed back at once
    let status = b.terminate();
    assert!(status.success(), "{status:?}");
    let lease = json(
        &cp,
        &[
            "get",
            "lease",
            "karpenter-leader-election",
            "-n",
            "kube-system",
        ],
    );
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
}

/// A pre-provisioned volume in one zone, its claim bound by kube-controller-manager, and a pod
/// mounting it: Kerf launches the node in the volume's zone, where kube-scheduler's volume
/// binding lets the pod run. Then the node's CSINode says it attaches one EBS volume: a second
/// pod with a volume of its own does not fit there (kube-scheduler's NodeVolumeLimits), and
/// Kerf launches a second node for it rather than waiting on the first.
///
/// Each pod is created once kube-controller-manager has bound its claim: a pod that reaches
/// kube-scheduler before its claim is in the scheduler's cache can sit in its unschedulable
/// queue for five minutes (seen on a busy CI machine: preemption failed with "not found" and no
/// later event brought the pod back), which is kube-scheduler's race, not what this tests.
/// Likewise every node gets its CSINode as the EBS CSI driver's node plugin would publish it:
/// a pod kube-scheduler turned away for the attach limit alone comes back only on a CSINode
/// event (its NodeVolumeLimits plugin registers no Node events), so without one the second pod
/// would wait out the scheduler's five-minute flush beside the node launched for it.
#[test]
fn a_pod_whose_volume_lives_in_one_zone_gets_a_node_there() {
    let cp = ControlPlane::start("volume-zone");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let zone = "us-east-1c";
    let volume = format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-db}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {{namespace: default, name: data}}
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-db}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: default}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: pv-db
  resources: {{requests: {{storage: 10Gi}}}}
"#
    );
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default, labels: {app: db}}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#;
    // kube-controller-manager binds the pre-bound claim (its sync can lag on a busy machine)
    let bound = |claim: &str| {
        wait_for(
            &format!("claim {claim} bound"),
            LIMIT,
            || {
                let pvc = json(&cp, &["get", "pvc", claim]);
                (pvc["status"]["phase"] == "Bound").then_some(())
            },
            || cp.kubectl_ok(&["get", "pv,pvc", "-o", "wide"], None),
        )
    };
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(volume.as_bytes()));
    bound("data");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(pod.as_bytes()));
    wait_for(
        "the pod running",
        LIMIT,
        || (running(&cp, "db").len() == 1).then_some(()),
        || {
            format!(
                "{}\n{:?}",
                cp.kubectl_ok(&["get", "pods,pvc,nodeclaims", "-o", "wide"], None),
                op.lines().last()
            )
        },
    );
    let claims = nodeclaims(&cp);
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(
        claims[0]["metadata"]["labels"]["topology.kubernetes.io/zone"], zone,
        "{claims:?}"
    );

    let node = claims[0]["status"]["nodeName"]
        .as_str()
        .expect("registered");
    publish_csi_nodes(&cp);
    let second_volume = volume
        .replace("pv-db", "pv-db2")
        .replace("vol-db", "vol-db2")
        .replace("name: data", "name: data2"); // the claim and its claimRef
    let second_pod = pod
        .replace("claimName: data}", "claimName: data2}")
        .replace("name: db,", "name: db2,");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(second_volume.as_bytes()));
    bound("data2");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(second_pod.as_bytes()));
    // the second pod runs on a node of its own; the first, a bare pod on a node that is
    // now underutilized, may be consolidated away meanwhile, as Karpenter would
    let second_node = wait_for(
        "the second pod running, on a second node",
        LIMIT,
        || {
            publish_csi_nodes(&cp);
            running(&cp, "db")
                .into_iter()
                .find(|(pod, _)| pod == "db2")
                .map(|(_, node)| node)
        },
        || {
            format!(
                "{}\n{:?}",
                cp.kubectl_ok(&["get", "pods,pvc,nodeclaims", "-o", "wide"], None),
                op.lines().last()
            )
        },
    );
    assert_ne!(
        second_node, node,
        "kube-scheduler kept the second volume off the full node"
    );
    let made = created_by(&op);
    assert_eq!(made.len(), 2, "{made:?}");
    nothing_refused(&op);
}

/// Does what the EBS CSI driver's node plugin does on each node it starts on: publishes the
/// node's CSINode, here with room for one attached volume, so that one volume fills a node.
fn publish_csi_nodes(cp: &ControlPlane) {
    let published: Vec<Value> = items(cp, &["get", "csinodes"]);
    for node in items(cp, &["get", "nodes"]) {
        let name = node["metadata"]["name"].as_str().expect("named");
        if published.iter().any(|c| c["metadata"]["name"] == name) {
            continue;
        }
        let csi_node = format!(
            r#"
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {{name: {name}}}
spec:
  drivers: [{{name: ebs.csi.aws.com, nodeID: {name}, allocatable: {{count: 1}}}}]
"#
        );
        cp.kubectl_ok(&["apply", "-f", "-"], Some(csi_node.as_bytes()));
    }
}

const STATIC_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: ingress}
spec:
  replicas: 2
  limits: {nodes: "5"}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
---
apiVersion: v1
kind: Pod
metadata: {name: wants-ingress, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: ingress}
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "60"}}}]
"#;

fn pool_claims(cp: &ControlPlane, pool: &str) -> Vec<Value> {
    items(
        cp,
        &[
            "get",
            "nodeclaims",
            "-l",
            &format!("karpenter.sh/nodepool={pool}"),
        ],
    )
    .into_iter()
    .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
    .collect()
}

#[test]
fn a_static_nodepool_keeps_its_replicas_and_scales_with_kubectl() {
    let cp = ControlPlane::start("static");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(
        &cp,
        OPERATOR,
        1,
        &["--feature-gates", "StaticCapacity=true"],
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(STATIC_POOL.as_bytes()));
    let nodes_of = |cp: &ControlPlane, n: usize| {
        wait_for(
            &format!("{n} NodeClaims of the static NodePool, each with its node"),
            LIMIT,
            || {
                let claims = pool_claims(cp, "ingress");
                let ready = claims.iter().all(|c| c["status"]["nodeName"].is_string());
                let counted = json(cp, &["get", "nodepool", "ingress"])["status"]["nodes"] == n;
                (claims.len() == n && ready && counted).then_some(())
            },
            || {
                format!(
                    "{}\n{:?}",
                    cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
                    op.lines()
                )
            },
        );
    };
    nodes_of(&cp, 2);
    // through the scale subresource, as `kubectl scale` uses it
    cp.kubectl_ok(&["scale", "nodepool", "ingress", "--replicas=4"], None);
    nodes_of(&cp, 4);
    let before: Vec<String> = pool_claims(&cp, "ingress")
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
        .collect();
    cp.kubectl_ok(&["scale", "nodepool", "ingress", "--replicas=1"], None);
    nodes_of(&cp, 1);
    let kept = pool_claims(&cp, "ingress")[0]["metadata"]["name"]
        .as_str()
        .map(String::from)
        .unwrap_or_default();
    assert!(before.contains(&kept), "{kept} was made anew");
    assert_eq!(
        messages(&op, "deprovisioning nodeclaims to satisfy replica count"),
        1
    );
    // the pod that only a new node of the static NodePool could take stays pending: the
    // NodePool keeps its count, not its pods' demand
    assert_eq!(
        json(&cp, &["get", "pod", "wants-ingress"])["status"]["phase"],
        "Pending"
    );
    assert_eq!(pool_claims(&cp, "ingress").len(), 1);
    // the API server keeps the NodePool static, with Karpenter's message
    let out = cp.kubectl(
        &[
            "patch",
            "nodepool",
            "ingress",
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/replicas"}]"#,
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Cannot transition NodePool between static"),
        "{err}"
    );
    nothing_refused(&op);
}

const OVERLAYS: &str = r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: reserved}
spec:
  weight: 50
  price: "0.01"
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [r6i.2xlarge]}
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: discount-a}
spec:
  weight: 10
  priceAdjustment: "-5%"
  requirements: []
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: discount-b}
spec:
  weight: 10
  priceAdjustment: "-7%"
  requirements: []
"#;

fn condition_of(object: &Value, type_: &str) -> (String, String) {
    let c = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_);
    let field = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or("").to_string();
    (field("status"), field("reason"))
}

#[test]
fn node_overlays_reprice_launches_and_conflicts_are_reported_on_karpenters_crds() {
    let cp = ControlPlane::start("overlays");
    cp.install_karpenter_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(OVERLAYS.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &["--feature-gates", "NodeOverlay=true"]);
    wait_for(
        "every overlay's status written",
        LIMIT,
        || {
            let reserved = json(&cp, &["get", "nodeoverlay", "reserved"]);
            let a = json(&cp, &["get", "nodeoverlay", "discount-a"]);
            let b = json(&cp, &["get", "nodeoverlay", "discount-b"]);
            let ok = |o: &Value| condition_of(o, "Ready") == ("True".into(), "Ready".into());
            // of equal weights the later name wins; the other is a conflict
            let conflict =
                condition_of(&a, "ValidationSucceeded") == ("False".into(), "Conflict".into());
            (ok(&reserved) && ok(&b) && conflict).then_some(())
        },
        || {
            format!(
                "{}\n{:?}",
                cp.kubectl_ok(&["get", "nodeoverlays", "-o", "yaml"], None),
                op.lines()
            )
        },
    );
    // five 1-cpu pods: the reserved 2xlarge is the cheapest fit at its overlaid price
    scale(&cp, 5);
    // launched and labelled: the status and the labels are two writes
    let claim = wait_for(
        "a NodeClaim launched",
        LIMIT,
        || {
            nodeclaims(&cp).into_iter().find(|c| {
                c["status"]["providerID"].is_string()
                    && c["metadata"]["labels"]["node.kubernetes.io/instance-type"].is_string()
            })
        },
        || cp.kubectl_ok(&["get", "nodeclaims"], None),
    );
    assert_eq!(
        claim["metadata"]["labels"]["node.kubernetes.io/instance-type"], "r6i.2xlarge",
        "{claim}"
    );
    nothing_refused(&op);
}

/// One m5.xlarge a NodeClaim (3 pods of 1 cpu fit), coming up with a startup taint that the
/// test lifts, so that a pod of its own gets there first.
const NOMINATION: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      startupTaints: [{key: example.com/warming, effect: NoSchedule}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 10m}
"#;

/// A control plane with seed 004's EC2NodeClass and inflate Deployment, the NodePool
/// [`NOMINATION`] (nodes come up with a startup taint the test lifts) and the operator.
fn warming_plane(name: &str) -> (ControlPlane, Operator) {
    let cp = ControlPlane::start(name);
    cp.install_crds();
    let seed = String::from_utf8(seed_004()).expect("utf-8");
    let rest: Vec<&str> = seed
        .split("\n---\n")
        .filter(|d| !d.contains("kind: NodePool"))
        .collect();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(rest.join("\n---\n").as_bytes()));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(NOMINATION.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    (cp, op)
}

/// The time a pod was bound (its PodScheduled condition turned true), in seconds.
fn bound_at(pod: &Value) -> Option<i64> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "True")
        .and_then(|c| seconds(&c["lastTransitionTime"]))
}

/// An RFC 3339 time from the API server, in seconds since the epoch.
fn seconds(time: &Value) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = time.as_str()?.parse().ok()?;
    Some(t.as_second())
}

/// kube-scheduler gives the node Kerf planned three pods onto to another pod first: the two
/// that no longer fit get a NodeClaim of their own within 2 s of that binding, not after
/// the 20 s nomination window, and all three run.
#[test]
fn pods_whose_planned_node_kube_scheduler_filled_get_a_node_at_once() {
    let (cp, op) = warming_plane("nomination");
    scale(&cp, 3);
    let node = wait_for(
        "the first NodeClaim's node to register",
        LIMIT,
        || {
            let claims = nodeclaims(&cp);
            let [claim] = claims.as_slice() else {
                return None;
            };
            claim["status"]["nodeName"].as_str().map(String::from)
        },
        || format!("{:?}", nodeclaims(&cp)),
    );
    let filler = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: filler}}
spec:
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  tolerations: [{{key: example.com/warming, operator: Exists}}]
  terminationGracePeriodSeconds: 0
  containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 2500m}}}}}}]
"#
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(filler.as_bytes()));
    let filled = wait_for(
        "kube-scheduler to bind the filler",
        LIMIT,
        || bound_at(&json(&cp, &["get", "pod", "filler"])),
        || format!("{}", json(&cp, &["get", "pod", "filler"])),
    );
    // the node initializes: kube-scheduler binds the one inflate pod still fitting there
    cp.kubectl_ok(
        &["taint", "node", &node, "example.com/warming:NoSchedule-"],
        None,
    );
    let second = wait_for(
        "a second NodeClaim",
        LIMIT,
        || {
            let claims = nodeclaims(&cp);
            (claims.len() >= 2).then_some(claims)
        },
        || format!("{:?}", nodeclaims(&cp)),
    );
    let created: Vec<i64> = second
        .iter()
        .filter_map(|c| seconds(&c["metadata"]["creationTimestamp"]))
        .collect();
    let latest = created.iter().copied().max().expect("creation times");
    assert!(
        latest - filled <= 2,
        "the leftovers waited {} s after kube-scheduler filled their node",
        latest - filled
    );
    assert_eq!(second.len(), 2, "{second:?}");
    // its node comes up with the startup taint too, which the test lifts as well
    let other = wait_for(
        "the second NodeClaim's node to register",
        LIMIT,
        || {
            nodeclaims(&cp)
                .iter()
                .filter_map(|c| c["status"]["nodeName"].as_str().map(String::from))
                .find(|n| *n != node)
        },
        || format!("{:?}", nodeclaims(&cp)),
    );
    cp.kubectl_ok(
        &["taint", "node", &other, "example.com/warming:NoSchedule-"],
        None,
    );
    all_running(&cp, 3);
    nothing_refused(&op);
}

/// An admission policy that refuses every update of Kerf's Lease: the API server answers
/// everything else, but the leader cannot renew.
/// Pods kube-scheduler has not tried yet (it is down here, as it is behind under a burst)
/// are provisioned for: their NodeClaim is Ready before kube-scheduler first sees them, and
/// then it binds each at its first try, with no `FailedScheduling` on the way.
#[test]
fn pods_kube_scheduler_has_not_tried_get_their_node_before_it_tries_them() {
    let cp = ControlPlane::start("untried");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    cp.kill("kube-scheduler");
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 3);
    let claim = wait_for(
        "a Ready NodeClaim for pods kube-scheduler never tried",
        LIMIT,
        || {
            let claims = nodeclaims(&cp);
            let [claim] = claims.as_slice() else {
                return None;
            };
            condition_true(claim, "Ready").then(|| claim.clone())
        },
        || format!("{:?}", nodeclaims(&cp)),
    );
    let pods = items(&cp, &["get", "pods", "-l", "app=inflate"]);
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert!(
            bound_at(p).is_none()
                && p["status"]["conditions"]
                    .as_array()
                    .is_none_or(|cs| { cs.iter().all(|c| c["type"] != "PodScheduled") }),
            "kube-scheduler is down, yet {p}"
        );
    }
    cp.restart("kube-scheduler");
    all_running(&cp, 3);
    let node = claim["status"]["nodeName"].as_str().expect("its node");
    assert!(running(&cp, "inflate").iter().all(|(_, n)| n == node));
    let failed: Vec<Value> = items(
        &cp,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=FailedScheduling",
        ],
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(nodeclaims(&cp).len(), 1);
    nothing_refused(&op);
}

const FREEZE_LEASE: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: freeze-kerf-lease}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [coordination.k8s.io], apiVersions: [v1], operations: [UPDATE], resources: [leases]}
  validations:
    - {expression: "object.metadata.name != 'karpenter-leader-election'", message: the test freezes the Lease}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: freeze-kerf-lease}
spec:
  policyName: freeze-kerf-lease
  validationActions: [Deny]
"#;

/// The leader's Lease cannot be renewed (an admission policy refuses it) while the API server
/// answers everything else: once the renew deadline passes, the pods that come meanwhile get
/// no NodeClaim (every call of the actions waits at the Lease's gate), and once the Lease is
/// renewed they get one and run.
#[test]
fn no_nodeclaim_is_written_while_the_lease_is_overdue() {
    let cp = ControlPlane::start("lapse");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    wait_for(
        "the operator to lead",
        LIMIT,
        || (messages(&op, "successfully acquired lease") == 1).then_some(()),
        || format!("{:?}", op.lines()),
    );
    scale(&cp, 3);
    all_running(&cp, 3);
    let before = nodeclaims(&cp).len();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(FREEZE_LEASE.as_bytes()));
    wait_for(
        "the Lease to lapse",
        Duration::from_secs(60),
        || (messages(&op, "leader election lost") >= 1).then_some(()),
        || format!("{:?}", op.lines()),
    );
    // pods that need a node of their own: they would get one within seconds
    scale(&cp, 20);
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        nodeclaims(&cp).len(),
        before,
        "a NodeClaim written without the Lease"
    );
    cp.kubectl_ok(
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "freeze-kerf-lease",
        ],
        None,
    );
    wait_for(
        "the Lease to be renewed",
        LIMIT,
        || (messages(&op, "renewed leader lease after it lapsed, acting again") >= 1).then_some(()),
        || format!("{:?}", op.lines()),
    );
    all_running(&cp, 20);
    assert!(nodeclaims(&cp).len() > before);
}

/// The conditions of one NodeClaim, by type: (status, reason, message).
fn conditions_of(claim: &Value) -> std::collections::BTreeMap<String, (String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    claim["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let v = (text(&c["status"]), text(&c["reason"]), text(&c["message"]));
            (text(&c["type"]), v)
        })
        .collect()
}

/// A NodeClaim's conditions on the API server read as Karpenter v1.15 writes them through
/// its lifecycle (`Initialized` `Unknown` with `StartupTaintsExist` while the startup taint
/// is on, then `True`; `Ready` summing), and a condition another controller added stays
/// through Kerf's later status writes.
#[test]
fn nodeclaim_conditions_read_as_karpenters_and_another_controllers_stay() {
    let (cp, op) = warming_plane("conditions");
    scale(&cp, 1);
    let own = |s: &str, r: &str, m: &str| (s.to_string(), r.to_string(), m.to_string());
    let (name, node) = wait_for(
        "the NodeClaim registered, held uninitialized by its startup taint",
        LIMIT,
        || {
            let claims = nodeclaims(&cp);
            let [claim] = claims.as_slice() else {
                return None;
            };
            let c = conditions_of(claim);
            (c.get("Initialized")?.1 == "StartupTaintsExist").then(|| {
                let text = |v: &Value| v.as_str().unwrap_or("").to_string();
                (
                    text(&claim["metadata"]["name"]),
                    text(&claim["status"]["nodeName"]),
                )
            })
        },
        || format!("{:#?}", nodeclaims(&cp)),
    );
    let claim = json(&cp, &["get", "nodeclaim", &name]);
    let c = conditions_of(&claim);
    assert_eq!(c["Launched"], own("True", "Launched", ""));
    assert_eq!(c["Registered"], own("True", "Registered", ""));
    assert_eq!(
        c["Initialized"],
        own(
            "Unknown",
            "StartupTaintsExist",
            "StartupTaint \"example.com/warming:NoSchedule\" still exists"
        )
    );
    assert_eq!(
        c["Ready"],
        own("Unknown", "ReconcilingDependents", "Initialized=Unknown")
    );
    // another controller's condition, added beside Kerf's
    let foreign = r#"[{"op": "add", "path": "/status/conditions/-", "value": {"type": "example.com/Warm",
        "status": "True", "reason": "Warm", "message": "added by a test",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}}]"#;
    cp.kubectl_ok(
        &[
            "patch",
            "nodeclaim",
            &name,
            "--subresource=status",
            "--type=json",
            "-p",
            foreign,
        ],
        None,
    );
    cp.kubectl_ok(
        &["taint", "node", &node, "example.com/warming:NoSchedule-"],
        None,
    );
    let claim = wait_for(
        "the NodeClaim initialized",
        LIMIT,
        || {
            let claim = json(&cp, &["get", "nodeclaim", &name]);
            (conditions_of(&claim).get("Ready")?.0 == "True").then_some(claim)
        },
        || format!("{:#?}", json(&cp, &["get", "nodeclaim", &name])),
    );
    let c = conditions_of(&claim);
    assert_eq!(c["Initialized"], own("True", "Initialized", ""));
    assert_eq!(c["Ready"], own("True", "Ready", ""));
    assert_eq!(c["ConsistentStateFound"].0, "True");
    assert_eq!(
        c.get("example.com/Warm"),
        Some(&own("True", "Warm", "added by a test")),
        "another controller's condition was dropped: {c:#?}"
    );
    let list = claim["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert_eq!(
        list.last().map(|c| &c["type"]),
        Some(&serde_json::json!("Ready"))
    );
    let generation = &claim["metadata"]["generation"];
    for c in list.iter().filter(|c| c["type"] != "example.com/Warm") {
        assert_eq!(&c["observedGeneration"], generation, "{c}");
    }
    // what Karpenter's status controller makes of it: the transition's Event on the
    // NodeClaim, and the condition's series
    let transition =
        "Status condition transitioned, Type: Ready, Status: Unknown -> True, Reason: Ready";
    wait_for(
        "the Ready transition's Event",
        LIMIT,
        || {
            let events = items(
                &cp,
                &["get", "events", "-A", "--field-selector", "reason=Ready"],
            );
            (events.iter())
                .any(|e| e["involvedObject"]["name"] == name.as_str() && e["message"] == transition)
                .then_some(())
        },
        || json(&cp, &["get", "events", "-A"]).to_string(),
    );
    let metrics = http_get(op.metrics_port, "/metrics").1;
    let series = format!(
        "operator_nodeclaim_status_condition_count{{namespace=\"\",name=\"{name}\",type=\"Ready\",status=\"True\",reason=\"Ready\""
    );
    assert!(metrics.contains(&series), "no {series} in:\n{metrics}");
    nothing_refused(&op);
}

/// `kubectl delete node` on a node Kerf registered is held by Karpenter's termination
/// finalizer while Kerf deletes its NodeClaim and drains it, and the drained node waits for
/// its persistent volume's VolumeAttachment to go before the Node and instance do, as
/// Karpenter's termination waits: the Node is told `AwaitingVolumeDetachment` with the
/// attachment's name and `VolumesDetached` is Unknown meanwhile; once the attach-detach
/// controller (here the test) deletes the attachment, the NodeClaim and its Node go. Kerf
/// watches VolumeAttachments with the chart's RBAC.
#[test]
fn a_deleted_node_is_drained_and_waits_for_its_volume_attachments_to_go() {
    let cp = ControlPlane::start("detach");
    cp.install_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed_004()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    scale(&cp, 1);
    all_running(&cp, 1);
    let claims = nodeclaims(&cp);
    let [claim] = claims.as_slice() else {
        panic!("one NodeClaim: {claims:?}");
    };
    let name = claim["metadata"]["name"]
        .as_str()
        .expect("named")
        .to_string();
    let node = claim["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    let finalizers = json(&cp, &["get", "node", &node])["metadata"]["finalizers"].clone();
    assert_eq!(finalizers, serde_json::json!(["karpenter.sh/termination"]));
    // what the attach-detach controller writes for a pod's persistent volume on the node
    let attachment = format!(
        r#"
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {{name: csi-e2e-data}}
spec:
  attacher: ebs.csi.aws.com
  nodeName: {node}
  source: {{persistentVolumeName: pv-e2e-data}}
"#
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(attachment.as_bytes()));
    // the operator's watch has the attachment before the deletion starts
    wait_for(
        "the attachment listed",
        LIMIT,
        || (!items(&cp, &["get", "volumeattachments"]).is_empty()).then_some(()),
        String::new,
    );
    std::thread::sleep(Duration::from_secs(2));
    cp.kubectl_ok(&["delete", "node", &node, "--wait=false"], None);
    let told = "Awaiting deletion of bound volumeattachments (csi-e2e-data)";
    wait_for(
        "AwaitingVolumeDetachment on the Node, VolumesDetached Unknown",
        LIMIT,
        || {
            let events = items(
                &cp,
                &[
                    "get",
                    "events",
                    "-A",
                    "--field-selector",
                    "reason=AwaitingVolumeDetachment",
                ],
            );
            let on_node = (events.iter()).any(|e| {
                e["involvedObject"]["kind"] == "Node"
                    && e["involvedObject"]["name"] == node.as_str()
                    && e["message"] == told
            });
            let claim = json(&cp, &["get", "nodeclaim", &name]);
            let awaiting = conditions_of(&claim).get("VolumesDetached").cloned()
                == Some((
                    "Unknown".into(),
                    "AwaitingVolumeDetachment".into(),
                    "AwaitingVolumeDetachment".into(),
                ));
            (on_node && awaiting).then_some(())
        },
        || {
            format!(
                "{}\n{}",
                json(&cp, &["get", "events", "-A"]),
                json(&cp, &["get", "nodeclaim", &name])
            )
        },
    );
    // the wait holds: a few seconds on, the Node is still there, its NodeClaim being deleted
    std::thread::sleep(Duration::from_secs(5));
    cp.kubectl_ok(&["get", "node", &node], None);
    let claim = json(&cp, &["get", "nodeclaim", &name]);
    assert!(!claim["metadata"]["deletionTimestamp"].is_null(), "{claim}");
    cp.kubectl_ok(&["delete", "volumeattachment", "csi-e2e-data"], None);
    wait_for(
        "the NodeClaim and its Node gone",
        LIMIT,
        || {
            // the evicted pod's replacement gets a NodeClaim of its own meanwhile
            let claim_gone =
                (nodeclaims(&cp).iter()).all(|c| c["metadata"]["name"] != name.as_str());
            let nodes = items(&cp, &["get", "nodes"]);
            let node_gone = nodes.iter().all(|n| n["metadata"]["name"] != node.as_str());
            (claim_gone && node_gone).then_some(())
        },
        || cp.kubectl_ok(&["get", "nodes,nodeclaims", "-o", "wide"], None),
    );
    nothing_refused(&op);
}

/// `scripts/demo.sh`, the getting-started chapter's one command, run as a newcomer runs it
/// (with this build's operator): it must scale seed 004's `inflate` up on NodeClaims Kerf
/// launched, see consolidation take every node away after the scale to 0, and tear its
/// control plane down.
#[test]
fn the_demo_scales_a_local_cluster_up_and_back_down() {
    let root = support::root();
    let kerf = root.join("target/debug/kerf");
    let mut command = std::process::Command::new(root.join("scripts/demo.sh"));
    command
        .args(["--replicas", "4"])
        .env("KERF_OPERATOR", OPERATOR);
    if kerf.exists() {
        command.env("KERF", &kerf);
    }
    let out = command.output().expect("scripts/demo.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("all 4 inflate pods Running after"),
        "{stdout}"
    );
    assert!(stdout.contains("every node gone after"), "{stdout}");
    // the NodeClaims it showed were Kerf's, of seed 004's NodePool
    assert!(stdout.contains("default-"), "no NodeClaim shown:\n{stdout}");
    assert!(
        stdout.contains("launched nodeclaim"),
        "Kerf's log lines not shown:\n{stdout}"
    );
    // torn down: the folder it names holds no running component
    let folder = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("demo: stopped; the operator's log and the cluster's state are in ")
        })
        .expect("the demo says where its state is");
    let pids =
        std::fs::read_to_string(std::path::Path::new(folder).join("pids")).unwrap_or_default();
    for pid in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        assert!(!alive, "component {pid} still running after the demo");
    }
}

/// How far a NodeClaim's real removal may fall from `kerf plan`'s prediction of it: the
/// disruption pass runs every 10 s on both sides, so a pass's phase can move a decision by
/// up to one pass, and kwok's launches and the API server's latency add a second or two.
const PLAN_TOLERANCE: f64 = 12.0;

#[test]
fn kerf_plan_predicts_the_drift_roll_the_cluster_then_makes() {
    let kerf = std::path::Path::new(OPERATOR).with_file_name("kerf");
    assert!(
        kerf.exists(),
        "{} is missing: build it with `cargo build -p kerf`",
        kerf.display()
    );
    let fixtures = root().join("fixtures/plan");
    let cp = ControlPlane::start("plan");
    cp.install_crds();
    let roll = std::fs::read(fixtures.join("roll.yaml")).expect("roll.yaml");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&roll));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    wait_for(
        "four spread pods running on four ready nodes",
        LIMIT,
        || (running(&cp, "spread").len() == 4 && ready_nodeclaims(&cp) == 4).then_some(()),
        || format!("{:?}", running(&cp, "spread")),
    );
    let mut before = claim_names(&cp);
    before.sort();
    let version = |cp: &ControlPlane| {
        json(cp, &["get", "nodepool", "roll"])["metadata"]["resourceVersion"].clone()
    };
    let pool_version = version(&cp);

    // the operator's settings as a chart's Deployment holds them (scaled to none: the
    // operator runs beside the control plane here, with the same defaults)
    let deployment = br#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: kerf, namespace: kube-system}
spec:
  replicas: 0
  selector: {matchLabels: {app: kerf}}
  template:
    metadata: {labels: {app: kerf}}
    spec:
      containers:
        - name: controller
          image: example.com/kerf/controller:0.1.0
          env:
            - {name: FEATURE_GATES, value: "SpotToSpotConsolidation=false"}
            - {name: MIN_VALUES_POLICY, value: Strict}
"#;
    cp.kubectl_ok(&["apply", "-f", "-"], Some(deployment));

    // the plan, read off the live cluster: every node drifts, one at a time
    let change = fixtures.join("roll-relabelled.yaml");
    let out = std::process::Command::new(&kerf)
        .args([
            "plan",
            "-o",
            "json",
            "--for",
            "10m",
            "--launch-delay",
            "1s",
            "--ready-delay",
            "1s",
            "-f",
        ])
        .arg(&change)
        .env("KUBECONFIG", &cp.kubeconfig)
        .output()
        .expect("kerf plan runs");
    assert!(
        out.status.success(),
        "kerf plan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("kerf plan -o json");
    assert_eq!(
        plan["settings"],
        serde_json::json!({"source": "Deployment kube-system/kerf", "fields": {
            "featureGates": {"SpotToSpotConsolidation": false}, "minValuesPolicy": "Strict"}}),
        "the settings played are the operator Deployment's"
    );
    let mut predicted: Vec<(f64, String)> = plan["changed"]["removals"]
        .as_array()
        .expect("removals")
        .iter()
        .map(|r| {
            assert_eq!(r["reason"], "Drifted", "{plan}");
            let gone = r["terminated"].as_f64().expect("gone within the horizon");
            (
                gone,
                r["nodeclaim"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    predicted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut names: Vec<String> = predicted.iter().map(|p| p.1.clone()).collect();
    names.sort();
    assert_eq!(names, before, "{plan}");
    // it only read: the NodePool and the NodeClaims are as they were
    assert_eq!(version(&cp), pool_version);
    let mut after = claim_names(&cp);
    after.sort();
    assert_eq!(after, before);

    // then the change, applied: each NodeClaim's removal timed from the apply
    let applied = std::time::Instant::now();
    cp.kubectl_ok(&["apply", "-f", change.to_str().expect("utf-8 path")], None);
    let mut gone: Vec<(f64, String)> = Vec::new();
    wait_for(
        "every drifted NodeClaim gone",
        Duration::from_secs(240),
        || {
            let now = claim_names(&cp);
            for name in &before {
                if !now.contains(name) && !gone.iter().any(|g| &g.1 == name) {
                    gone.push((applied.elapsed().as_secs_f64(), name.clone()));
                }
            }
            std::thread::sleep(Duration::from_millis(250));
            (gone.len() == before.len()).then_some(())
        },
        || format!("{:?}", claim_names(&cp)),
    );
    wait_for(
        "four spread pods running again",
        LIMIT,
        || (running(&cp, "spread").len() == 4).then_some(()),
        || format!("{:?}", running(&cp, "spread")),
    );
    // the k-th node gone when the plan said the k-th would go
    for (k, (real, p)) in gone.iter().zip(&predicted).enumerate() {
        assert!(
            (real.0 - p.0).abs() <= PLAN_TOLERANCE,
            "removal {k}: {} gone after {:.1}s, predicted {} at {:.1}s\nreal: {gone:?}\nplan: {predicted:?}\noperator: {:?}",
            real.1,
            real.0,
            p.1,
            p.0,
            op.lines().last()
        );
    }
    eprintln!("kerf plan: predicted {predicted:?}, real {gone:?}");
}
