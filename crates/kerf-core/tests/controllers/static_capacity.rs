//! Static NodePools: replicas, scaling down, static drift and failed launches.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_core::controllers::{Action, Controllers, Settings};

use super::support::*;

#[test]
fn a_static_nodepool_gets_its_replicas_without_pods_up_to_its_node_limit() {
    let mut core = with_static_pool(3, Some("2"));
    let actions = run_until(&mut core, 0, 5);
    let made = created(&actions);
    assert_eq!(made.len(), 2, "limits.nodes caps the replicas: {made:?}");
    assert_eq!(
        logged(&actions, "provisioning nodeclaims to satisfy replica count"),
        1
    );
    // the third is refused by the limit, and said once
    assert_eq!(logged(&actions, "nodepool node limit reached"), 1);
    let c = &core.cluster().nodeclaims()[&made[0]];
    assert_eq!(c.instance_types, ["m5.large"]);
    // without the gate a static NodePool is inert
    let mut inert = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.replicas = Some(3);
    inert.apply_node_pool(np);
    inert.set_instance_types("default", Arc::from(vec![instance_type()]));
    assert!(created(&run_until(&mut inert, 0, 5)).is_empty());
}

/// A static NodePool's NodeClaim whose deletion is only asked for (an expiry's delete
/// refused by the API server) still counts toward its replicas: Karpenter makes the
/// replacement once the deletion is stored (swarm seed 439550).
#[test]
fn a_static_nodeclaim_counts_until_the_api_server_holds_its_deletion() {
    let mut core = with_static_pool(2, None);
    let first = run_until(&mut core, 0, 5);
    let claims = created(&first);
    assert_eq!(claims.len(), 2, "{first:?}");
    let stored = (first.into_iter())
        .find_map(|a| match a {
            Action::CreateNodeClaim(o) if o.metadata.name.as_ref() == Some(&claims[0]) => Some(*o),
            _ => None,
        })
        .expect("the first NodeClaim's object");
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    core.delete_nodeclaim(&claims[0], secs(5));
    let asked = run_until(&mut core, 6, 60);
    let going = core.cluster().nodeclaims().get(&claims[0]);
    assert!(going.is_some_and(|c| c.deleting.is_some()), "{asked:?}");
    assert!(created(&asked).is_empty(), "{asked:?}");
    store_deletion(&mut core, stored, 61);
    let after = run_until(&mut core, 61, 90);
    assert_eq!(created(&after).len(), 1, "{after:?}");
}

#[test]
fn a_static_nodepool_takes_no_pending_pod_and_is_never_consolidated() {
    let mut core = with_static_pool(1, None);
    let claim = created(&run_until(&mut core, 0, 1))[0].clone();
    launch_and_register(&mut core, &claim);
    // its one node stays empty for five minutes and is not touched
    let idle = run_until(&mut core, 5, 300);
    assert_eq!(logged(&idle, "disrupting node(s)"), 0);
    assert_eq!(logged(&idle, "marking consolidatable"), 0);
    assert!(core.cluster().nodeclaims()[&claim].deleting.is_none());
    // a pod fills most of it, and another waits: it needs a new node, which a static
    // NodePool is not the scheduler's to launch
    let mut filler = unschedulable("filler", "1500m");
    filler.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(filler, secs(301));
    core.apply_pod(unschedulable("waiting", "1"), secs(301));
    let later = run_until(&mut core, 301, 400);
    assert!(created(&later).is_empty(), "{:?}", created(&later));
}

#[test]
fn scaling_a_static_nodepool_down_removes_unlaunched_then_empty_then_cheapest_nodes() {
    let mut core = with_static_pool(4, None);
    let made = created(&run_until(&mut core, 0, 1));
    assert_eq!(made.len(), 4);
    // three launched and registered; one of them runs a pod, one a pod that may not be
    // disrupted; the fourth never launched
    for c in &made[..3] {
        launch_and_register(&mut core, c);
    }
    let pod = |name: &str, node: &str, do_not_disrupt: bool| -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1",
                "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        if do_not_disrupt {
            p.metadata.annotations = Some(BTreeMap::from([(
                "karpenter.sh/do-not-disrupt".to_string(),
                "true".to_string(),
            )]));
        }
        p
    };
    core.apply_pod(pod("busy", &made[0], false), secs(5));
    core.apply_pod(pod("kept", &made[1], true), secs(5));
    let _ = core.poll(secs(6));
    let mut np = core.cluster().node_pools()["default"].clone();
    let mut deleted = |core: &mut Controllers, replicas: i64, at: u64| -> Vec<String> {
        np.spec.replicas = Some(replicas);
        core.apply_node_pool(np.clone());
        core.poll(secs(at))
            .iter()
            .filter_map(|a| match a {
                Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim.clone()),
                _ => None,
            })
            .collect()
    };
    // 4 → 2: the NodeClaim never launched, then the empty node
    assert_eq!(
        deleted(&mut core, 2, 10),
        [made[3].clone(), made[2].clone()]
    );
    // 2 → 1: the node whose pod may be disrupted, before the do-not-disrupt one
    assert_eq!(deleted(&mut core, 1, 20), [made[0].clone()]);
    // nothing is made again for the ones going
    assert!(created(&run_until(&mut core, 21, 30)).is_empty());
}

