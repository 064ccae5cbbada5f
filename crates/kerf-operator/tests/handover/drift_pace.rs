//! A drift roll's pace beside Karpenter v1.15.0's kwok provider: four pods that will not
//! share a node, on four nodes of a NodePool whose budget lets two go at once; its template
//! label changes and every node drifts. Karpenter's disruption loop decides a drift command,
//! hands it to its orchestration queue and looks again at once, without waiting for the
//! command to finish or validating it first (only emptiness and consolidation are), so two
//! nodes roll at a time when its passes come quickly; on a loaded machine its next pass waits
//! for its cluster state to settle and may find the first command done (CI once saw one at a
//! time, 47 s). Each autoscaler in turn: neither may hold more than two under way, Kerf must
//! hold two at once, and roll the four no slower than Karpenter.
//! (A module of the handover test binary, so that it runs beside it.)

use std::time::{Duration, Instant};

use serde_json::Value;

use super::items;
use super::support::{self, ControlPlane, wait_for};

/// Four pods, one a node, under a NodePool with a budget of two nodes.
const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: roll}
spec:
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
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets: [{nodes: "2"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread}
spec:
  replicas: 4
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {app: spread}}
              topologyKey: kubernetes.io/hostname
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.9
          resources: {requests: {cpu: "1"}}
"#;

/// The NodeClaims of the first template that are going: their Node carries Karpenter's
/// disrupted taint, or they are being deleted.
fn going(cp: &ControlPlane) -> (usize, usize) {
    let tainted: Vec<String> = (items(cp, "nodes").iter())
        .filter(|n| {
            (n["spec"]["taints"].as_array().into_iter().flatten())
                .any(|t| t["key"] == "karpenter.sh/disrupted")
        })
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let old: Vec<Value> = (items(cp, "nodeclaims.karpenter.sh").into_iter())
        .filter(|c| c["metadata"]["labels"]["generation"] == "one")
        .collect();
    let under_way = (old.iter())
        .filter(|c| {
            !c["metadata"]["deletionTimestamp"].is_null()
                || (c["status"]["nodeName"].as_str())
                    .is_some_and(|n| tainted.iter().any(|t| t == n))
        })
        .count();
    (under_way, old.len())
}

/// How one autoscaler rolled the pool: the most drifted nodes under way at once (polled, and
/// as a watch saw their deletions), and how long until none of the first template was left.
#[derive(Debug)]
struct Rolled {
    most_at_once: usize,
    /// Of those, the most being deleted at once, as the watch saw them.
    deleting_at_once: usize,
    after: Duration,
}

fn roll(cp: &ControlPlane, who: &str) -> Rolled {
    wait_for(
        &format!("{who}'s four nodes with a pod each"),
        Duration::from_secs(180),
        || {
            let claims = items(cp, "nodeclaims.karpenter.sh");
            let ready = (claims.iter()).filter(|c| support::condition_true(c, "Initialized"));
            let running = (items(cp, "pods").iter())
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            (ready.count() == 4 && running == 4).then_some(())
        },
        || format!("{} NodeClaims", items(cp, "nodeclaims.karpenter.sh").len()),
    );
    let drift = r#"{"spec": {"template": {"metadata": {"labels": {"generation": "two"}}}}}"#;
    cp.kubectl_ok(
        &["patch", "nodepool", "roll", "--type=merge", "-p", drift],
        None,
    );
    let watch = super::lifecycle::Watch::start(cp, who);
    let start = Instant::now();
    let mut most_at_once = 0;
    let after = wait_for(
        &format!("{who} to roll every drifted node"),
        Duration::from_secs(300),
        || {
            let (under_way, left) = going(cp);
            most_at_once = most_at_once.max(under_way);
            (left == 0).then(|| start.elapsed())
        },
        || format!("{:?}", going(cp)),
    );
    // a roll of a few seconds can fall between two looks on a loaded machine: the watch saw
    // every NodeClaim's deletion begin and end, in order
    let deleting = deleting_at_once(&watch.events());
    Rolled {
        most_at_once: most_at_once.max(deleting),
        deleting_at_once: deleting,
        after,
    }
}

/// The most NodeClaims of the first template being deleted at once, from a watch's events in
/// order: each from the first version with a deletion timestamp until it is DELETED.
fn deleting_at_once(events: &[Value]) -> usize {
    let mut deleting = std::collections::BTreeSet::new();
    let mut most = 0;
    for event in events {
        let object = &event["object"];
        if object["metadata"]["labels"]["generation"] != "one" {
            continue;
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if event["type"] == "DELETED" {
            deleting.remove(&name);
        } else if !object["metadata"]["deletionTimestamp"].is_null() {
            deleting.insert(name);
        }
        most = most.max(deleting.len());
    }
    most
}

/// Puts the template back and takes away what an autoscaler made.
fn clear(cp: &ControlPlane) {
    let back = r#"{"spec": {"template": {"metadata": {"labels": {"generation": "one"}}}}}"#;
    cp.kubectl_ok(
        &["patch", "nodepool", "roll", "--type=merge", "-p", back],
        None,
    );
    super::parity::remove_nodes_and_wait(cp);
}

#[test]
fn kerf_rolls_drifted_nodes_as_many_at_once_as_the_budget_allows_beside_karpenter() {
    let run = super::each_in_turn("drift-pace", MANIFESTS, &[], roll, clear);
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);

    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}");
    for (who, r) in [("Karpenter", karpenters), ("Kerf", kerfs)] {
        assert!(
            (1..=2).contains(&r.most_at_once) && r.deleting_at_once <= 2,
            "{who}: never more than the budget's two under way: {r:?}"
        );
    }
    assert_eq!(
        kerfs.most_at_once, 2,
        "Kerf: as many at once as the budget allows"
    );
    // the same pace: at most a disruption pass (10 s) a wave later, and a few seconds of
    // kwok's and the API server's
    assert!(
        kerfs.after <= karpenters.after + Duration::from_secs(25),
        "Kerf rolled in {:?}, Karpenter in {:?}",
        kerfs.after,
        karpenters.after
    );
}
