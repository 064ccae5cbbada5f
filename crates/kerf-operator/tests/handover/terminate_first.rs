//! `TerminateFirstDrift` beside Karpenter v1.15.0's kwok provider: a static NodePool of two
//! nodes at its node limit of two drifts (its template's label changes). No replacement can
//! be staged first, so each autoscaler, with `StaticCapacity=true,TerminateFirstDrift=true`,
//! deletes a drifted NodeClaim first and refills the pool: both must end with two NodeClaims
//! of the new template, never holding more than two at once, and say `terminate-first`.
//! (A module of the handover test binary, so that it runs beside it.)

use std::time::{Duration, Instant};

use serde_json::Value;

use super::items;
use super::support::{self, ControlPlane, wait_for};

/// The gates both run with.
const SETTINGS: [(&str, &str); 1] = [(
    "FEATURE_GATES",
    "StaticCapacity=true,TerminateFirstDrift=true",
)];

/// A static NodePool at its node limit, its template labelled `generation: one`.
const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 2
  limits: {nodes: "2"}
  template:
    metadata:
      labels: {generation: one}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux]}
  disruption:
    budgets: [{nodes: "1"}]
"#;

/// The NodeClaims now: each one's template generation label and whether it is initialized.
fn claims(cp: &ControlPlane) -> Vec<(String, bool)> {
    (items(cp, "nodeclaims.karpenter.sh").iter())
        .map(|c| {
            let generation = c["metadata"]["labels"]["generation"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (generation, support::condition_true(c, "Initialized"))
        })
        .collect()
}

/// What one autoscaler did with the drifted pool: how long until both NodeClaims were of
/// the new template and initialized, and the most NodeClaims seen at once.
#[derive(Debug)]
struct Replaced {
    after: Duration,
    most: usize,
}

/// Waits for the pool's two nodes, drifts the template, and watches both replaced.
fn replaced(cp: &ControlPlane, who: &str) -> Replaced {
    wait_for(
        &format!("{who}'s two initialized NodeClaims"),
        Duration::from_secs(120),
        || {
            let c = claims(cp);
            (c.len() == 2 && c.iter().all(|(g, i)| g == "one" && *i)).then_some(())
        },
        || format!("{:?}", claims(cp)),
    );
    let drift = r#"{"spec": {"template": {"metadata": {"labels": {"generation": "two"}}}}}"#;
    cp.kubectl_ok(
        &["patch", "nodepool", "fixed", "--type=merge", "-p", drift],
        None,
    );
    let start = Instant::now();
    let mut most = 0;
    let after = wait_for(
        &format!("{who} to replace both drifted NodeClaims"),
        Duration::from_secs(240),
        || {
            let c = claims(cp);
            most = most.max(c.len());
            (c.len() == 2 && c.iter().all(|(g, i)| g == "two" && *i)).then(|| start.elapsed())
        },
        || format!("{:?}", claims(cp)),
    );
    Replaced { after, most }
}

/// Puts the NodePool's template back and takes away what an autoscaler made (finalizers
/// stripped: it is stopped).
fn clear(cp: &ControlPlane) {
    let back = r#"{"spec": {"template": {"metadata": {"labels": {"generation": "one"}}}}}"#;
    cp.kubectl_ok(
        &["patch", "nodepool", "fixed", "--type=merge", "-p", back],
        None,
    );
    super::parity::remove_nodes_and_wait(cp);
}

#[test]
fn karpenter_and_kerf_terminate_drifted_static_nodes_first_at_the_node_limit() {
    let run = super::each_in_turn("terminate-first", MANIFESTS, &SETTINGS, replaced, clear);
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);
    let theirs = first_decisions(&run.karpenter_lines);
    let ours = first_decisions(&run.kerf_lines);
    let metrics = &run.kerf_metrics;

    eprintln!(
        "Karpenter: {karpenters:?}, {theirs} terminate-first\nKerf: {kerfs:?}, {ours} terminate-first"
    );
    for (who, r, decisions) in [("Karpenter", karpenters, theirs), ("Kerf", kerfs, ours)] {
        eprintln!(
            "{who}: both replaced {:.0} s after the drift",
            r.after.as_secs_f64()
        );
        // at the limit throughout: the drifted node goes before its successor comes
        assert_eq!(r.most, 2, "{who}: {r:?}");
        // the first at least; the second may find the refill not yet made, room under the
        // limit, and be replaced first (Karpenter does either, as the timing falls)
        assert!(decisions >= 1, "{who} says terminate-first");
    }
    let counted = format!(
        "karpenter_voluntary_disruption_terminate_first_decisions_total{{\
         nodepool=\"fixed\",reason=\"drifted\",terminate_first_reason=\"static-at-limit\"}} {ours}"
    );
    assert!(
        metrics.lines().any(|l| l == counted),
        "{counted} in {metrics}"
    );
}

