//! Node repair on Karpenter v1.15.0's kwok provider's repair policies, Karpenter and Kerf one
//! after the other on one control plane, both with `NodeRepair=true`: a node whose
//! `KWOKUnhealthy` condition turns True is replaced once its 30-second toleration has passed,
//! its pod moving to the new node. (A module of the handover test binary, so that it runs
//! beside it.)

use std::time::{Duration, Instant};

use super::support::{ControlPlane, wait_for};
use serde_json::Value;

/// The settings both run with.
const SETTINGS: [(&str, &str); 1] = [("FEATURE_GATES", "NodeRepair=true")];

/// A NodePool named `name` (consolidating after an hour: nothing is consolidated meanwhile)
/// and a one-pod Deployment of that name on it, on Karpenter kwok's node class.
pub(super) fn one_pod_pool(name: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: default}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      expireAfter: Never
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
  disruption: {{consolidateAfter: 1h}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{karpenter.sh/nodepool: {name}}}
      containers: [{{name: app, image: pause, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
"#
    )
}

/// Every object of a kind, in every namespace.
pub(super) fn items(cp: &ControlPlane, kind: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&["get", kind, "-o", "json", "-A"], None);
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list["items"].as_array().cloned().unwrap_or_default()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// The node the pod of the Deployment `app` runs on, once it runs.
pub(super) fn pods_node(cp: &ControlPlane, app: &str) -> Option<String> {
    items(cp, "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .filter(|p| p["status"]["phase"] == "Running")
        .find_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
}

/// The NodeClaim whose node runs the pod of the Deployment `app`, with that node, once it
/// runs (launched by `who`).
pub(super) fn running_on(cp: &ControlPlane, who: &str, app: &str) -> (String, String) {
    let node = wait_for(
        &format!("{who}'s node running the pod"),
        Duration::from_secs(120),
        || pods_node(cp, app),
        || format!("{:?}", items(cp, "nodeclaims.karpenter.sh").len()),
    );
    let claim = items(cp, "nodeclaims.karpenter.sh")
        .into_iter()
        .find(|c| c["status"]["nodeName"] == node.as_str())
        .map(|c| name(&c))
        .expect("the node's NodeClaim");
    (claim, node)
}

/// Sets the node's `KWOKUnhealthy` condition True now.
pub(super) fn make_unhealthy(cp: &ControlPlane, node: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    set_condition(
        cp,
        node,
        serde_json::json!({
            "type": "KWOKUnhealthy", "status": "True", "reason": "FaultInjected",
            "message": "a simulated fault", "lastTransitionTime": now, "lastHeartbeatTime": now,
        }),
    );
}

/// Writes one condition into the node's status, as a fault injector does.
pub(super) fn set_condition(cp: &ControlPlane, node: &str, condition: Value) {
    let patch = serde_json::json!({"status": {"conditions": [condition]}}).to_string();
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

/// What one autoscaler did with an unhealthy node: how long after the fault its NodeClaim
/// started going, and whether the pod then ran on another node.
#[derive(Debug)]
struct Repaired {
    after: Duration,
    moved: bool,
}

/// Lets `who` launch the pod's node, makes the node unhealthy, and watches it replaced.
fn repaired(cp: &ControlPlane, who: &str) -> Repaired {
    let (claim, node) = running_on(cp, who, "repair");
    make_unhealthy(cp, &node);
    let fault = Instant::now();
    let after = wait_for(
        &format!("{who} to start replacing {claim}"),
        Duration::from_secs(150),
        || {
            let gone = !items(cp, "nodeclaims.karpenter.sh")
                .iter()
                .any(|c| name(c) == claim && c["metadata"]["deletionTimestamp"].is_null());
            gone.then(|| fault.elapsed())
        },
        || {
            let conditions = cp.kubectl_ok(
                &["get", "node", &node, "-o", "jsonpath={.status.conditions}"],
                None,
            );
            format!("node conditions: {conditions}")
        },
    );
    let moved = wait_for(
        &format!("{who}'s pod running on a new node"),
        Duration::from_secs(150),
        || pods_node(cp, "repair").filter(|n| *n != node).map(|_| true),
        || format!("{:?}", pods_node(cp, "repair")),
    );
    Repaired { after, moved }
}

/// Takes away what an autoscaler made (finalizers stripped: it is stopped), so that the other
/// starts from the same objects.
pub(super) fn clear(cp: &ControlPlane) {
    super::parity::remove_nodes(cp);
    cp.kubectl_ok(
        &["delete", "pods", "--all", "-n", "default", "--force"],
        None,
    );
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
fn karpenter_and_kerf_repair_an_unhealthy_kwok_node_alike() {
    let manifests = one_pod_pool("repair");
    let run = super::each_in_turn("repair", &manifests, &SETTINGS, repaired, clear);
    let selected = (run.kerf_lines.iter())
        .filter(|l| l["message"] == "selected repair policy")
        .count();
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);
    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}");
    // both wait out the 30-second toleration, then replace the node
    for (who, r) in [("Karpenter", karpenters), ("Kerf", kerfs)] {
        assert!(r.after >= Duration::from_secs(30), "{who}: {r:?}");
        assert!(r.after < Duration::from_secs(120), "{who}: {r:?}");
        assert!(r.moved, "{who}: {r:?}");
    }
    assert!(selected >= 1, "Kerf logs the policy it chose");
}
