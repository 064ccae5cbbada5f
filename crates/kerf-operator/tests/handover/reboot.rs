//! Node repair's reboot on Karpenter v1.15.0's kwok provider (its `KWOKRebootRequired` policy:
//! 30 s tolerated, a one-minute drain, `RebootNode`), Karpenter and Kerf one after the other on
//! one control plane, both with `NodeRepair=true`: the node is drained and rebooted in place
//! (kwok's reboot writes a new boot id), its NodeClaim goes through `Rebooting` and stays, and
//! the same annotations, conditions and events are written. (A module of the handover test
//! binary, so that it runs beside it.)

use std::collections::BTreeMap;
use std::time::Duration;

use super::lifecycle::{Watch, every_state};
use super::repair::{clear, items, one_pod_pool, running_on, set_condition};
use super::support::{ControlPlane, wait_for};
use serde_json::Value;

/// The settings both run with.
const SETTINGS: [(&str, &str); 1] = [("FEATURE_GATES", "NodeRepair=true")];

/// Sets the node's `KWOKRebootRequired` (`status` True or False), dated 11 minutes back as
/// Karpenter's own e2e test injects it.
fn reboot_required(cp: &ControlPlane, node: &str, status: &str) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let then = now - k8s_openapi::jiff::SignedDuration::from_mins(11);
    let condition = serde_json::json!({
        "type": "KWOKRebootRequired", "status": status, "reason": "E2ETest",
        "message": "injected reboot-clearable fault", "lastTransitionTime": then.to_string(),
        "lastHeartbeatTime": now.to_string(),
    });
    set_condition(cp, node, condition);
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
    let (claim, node) = running_on(cp, who, "reboot");
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

#[test]
fn karpenter_and_kerf_reboot_a_node_kwok_asks_to_reboot_alike() {
    let manifests = one_pod_pool("reboot");
    let run = super::each_in_turn("reboot", &manifests, &SETTINGS, rebooted, clear);
    let logged: BTreeMap<String, usize> = (run.kerf_lines.iter())
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .filter(|m| m.contains("reboot"))
        .fold(BTreeMap::new(), |mut m, l| {
            *m.entry(l).or_default() += 1;
            m
        });
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);
    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}\nKerf logged: {logged:?}");
    assert!(
        karpenters.kept && karpenters.new_boot,
        "Karpenter rebooted in place: {karpenters:?}"
    );
    assert_eq!(kerfs, karpenters);
    assert_eq!(logged.get("committed node reboot"), Some(&1), "{logged:?}");
}