#[test]
fn a_drifted_static_node_is_replaced_first_within_the_drift_budget() {
    let mut core = with_static_pool(2, None);
    let made = created(&run_until(&mut core, 0, 1));
    for c in &made {
        launch_and_register(&mut core, c);
    }
    run_until(&mut core, 5, 10);
    // the template changes: both nodes drift
    let mut np = core.cluster().node_pools()["default"].clone();
    np.spec
        .template
        .metadata
        .labels
        .insert("team".into(), "edge".into());
    core.apply_node_pool(np);
    let acted = run_until(&mut core, 11, 30);
    assert!(
        made.iter()
            .all(|c| core.cluster().nodeclaims()[c].drifted.is_some())
    );
    // Karpenter's default budget (10 % of 2 nodes, rounded up): one replacement at a time,
    // made before anything goes
    let replacements = created(&acted);
    assert_eq!(replacements.len(), 1, "{replacements:?}");
    assert!(
        !acted
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
    assert_eq!(logged(&acted, "disrupting node(s)"), 1);
    // its node stays marked while it waits (the disruption passes meanwhile do not take the
    // taint for one no command holds: swarm seed 80363)
    let marked = |a: &Action| matches!(a, Action::Taint { node, .. } if made.contains(node));
    assert_eq!(acted.iter().filter(|a| marked(a)).count(), 1, "{acted:?}");
    assert!(
        !(acted.iter()).any(|a| matches!(a, Action::RemoveTaint { .. })),
        "{acted:?}"
    );
    // the command waits on its replacement, and says so on it
    assert_eq!(
        events(&acted, "DisruptionWaitingReadiness"),
        [format!(
            "{}: Waiting on readiness to continue disruption",
            replacements[0]
        )]
    );
    // once the replacement is up, one drifted node goes, and no third node is made
    launch_and_register(&mut core, &replacements[0]);
    let after = run_until(&mut core, 31, 40);
    let deleted: Vec<&String> = after
        .iter()
        .filter_map(|a| match a {
            Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim),
            _ => None,
        })
        .collect();
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(made.contains(deleted[0]));
    assert!(created(&after).is_empty(), "{:?}", created(&after));
}

/// A static NodePool at its node limit cannot stage a replacement: with
/// `TerminateFirstDrift` a drifted node is deleted first (one at a time under the default
/// budget) and the pool refilled once it is gone; without the gate it is told blocked.
#[test]
fn a_drifted_static_node_at_the_node_limit_is_terminated_first_with_the_gate() {
    for gate in [true, false] {
        let mut core = with_static_pool(2, Some("2"));
        if gate {
            let settings = Settings {
                static_capacity: true,
                terminate_first_drift: true,
                ..Settings::default()
            };
            core = Controllers::new(settings, 7);
            let mut np = pool();
            np.spec.replicas = Some(2);
            np.spec.limits.insert("nodes".into(), "2".parse().unwrap());
            core.apply_node_pool(np);
            core.set_instance_types("default", Arc::from(vec![instance_type()]));
        }
        let made = created(&run_until(&mut core, 0, 1));
        for c in &made {
            launch_and_register(&mut core, c);
        }
        run_until(&mut core, 5, 10);
        let mut np = core.cluster().node_pools()["default"].clone();
        (np.spec.template.metadata.labels).insert("team".into(), "edge".into());
        core.apply_node_pool(np);
        let acted = run_until(&mut core, 11, 30);
        let deleted: Vec<&String> = (acted.iter())
            .filter_map(|a| match a {
                Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim),
                _ => None,
            })
            .collect();
        // no third node while both count against the limit
        assert!(
            created(&acted).is_empty(),
            "gate {gate}: {:?}",
            created(&acted)
        );
        if !gate {
            assert!(deleted.is_empty(), "{deleted:?}");
            let blocked = events(&acted, "DisruptionBlocked");
            let said = "static NodePool is at its node limit and cannot stage a replacement";
            assert!(blocked.iter().any(|e| e.ends_with(said)), "{blocked:?}");
            continue;
        }
        assert_eq!(deleted.len(), 1, "{deleted:?}");
        assert!(made.contains(deleted[0]));
        let first = (acted.iter()).any(|a| {
            matches!(a, Action::Log(r) if r.message == "disrupting node(s)"
                && r.fields["decision"] == "terminate-first")
        });
        assert!(first, "{acted:?}");
        // once the API server holds it gone, the pool is refilled
        let gone = deleted[0].clone();
        core.nodeclaim_gone(&gone);
        let refill = run_until(&mut core, 31, 40);
        assert_eq!(created(&refill).len(), 1, "{:?}", created(&refill));
    }
}

#[test]
fn a_static_nodeclaim_whose_launch_failed_is_made_again_once_capacity_may_be_back() {
    let mut core = with_static_pool(1, None);
    let first = created(&run_until(&mut core, 0, 1));
    assert_eq!(first.len(), 1);
    // no capacity for the one instance type, in either capacity type
    let refused: Vec<kerf_core::controllers::lifecycle::InsufficientOffering> =
        ["on-demand", "spot"]
            .into_iter()
            .map(
                |ct| kerf_core::controllers::lifecycle::InsufficientOffering {
                    capacity_type: ct.into(),
                    instance_type: "m5.large".into(),
                    zone: "us-east-1a".into(),
                },
            )
            .collect();
    core.launch_failed(&first[0], &refused, secs(2));
    // the shell carries out the release
    core.nodeclaim_gone(&first[0]);
    let meanwhile = run_until(&mut core, 2, 60);
    assert!(created(&meanwhile).is_empty(), "{:?}", created(&meanwhile));
    assert_eq!(
        logged(
            &meanwhile,
            "could not provision nodeclaims to satisfy replica count"
        ),
        1,
        "said once"
    );
    // the unavailable-offerings memory (3 minutes) runs out: the NodePool is whole again
    let again = created(&run_until(&mut core, 61, 240));
    assert_eq!(again.len(), 1, "{again:?}");
}