/// How many `disrupting node(s)` lines a log has whose command says `terminate-first`.
fn first_decisions(lines: &[Value]) -> usize {
    (lines.iter())
        .filter(|l| l["message"] == "disrupting node(s)")
        .filter(|l| {
            l["command"]
                .as_str()
                .is_some_and(|c| c.contains("terminate-first"))
        })
        .count()
}

/// The gates both run with for repair.
const REPAIR_SETTINGS: [(&str, &str); 1] = [(
    "FEATURE_GATES",
    "StaticCapacity=true,NodeRepair=true,TerminateFirstRepair=true",
)];

/// What one autoscaler did with an unhealthy node of the pool at its limit: how long until
/// the pool was two initialized NodeClaims again without it, and the most seen at once.
fn repaired(cp: &ControlPlane, who: &str) -> Replaced {
    let ready = |c: &[(String, bool)]| c.len() == 2 && c.iter().all(|(_, i)| *i);
    wait_for(
        &format!("{who}'s two initialized NodeClaims"),
        Duration::from_secs(120),
        || ready(&claims(cp)).then_some(()),
        || format!("{:?}", claims(cp)),
    );
    let claim = items(cp, "nodeclaims.karpenter.sh").remove(0);
    let unhealthy = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
    let node = claim["status"]["nodeName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    super::repair::make_unhealthy(cp, &node);
    let start = Instant::now();
    let mut most = 0;
    let after = wait_for(
        &format!("{who} to replace the unhealthy NodeClaim {unhealthy}"),
        Duration::from_secs(240),
        || {
            let now = items(cp, "nodeclaims.karpenter.sh");
            most = most.max(now.len());
            let gone = !now
                .iter()
                .any(|c| c["metadata"]["name"] == unhealthy.as_str());
            (gone && ready(&claims(cp))).then(|| start.elapsed())
        },
        || format!("{:?}", claims(cp)),
    );
    Replaced { after, most }
}

#[test]
fn karpenter_and_kerf_terminate_an_unhealthy_static_node_first_at_the_node_limit() {
    let run = super::each_in_turn(
        "terminate-first-repair",
        MANIFESTS,
        &REPAIR_SETTINGS,
        repaired,
        clear,
    );
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);
    let theirs = first_decisions(&run.karpenter_lines);
    let ours = first_decisions(&run.kerf_lines);
    let metrics = &run.kerf_metrics;

    eprintln!(
        "Karpenter: {karpenters:?}, {theirs} terminate-first\nKerf: {kerfs:?}, {ours} terminate-first"
    );
    for (who, r, decisions) in [("Karpenter", karpenters, theirs), ("Kerf", kerfs, ours)] {
        // at the limit throughout: the unhealthy node goes before its successor comes, once
        // the 30-second toleration of kwok's policy has passed
        assert_eq!(r.most, 2, "{who}: {r:?}");
        assert!(r.after >= Duration::from_secs(30), "{who}: {r:?}");
        assert_eq!(decisions, 1, "{who} says terminate-first once");
    }
    let counted = "karpenter_voluntary_disruption_terminate_first_decisions_total{\
         nodepool=\"fixed\",reason=\"unhealthy\",terminate_first_reason=\"static-at-limit\"} 1";
    assert!(
        metrics.lines().any(|l| l == counted),
        "{counted} in {metrics}"
    );
}
