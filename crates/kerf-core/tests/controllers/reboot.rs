//! Node repair's reboots (Karpenter's `RebootNode` action, kwok's `KWOKRebootRequired`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::repair::NodeCondition;

use crate::support::*;

/// One node, pod `default/x` bound to it, with kwok's repair policies and node repair on (its
/// NodePool consolidates after an hour: an emptied node stays).
fn rebootable() -> (Controllers, String) {
    let settings = Settings {
        node_repair: true,
        repair_policies: &kerf_core::repair::KWOK_POLICIES,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    let mut np = pool();
    np.spec.disruption.consolidate_after = serde_json::from_value(serde_json::json!("1h")).unwrap();
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    let mut x = unschedulable("x", "1");
    x.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(x, secs(5));
    (core, claim)
}

/// The node's `KWOKRebootRequired` True since `since`, and its boot id.
fn fault(core: &mut Controllers, node: &str, since: u64, boot: &str, at: u64) {
    let mut record = core.cluster().nodes()[node].clone();
    record.conditions = vec![NodeCondition {
        kind: "KWOKRebootRequired".into(),
        status: "True".into(),
        reason: "Injected".into(),
        since: secs(since),
    }];
    record.boot_id = boot.into();
    core.apply_node(node.to_string(), record, secs(at));
}

/// The `Rebooting` condition each status write of `claim` carried: (status, reason, message).
fn rebooting(actions: &[Action], claim: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for a in actions {
        let Action::PatchNodeClaimStatus {
            nodeclaim, status, ..
        } = a
        else {
            continue;
        };
        let Some(c) = (nodeclaim == claim)
            .then(|| status.conditions.iter().find(|c| c.type_ == "Rebooting"))
            .flatten()
        else {
            continue;
        };
        let seen = (c.status.clone(), c.reason.clone(), c.message.clone());
        if out.last() != Some(&seen) {
            out.push(seen);
        }
    }
    out
}

fn annotations(actions: &[Action]) -> Vec<(String, Option<String>)> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::AnnotateNodeClaim { annotations, .. } => Some(annotations.clone()),
            _ => None,
        })
        .flat_map(BTreeMap::into_iter)
        .collect()
}

/// The reboot asked of the cloud, if any: its operation id.
fn asked(actions: &[Action]) -> Option<String> {
    actions.iter().find_map(|a| match a {
        Action::Reboot { operation_id, .. } => Some(operation_id.clone()),
        _ => None,
    })
}

