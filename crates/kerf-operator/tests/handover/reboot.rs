//! Node repair's reboot on Karpenter v1.15.0's kwok provider (its `KWOKRebootRequired` policy:
//! 30 s tolerated, a one-minute drain, `RebootNode`), Karpenter and Kerf one after the other on
//! one control plane, both with `NodeRepair=true`: the node is drained and rebooted in place
//! (kwok's reboot writes a new boot id), its NodeClaim goes through `Rebooting` and stays, and
//! the same annotations, conditions and events are written. (A module of the handover test
//! binary, so that it runs beside it.)

use std::collections::BTreeMap;
use std::time::Duration;

use super::lifecycle::{Watch, every_state};
use super::support::{self, ControlPlane, Karpenter, Operator, wait_for};
use serde_json::Value;

use super::OPERATOR;

/// The settings both run with.
const SETTINGS: [(&str, &str); 1] = [("FEATURE_GATES", "NodeRepair=true")];

/// The NodePool (nothing consolidated meanwhile) and a one-pod Deployment on it.
const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: reboot}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
  disruption: {consolidateAfter: 1h}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: reboot, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: reboot}}
  template:
    metadata: {labels: {app: reboot}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: reboot}
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;

fn items(cp: &ControlPlane, kind: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&["get", kind, "-o", "json", "-A"], None);
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list["items"].as_array().cloned().unwrap_or_default()
}

fn pods_node(cp: &ControlPlane) -> Option<String> {
    items(cp, "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == "reboot")
        .filter(|p| p["status"]["phase"] == "Running")
        .find_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
}

/// Sets the node's `KWOKRebootRequired` (`status` True or False), dated 11 minutes back as
/// Karpenter's own e2e test injects it.
fn reboot_required(cp: &ControlPlane, node: &str, status: &str) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let then = now - k8s_openapi::jiff::SignedDuration::from_mins(11);
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "KWOKRebootRequired", "status": status, "reason": "E2ETest",
        "message": "injected reboot-clearable fault", "lastTransitionTime": then.to_string(),
        "lastHeartbeatTime": now.to_string(),
    }]}});
    let patch = patch.to_string();
    cp.kubectl_ok(
        &[
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch,
        ],
        None,
    );
}

/// What one autoscaler's reboot looked like.
#[derive(Debug, PartialEq)]
struct Rebooted {
    /// The `Rebooting` states the NodeClaim's versions went through.
    rebooting: Vec<String>,
    /// The `Rebooting` condition's last message.
    message: String,
    /// The drain bound written on the NodeClaim.
    grace: Option<String>,
    /// Whether the NodeClaim and its Node are still there.
    kept: bool,
    /// Whether the boot id is kwok's reboot's.
    new_boot: bool,
    /// The reasons of the Events about the NodeClaim (condition transitions left out).
    events: Vec<String>,
}

