//! A NodePool's readiness follows its node class, under Karpenter v1.15.0's kwok provider and
//! under Kerf: one NodePool on a ready class, one on a class that is not there, one on a class
//! whose `Ready` is False, one on a class being deleted. Each autoscaler in turn writes the
//! four NodePools' conditions; the test compares them, type, status, reason and message. (A
//! module of the handover test binary, so that it runs beside it.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::support::{ControlPlane, wait_for};
use super::{each_in_turn, items};

/// The classes: `going` is held by a finalizer of nobody's, so that its deletion lasts.
const CLASSES: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: broken}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: going, finalizers: [example.com/hold]}
"#;

/// A NodePool on each class, and one on a class that does not exist.
const POOLS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: good}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: orphan}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: missing}
      requirements: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: onbroken}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: broken}
      requirements: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: ongoing}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: going}
      requirements: []
"#;

/// Each NodePool's conditions as `type status reason: message`.
type Conditions = BTreeMap<String, BTreeSet<String>>;

fn conditions(cp: &ControlPlane) -> Conditions {
    items(cp, "nodepools.karpenter.sh")
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let told = (p["status"]["conditions"].as_array().into_iter().flatten())
                .map(|c| {
                    let field = |k: &str| c[k].as_str().unwrap_or("").to_string();
                    let (t, s, r, m) = (
                        field("type"),
                        field("status"),
                        field("reason"),
                        field("message"),
                    );
                    format!("{t} {s} {r}: {m}")
                })
                .collect();
            (name, told)
        })
        .collect()
}

/// The broken class says why, the other is being deleted; then the four NodePools' conditions
/// once each has its `Ready` decided and they hold for a few seconds.
fn readiness(cp: &ControlPlane, who: &str) -> Conditions {
    cp.kubectl_ok(
        &[
            "patch", "kwoknodeclass", "broken", "--subresource", "status", "--type", "merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"SubnetsNotFound","message":"no subnet matches","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
        ],
        None,
    );
    cp.kubectl_ok(
        &[
            "delete",
            "kwoknodeclass",
            "going",
            "--wait=false",
            "--ignore-not-found",
        ],
        None,
    );
    let decided = |c: &Conditions| {
        c.len() == 4
            && c.values().all(|told| {
                told.iter().any(|t| {
                    t.starts_with("NodeClassReady True") || t.starts_with("NodeClassReady False")
                }) && told
                    .iter()
                    .any(|t| t.starts_with("Ready True") || t.starts_with("Ready False"))
            })
    };
    wait_for(
        &format!("{who}'s readiness on the four NodePools"),
        Duration::from_secs(60),
        || {
            let first = conditions(cp);
            if !decided(&first) {
                return None;
            }
            std::thread::sleep(Duration::from_secs(3));
            let again = conditions(cp);
            (again == first).then_some(again)
        },
        || format!("{:#?}", conditions(cp)),
    )
}

/// The NodePools made again, without the first autoscaler's status.
fn clear(cp: &ControlPlane) {
    cp.kubectl_ok(&["delete", "nodepools", "--all"], None);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(POOLS.as_bytes()));
}

#[test]
fn karpenter_and_kerf_tell_a_nodepools_readiness_from_its_node_class_alike() {
    let manifests = format!("{CLASSES}---{POOLS}");
    let run = each_in_turn("pool-readiness", &manifests, &[], readiness, clear);
    for (pool, theirs) in &run.karpenter {
        let ours = run.kerf.get(pool).cloned().unwrap_or_default();
        let only_theirs: Vec<&String> = theirs.difference(&ours).collect();
        let only_ours: Vec<&String> = ours.difference(theirs).collect();
        assert!(
            only_theirs.is_empty() && only_ours.is_empty(),
            "NodePool {pool}: Karpenter only {only_theirs:#?}, Kerf only {only_ours:#?}"
        );
    }
    assert_eq!(run.karpenter.len(), run.kerf.len(), "the same NodePools");
}