#[test]
fn a_node_kwok_asks_to_reboot_is_drained_rebooted_and_back_twice_then_replaced() {
    let (mut core, claim) = rebootable();
    fault(&mut core, &claim, 10, "boot-0", 10);
    let before = run_until(&mut core, 5, 39);
    assert!(
        asked(&before).is_none() && repaired(&before).is_empty(),
        "tolerated 30 s"
    );
    let committed = run_until(&mut core, 40, 44);
    // committed as Karpenter commits it: the drain bound, then `Rebooting`; the node
    // tainted, never replaced
    assert_eq!(
        annotations(&committed),
        vec![(
            "karpenter.sh/reboot-termination-grace-period".into(),
            Some("1m0s".into())
        )]
    );
    let requested = (
        "True".into(),
        "RebootRequested".into(),
        "rebooting for KWOKRebootRequired/Injected".into(),
    );
    assert_eq!(rebooting(&committed, &claim), vec![requested]);
    assert!(committed.iter().any(
        |a| matches!(a, Action::Taint { taint, .. } if taint.key == "karpenter.sh/rebooting")
    ));
    assert!(repaired(&committed).is_empty(), "no replacement");
    assert_eq!(logged(&committed, "committed node reboot"), 1);
    // the pod is evicted (never deleted); once it is gone and 5 s have passed, the boot id
    // is recorded and the cloud asked
    assert_eq!(evicted(&committed), vec!["default/x".to_string()]);
    core.delete_pod("default/x", secs(45));
    let issued = run_until(&mut core, 45, 50);
    assert_eq!(
        annotations(&issued),
        vec![(
            "karpenter.sh/reboot-pre-boot-id".into(),
            Some("boot-0".into())
        )]
    );
    let operation = asked(&issued).expect("the cloud is asked to reboot");
    assert!(
        operation.starts_with(&claim) && operation.ends_with("-boot-0"),
        "{operation}"
    );
    core.reboot_answered(&claim, Ok(()), secs(51));
    let answered = run_until(&mut core, 51, 52);
    assert_eq!(rebooting(&answered, &claim)[0].1, "RebootIssued");
    assert!(answered.iter().any(
        |a| matches!(a, Action::RelabelNode { labels, .. } if labels.get("karpenter.sh/initialized") == Some(&None))
    ));
    assert!(!core.cluster().nodeclaims()[&claim].initialized);
    // a new boot, Ready: the taint goes, and the reboot has succeeded
    fault(&mut core, &claim, 10, "boot-1", 53);
    let back = run_until(&mut core, 53, 55);
    assert!(
        back.iter().any(
            |a| matches!(a, Action::RemoveTaint { key, .. } if key == "karpenter.sh/rebooting")
        )
    );
    assert_eq!(events(&back, "RebootObserved").len(), 1);
    assert_eq!(
        rebooting(&back, &claim)
            .last()
            .map(|c| (c.0.as_str(), c.1.as_str(), c.2.as_str())),
        Some((
            "False",
            "RebootSucceeded",
            "node rebooted and rejoined the cluster"
        ))
    );
    assert!(
        core.cluster().nodeclaims()[&claim].initialized,
        "initialized again"
    );
    // the fault was not cleared: tolerated 30 s from the reboot's end, then a second reboot
    let quiet = run_until(&mut core, 56, 83);
    assert!(asked(&quiet).is_none(), "{:?}", rebooting(&quiet, &claim));
    let second = run_until(&mut core, 84, 110);
    assert!(asked(&second).is_some(), "a second reboot");
    core.reboot_answered(&claim, Ok(()), secs(111));
    fault(&mut core, &claim, 10, "boot-2", 112);
    run_until(&mut core, 111, 115);
    // two reboots in a day did not cure it: the third decision replaces the node
    let third = run_until(&mut core, 116, 200);
    assert!(asked(&third).is_none());
    assert_eq!(repaired(&third), vec![claim.clone()]);
}

#[test]
fn a_reboot_the_cloud_rejects_gives_the_node_up() {
    let (mut core, claim) = rebootable();
    core.delete_pod("default/x", secs(5));
    fault(&mut core, &claim, 0, "boot-0", 6);
    let asked_at = run_until(&mut core, 6, 45);
    assert!(asked(&asked_at).is_some());
    core.reboot_answered(&claim, Err(RebootRefusal::NotImplemented), secs(46));
    let failed = run_until(&mut core, 46, 47);
    assert_eq!(
        events(&failed, "RebootFailed"),
        vec![format!(
            "{claim}: reboot not implemented by the cloud provider"
        )]
    );
    assert!(deleted(&failed, &claim), "the NodeClaim is deleted");
}

#[test]
fn a_drain_bound_that_does_not_read_fails_the_reboot_and_keeps_the_node() {
    let (mut core, claim) = rebootable();
    fault(&mut core, &claim, 10, "boot-0", 10);
    let committed = run_until(&mut core, 10, 44);
    assert_eq!(logged(&committed, "committed node reboot"), 1);
    // the bound written by hand while the reboot waits for its drain, as Karpenter's
    // annotation may be edited
    let object: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": claim, "annotations": {
            "karpenter.sh/reboot-termination-grace-period": "soon"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
            "name": "default"}, "requirements": []},
    }))
    .unwrap();
    core.observe(
        kerf_core::observe::Observation::Applied(kerf_core::observe::Object::nodeclaim(object)),
        secs(45),
    );
    let failed = run_until(&mut core, 45, 47);
    let message = r#"invalid reboot request: parsing reboot termination grace period "soon": time: invalid duration "soon""#;
    assert_eq!(
        events(&failed, "RebootFailed"),
        vec![format!("{claim}: {message}")]
    );
    assert_eq!(
        rebooting(&failed, &claim).last().cloned(),
        Some(("False".into(), "RebootFailed".into(), message.into()))
    );
    assert!(
        failed.iter().any(
            |a| matches!(a, Action::RemoveTaint { key, .. } if key == "karpenter.sh/rebooting")
        )
    );
    assert!(
        !deleted(&failed, &claim),
        "an invalid request keeps the node"
    );
    assert!(asked(&failed).is_none());
}