/// Lets `who` launch the pod's node, asks kwok's reboot of it, and watches the reboot end.
fn rebooted(cp: &ControlPlane, who: &str) -> Rebooted {
    let node = wait_for(
        &format!("{who}'s node running the pod"),
        Duration::from_secs(120),
        || pods_node(cp),
        || format!("{:?}", items(cp, "nodeclaims.karpenter.sh").len()),
    );
    let claim = items(cp, "nodeclaims.karpenter.sh")
        .into_iter()
        .find(|c| c["status"]["nodeName"] == node.as_str())
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .expect("the node's NodeClaim");
    let watch = Watch::start(cp, &format!("reboot-{who}"));
    reboot_required(cp, &node, "True");
    let ended = |c: &Value| {
        (c["status"]["conditions"].as_array().into_iter().flatten())
            .any(|c| c["type"] == "Rebooting" && c["status"] == "False")
    };
    let last = wait_for(
        &format!("{who} to reboot {node}"),
        Duration::from_secs(180),
        || {
            let c = (items(cp, "nodeclaims.karpenter.sh").into_iter())
                .find(|c| c["metadata"]["name"] == claim.as_str())?;
            ended(&c).then_some(c)
        },
        || {
            let out = cp.kubectl_ok(&["get", "nodeclaims", "-o", "yaml"], None);
            format!("nodeclaims: {out}")
        },
    );
    // cleared, as Karpenter's e2e test clears it, so that no second reboot follows
    reboot_required(cp, &node, "False");
    std::thread::sleep(Duration::from_secs(2));
    let versions: Vec<Value> = (watch.versions().into_iter().flatten())
        .filter(|v| v["metadata"]["name"] == claim.as_str())
        .collect();
    let rebooting = every_state(&versions)
        .remove("Rebooting")
        .unwrap_or_default();
    let message = (last["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten())
    .find(|c| c["type"] == "Rebooting")
    .and_then(|c| c["message"].as_str())
    .unwrap_or("")
    .to_string();
    let grace = last["metadata"]["annotations"]["karpenter.sh/reboot-termination-grace-period"]
        .as_str()
        .map(str::to_string);
    let nodes = items(cp, "nodes");
    let the_node = nodes
        .iter()
        .find(|n| n["metadata"]["name"] == node.as_str());
    let kept = the_node.is_some()
        && (items(cp, "nodeclaims.karpenter.sh").iter()).any(|c| {
            c["metadata"]["name"] == claim.as_str() && c["metadata"]["deletionTimestamp"].is_null()
        });
    let new_boot = the_node
        .and_then(|n| n["status"]["nodeInfo"]["bootID"].as_str())
        .is_some_and(|b| b.starts_with("kwok-"));
    let mut events: Vec<String> = (items(cp, "events").into_iter())
        .filter(|e| e["involvedObject"]["name"] == claim.as_str())
        .filter(|e| e["involvedObject"]["kind"] == "NodeClaim")
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .filter(|r| r.starts_with("Reboot"))
        .collect();
    events.sort();
    events.dedup();
    Rebooted {
        rebooting,
        message,
        grace,
        kept,
        new_boot,
        events,
    }
}

/// Takes away what an autoscaler made, so that the other starts from the same objects.
fn clear(cp: &ControlPlane) {
    super::parity::remove_nodes(cp);
    cp.kubectl_ok(
        &["delete", "pods", "--all", "-n", "default", "--force"],
        None,
    );
    cp.kubectl_ok(&["delete", "events", "--all", "-n", "default"], None);
    wait_for(
        "no NodeClaim or Node left",
        Duration::from_secs(60),
        || {
            let left = items(cp, "nodeclaims.karpenter.sh").len() + items(cp, "nodes").len();
            (left == 0).then_some(())
        },
        || "objects left".into(),
    );
}

#[test]
fn karpenter_and_kerf_reboot_a_node_kwok_asks_to_reboot_alike() {
    let cp = ControlPlane::start("reboot");
    cp.install_karpenter_kwok_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(MANIFESTS.as_bytes()));

    let karpenter = Karpenter::start(&cp, 1, &SETTINGS);
    let karpenters = rebooted(&cp, "Karpenter");
    karpenter.stop();
    clear(&cp);

    let mut env = support::chart_env(&cp, true);
    env.extend(SETTINGS.iter().map(|(k, v)| (*k, v.to_string())));
    let kerf = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "kwok"], &env);
    let kerfs = rebooted(&cp, "Kerf");
    let logged: BTreeMap<String, usize> = (kerf.lines().iter())
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .filter(|m| m.contains("reboot"))
        .fold(BTreeMap::new(), |mut m, l| {
            *m.entry(l).or_default() += 1;
            m
        });
    drop(kerf);

    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}\nKerf logged: {logged:?}");
    assert!(
        karpenters.kept && karpenters.new_boot,
        "Karpenter rebooted in place: {karpenters:?}"
    );
    assert_eq!(kerfs, karpenters);
    assert_eq!(logged.get("committed node reboot"), Some(&1), "{logged:?}");
}
