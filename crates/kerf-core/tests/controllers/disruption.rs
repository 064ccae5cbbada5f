//! Disruption: consolidation, drift, repair and what candidates are told.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kerf_core::cluster::DriftReason;
use kerf_core::controllers::{Action, Controllers, EventObject, Settings};
use kerf_core::observe::Observation;
use kerf_core::repair::NodeCondition;

use super::support::*;

#[test]
fn consolidation_moves_pods_to_a_node_kerf_does_not_manage() {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    // nothing else can take x: the node stays
    let idle = run_until(&mut core, 5, 120);
    assert!(
        !idle
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
    // a managed node group's node with room joins: x can move there, and its node goes
    unmanaged_node(&mut core, "us-east-1a");
    let after = run_until(&mut core, 121, 240);
    assert!(
        after
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "{after:#?}"
    );
    // the command's log line counts the pod that moves
    let command = (after.iter())
        .find_map(|a| match a {
            Action::Log(r) if r.message == "disrupting node(s)" => Some(&r.fields),
            _ => None,
        })
        .expect("the command is logged");
    assert_eq!(command["pod-count"], 1, "{command}");
}

/// A deletion the solver packs tightly, which kube-scheduler would not follow: the
/// candidate's small pod (the older, so made again first) and large pod fit the two other
/// nodes' room exactly (large onto the roomier, small onto the other), but kube-scheduler
/// puts the small one on the roomier node (it scores least allocated best), and the large one
/// then fits nowhere and would wait for a new node. The move is dropped; once the room is
/// there for any order, it is made.
#[test]
fn no_consolidation_move_leaves_a_pod_that_kube_scheduler_would_place_nowhere() {
    let mut core = with_pool();
    let bound = |name: &str, cpu: &str, node: &str| {
        let mut p = unschedulable(name, cpu);
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    };
    for (node, fillers) in [("mng-e", ["e-a", "e-b"]), ("mng-f", ["f-a", "f-b"])] {
        unmanaged_node_named(&mut core, node, "us-east-1a");
        core.apply_pod(bound(fillers[0], "1500m", node), secs(0));
        core.apply_pod(bound(fillers[1], "500m", node), secs(0));
    }
    let (mut small, mut large) = (replica("small", "500m"), replica("large", "1500m"));
    core.apply_pod(small.clone(), secs(0));
    core.apply_pod(large.clone(), secs(1));
    let claim = created(&run_until(&mut core, 0, 3))[0].clone();
    launch_and_register(&mut core, &claim);
    for p in [&mut small, &mut large] {
        p.spec.as_mut().unwrap().node_name = Some(claim.clone());
        core.apply_pod(p.clone(), secs(5));
    }
    // mng-e keeps 500m (1.5 cpu free), mng-f 1500m (0.5 free)
    core.delete_pod("default/e-a", secs(6));
    core.delete_pod("default/f-b", secs(6));
    let deleted = |actions: &[Action]| {
        (actions.iter())
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim))
    };
    let held = run_until(&mut core, 6, 120);
    assert!(!deleted(&held), "{held:#?}");
    assert!(
        (held.iter()).any(|a| matches!(a, Action::Log(l) if l.message
            == "kube-scheduler would leave pod(s) without a node, consolidation move dropped")),
        "{held:#?}"
    );
    // mng-f's other pod goes too: both nodes can take either pod first
    core.delete_pod("default/f-a", secs(121));
    assert!(deleted(&run_until(&mut core, 121, 240)));
}

/// During a burst kube-scheduler binds pods long after Kerf planned them: the room a pod
/// nominated to a new node will take is not given to pods consolidation moves, and while
/// pods wait for capacity the provisioner has not solved for yet, no consolidation move is
/// made (Karpenter's consolidation simulates the pending pods beside the candidates'). Once
/// they are gone, consolidation goes on.
#[test]
fn consolidation_leaves_the_room_of_pods_still_pending_to_them() {
    let (mut core, a, b) = x_on_a_and_w_planned_on_b();
    // b is launched for w, and kube-scheduler has not bound w there yet
    assert_ne!(a, b);
    launch_at(&mut core, &b, 10);
    // b looks empty, and x would fit there: but that room is w's. A command may be weighed
    // while w's nomination lapses and it waits to be solved for again, but none is carried
    // out: no node is tainted or deleted
    for t in 11..=90 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(act, Action::Taint { .. } | Action::DeleteNodeClaim { .. }),
                "at {t} s a node was disrupted while a pod it was kept for waited: {act:?}"
            );
        }
    }
    // w goes: x moves onto b (or b, empty, goes) and one node is left
    core.delete_pod("default/w", secs(91));
    let after = run_until(&mut core, 91, 200);
    assert!(
        after
            .iter()
            .any(|act| matches!(act, Action::DeleteNodeClaim { .. })),
        "consolidation stayed blocked once no pod was pending: {after:#?}"
    );
}

/// A node still coming up takes no pod a consolidation move would send it: here x's node
/// stays although x would fit on the other, registered but not yet Ready.
#[test]
fn consolidation_moves_no_pod_onto_a_node_not_yet_initialized() {
    let (mut core, a, b) = x_on_a_and_w_planned_on_b();
    // w goes before b is Ready: b registers, empty, and stays not Ready
    core.delete_pod("default/w", secs(9));
    launch_at(&mut core, &b, 10);
    let mut not_ready = core.cluster().nodes()[&b].clone();
    not_ready.ready = false;
    core.apply_node(b.clone(), not_ready, secs(12));
    for t in 12..=120 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(&act, Action::Taint { node, .. } if *node == a),
                "at {t} s x's node was disrupted to move x onto a node still coming up"
            );
        }
    }
    assert!(!core.cluster().nodeclaims()[&b].initialized);
}

/// Pods that come while the provisioner's batch window is open have not been solved for
/// yet: no consolidation move is weighed until they are, since they may need the room it
/// would count on (here: moving y2 beside x2 would leave z, coming meanwhile, no node).
#[test]
fn no_consolidation_move_is_weighed_while_pods_wait_to_be_solved_for() {
    let mut core = two_half_empty_nodes();
    // z comes, as big as the room either node has left; the batch keeps it 30 s
    core.apply_pod(replica("z", "1500m"), secs(36));
    for t in 36..=120 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(
                    act,
                    Action::Taint { .. }
                        | Action::DeleteNodeClaim { .. }
                        | Action::CreateNodeClaim(_)
                ),
                "at {t} s: {act:?}"
            );
        }
        if t < 66 {
            assert!(
                !core.command_in_flight(),
                "at {t} s a move was weighed while z waited"
            );
        }
    }
    // z was placed on the room of one of them
    assert!(core.cluster().pods()["default/z"].nominated.is_some());
}

/// A pod no NodePool can host holds consolidation off only until the provisioner has found
/// that out: then the two half-empty nodes are consolidated into one, although the solve
/// that found it wrote nothing.
#[test]
fn consolidation_goes_on_once_waiting_pods_are_found_unplaceable() {
    let mut core = two_half_empty_nodes();
    core.apply_pod(replica("huge", "100"), secs(36));
    let actions = run_until(&mut core, 36, 160);
    assert!(
        (actions.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "the unplaceable pod kept consolidation off: {actions:#?}"
    );
    assert!(core.cluster().pods()["default/huge"].nominated.is_none());
}

/// While a NodeClaim waits for its launch the cluster state is not synced, and no
/// disruption decision is made (as Karpenter's disruption waits for its cluster state):
/// here z needs a node of its own, and the two half-empty nodes are consolidated only once
/// z's NodeClaim has launched. The synced gauge says 0 meanwhile.
#[test]
fn no_disruption_decision_while_a_nodeclaim_waits_for_its_launch() {
    let mut core = two_half_empty_nodes();
    core.apply_pod(replica("z", "1800m"), secs(36));
    let actions = run_until(&mut core, 36, 70);
    let claims = created(&actions);
    assert_eq!(
        claims.len(),
        1,
        "z gets a NodeClaim of its own: {actions:#?}"
    );
    for t in 71..=200 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(act, Action::Taint { .. } | Action::DeleteNodeClaim { .. }),
                "at {t} s, z's NodeClaim not launched yet: {act:?}"
            );
        }
        assert!(!core.command_in_flight(), "at {t} s a move was weighed");
    }
    let metrics = core.render_metrics(secs(200), &[]);
    assert_eq!(gauge(&metrics, "karpenter_cluster_state_synced"), Some(0.0));
    launch_at(&mut core, &claims[0], 201);
    let actions = run_until(&mut core, 201, 320);
    assert!(
        (actions.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "once z's NodeClaim launched, the half-empty nodes were not consolidated: {actions:#?}"
    );
    let metrics = core.render_metrics(secs(320), &[]);
    assert_eq!(gauge(&metrics, "karpenter_cluster_state_synced"), Some(1.0));
}

/// An empty node is kept while a pod kube-scheduler has yet to place could go there, as
/// Karpenter's provisioner nominates the nodes it simulates pending pods onto: here z waits
/// for the node planned for it, still not Ready, and the empty node it fits on stays until z
/// is bound.
#[test]
fn an_empty_node_stays_while_a_waiting_pod_could_go_there() {
    let mut core = with_pool();
    let mut a0 = replica("a0", "1500m");
    core.apply_pod(a0.clone(), secs(0));
    let a = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_at(&mut core, &a, 3);
    a0.spec.as_mut().unwrap().node_name = Some(a.clone());
    core.apply_pod(a0, secs(5));
    let mut z = replica("z", "1500m");
    core.apply_pod(z.clone(), secs(6));
    let c = created(&run_until(&mut core, 6, 9))[0].clone();
    launch_at(&mut core, &c, 10);
    let mut not_ready = core.cluster().nodes()[&c].clone();
    not_ready.ready = false;
    core.apply_node(c.clone(), not_ready, secs(11));
    core.delete_pod("default/a0", secs(12));
    for t in 12..=300 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(&act, Action::Taint { node, .. } if *node == a),
                "at {t} s the empty node was disrupted while z, which fits on it, waited"
            );
        }
    }
    assert_eq!(
        core.cluster().pods()["default/z"].nominated.as_ref(),
        Some(&c)
    );
    let mut ready = core.cluster().nodes()[&c].clone();
    ready.ready = true;
    core.apply_node(c.clone(), ready, secs(301));
    z.spec.as_mut().unwrap().node_name = Some(c.clone());
    core.apply_pod(z, secs(302));
    let actions = run_until(&mut core, 302, 500);
    assert!(
        (actions.iter()).any(|act| matches!(act, Action::Taint { node, .. } if *node == a)),
        "once z was bound the empty node stayed: {actions:#?}"
    );
}

#[test]
fn a_candidate_kept_by_do_not_disrupt_gets_disruption_blocked_events_on_node_and_nodeclaim() {
    let mut core = with_pool();
    let mut x = unschedulable("x", "1");
    x.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_string(),
        "true".to_string(),
    )]));
    core.apply_pod(x.clone(), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    x.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(x, secs(5));
    let actions = run_until(&mut core, 5, 300);
    let message = "Pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=default/x)";
    // on the Node (named as the claim here) and on the NodeClaim, once per two minutes each
    let blocked = events(&actions, "DisruptionBlocked");
    assert!(blocked.len() >= 2 && blocked.len() <= 6, "{blocked:?}");
    assert!(blocked.iter().all(|e| *e == format!("{claim}: {message}")));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
}

#[test]
fn node_repair_waits_out_the_toleration_and_stops_when_a_fifth_of_the_pool_is_unhealthy() {
    let settings = Settings {
        node_repair: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    for i in 0..5 {
        core.apply_pod(unschedulable(&format!("p{i}"), "1500m"), secs(0));
    }
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 5, "one node a pod");
    for c in &claims {
        launch_and_register(&mut core, c);
    }
    let not_ready = |core: &mut Controllers, node: &str, since: u64| {
        let mut record = core.cluster().nodes()[node].clone();
        record.ready = false;
        record.ready_changed = secs(since);
        record.conditions = vec![NodeCondition {
            kind: "Ready".into(),
            status: "False".into(),
            reason: "KubeletNotReady".into(),
            since: secs(since),
        }];
        core.apply_node(node.to_string(), record, secs(since));
    };
    // two of five nodes unhealthy: more than 20 % (one node, rounded up)
    not_ready(&mut core, &claims[0], 10);
    not_ready(&mut core, &claims[1], 10);
    let before = run_until(&mut core, 5, 10 + 30 * 60 - 1);
    assert!(repaired(&before).is_empty(), "within the toleration");
    let blocked = run_until(&mut core, 10 + 30 * 60, 10 + 31 * 60);
    assert!(repaired(&blocked).is_empty());
    // on each unhealthy Node and NodeClaim, and on the NodePool
    let told: std::collections::BTreeSet<String> =
        events(&blocked, "NodeRepairBlocked").into_iter().collect();
    let message = "more than 20% of nodes in nodepool \"default\" are unhealthy";
    assert_eq!(
        told,
        [&claims[0], &claims[1], &"default".to_string()]
            .iter()
            .map(|n| format!("{n}: {message}"))
            .collect(),
        "{blocked:?}"
    );
    // one recovers: one unhealthy node of five may be replaced
    let mut record = core.cluster().nodes()[&claims[1]].clone();
    record.ready = true;
    record.conditions[0].status = "True".into();
    core.apply_node(claims[1].clone(), record, secs(10 + 31 * 60));
    let after = run_until(&mut core, 10 + 31 * 60 + 1, 10 + 32 * 60);
    assert_eq!(repaired(&after), vec![claims[0].clone()]);
    // its drain may take the policy's ten minutes and no longer
    let claim = &core.cluster().nodeclaims()[&claims[0]];
    let deleting = claim.deleting.expect("the NodeClaim is being deleted");
    assert_eq!(
        claim.terminate_at,
        Some(deleting + Duration::from_secs(600))
    );
}

#[test]
fn a_node_whose_image_the_class_no_longer_resolves_to_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_image_and_register(&mut core, &claim, Some("ami-1"));
    run_until(&mut core, 4, 20);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    // a new release: the alias resolves to another image
    core.apply_node_class(node_class(&["ami-2"]));
    run_until(&mut core, 21, 40);
    assert_eq!(
        core.cluster()
            .nodeclaims()
            .get(&claim)
            .and_then(|c| c.drifted),
        Some(DriftReason::AmiDrift)
    );
    assert_eq!(DriftReason::AmiDrift.as_str(), "AMIDrift");
}

#[test]
fn a_node_whose_image_is_still_resolved_or_unknown_has_not_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1", "ami-arm"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2);
    launch_image_and_register(&mut core, &claims[0], Some("ami-arm"));
    launch_image_and_register(&mut core, &claims[1], None);
    // the class not resolved yet (no AMIs) is no reason either
    core.apply_node_class(node_class(&[]));
    run_until(&mut core, 4, 40);
    for c in &claims {
        assert_eq!(core.cluster().nodeclaims()[c].drifted, None, "{c}");
    }
}

#[test]
fn a_node_whose_security_groups_or_subnet_the_class_no_longer_selects_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(resolved_class(
        &["ami-1"],
        &["subnet-a", "subnet-b"],
        &["sg-1"],
    ));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2);
    launch_into_and_register(
        &mut core,
        &claims[0],
        Some("ami-1"),
        Some(network("subnet-a", &["sg-1"])),
    );
    launch_into_and_register(
        &mut core,
        &claims[1],
        Some("ami-1"),
        Some(network("subnet-b", &["sg-1"])),
    );
    run_until(&mut core, 4, 20);
    assert_eq!(drift(&core, &claims), [None, None]);
    // a security group added to the class: neither instance has it
    core.apply_node_class(resolved_class(
        &["ami-1"],
        &["subnet-a", "subnet-b"],
        &["sg-1", "sg-2"],
    ));
    run_until(&mut core, 21, 25);
    let sg = Some(DriftReason::SecurityGroupDrift);
    assert_eq!(drift(&core, &claims), [sg, sg]);
    // the group taken out again and subnet-b no longer selected: only the second has drifted
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-a"], &["sg-1"]));
    run_until(&mut core, 26, 30);
    assert_eq!(
        drift(&core, &claims),
        [None, Some(DriftReason::SubnetDrift)]
    );
    assert_eq!(DriftReason::SubnetDrift.as_str(), "SubnetDrift");
    assert_eq!(
        DriftReason::SecurityGroupDrift.as_str(),
        "SecurityGroupDrift"
    );
}

/// Karpenter's `Consolidatable` condition: set once an initialized node has been quiet for
/// its NodePool's consolidateAfter, cleared when a pod lands on it.
#[test]
fn a_nodeclaims_status_says_consolidatable_once_quiet_for_consolidate_after() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.disruption.consolidate_after =
        kerf_api::duration::NillableDuration::After(Duration::from_secs(60));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let says = |actions: &[Action]| -> Vec<bool> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::PatchNodeClaimStatus {
                    nodeclaim, status, ..
                } if *nodeclaim == claim => Some(
                    status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Consolidatable"),
                ),
                _ => None,
            })
            .collect()
    };
    let quiet = run_until(&mut core, 5, 50);
    assert!(!says(&quiet).contains(&true), "{quiet:?}");
    let due = run_until(&mut core, 50, 90);
    assert_eq!(says(&due), [true]);
    // a pod lands: the window starts again, and the condition goes
    let mut bound = unschedulable("y", "100m");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(91));
    let busy = run_until(&mut core, 91, 120);
    assert_eq!(says(&busy), [false]);
}

#[test]
fn a_node_outside_the_placement_group_its_class_resolves_to_now_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1"]));
    // the class's offerings launch into a group: its types carry the group's id
    core.set_instance_types("default", in_group(Some("pg-1")));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_as_and_register(&mut core, &claim, launched_in(&claim, "pg-1"));
    run_until(&mut core, 4, 20);
    let drifted = |core: &Controllers| {
        core.cluster()
            .nodeclaims()
            .get(&claim)
            .and_then(|c| c.drifted)
    };
    assert_eq!(drifted(&core), None, "in the group the class resolves to");
    // the group was made again (another id), then the selector removed: both drift the node
    for now in [Some("pg-2"), None] {
        core.set_instance_types("default", in_group(now));
        run_until(&mut core, 21, 40);
        assert_eq!(
            drifted(&core),
            Some(DriftReason::PlacementGroupDrift),
            "{now:?}"
        );
    }
    // back in the node's group: no longer drifted
    core.set_instance_types("default", in_group(Some("pg-1")));
    run_until(&mut core, 41, 60);
    assert_eq!(drifted(&core), None);
}

#[test]
fn a_placement_group_not_resolved_yet_drifts_nothing() {
    let mut core = with_pool();
    let mut selecting = node_class(&["ami-1"]);
    selecting.spec.placement_group_selector = serde_json::from_str(r#"{"name": "training"}"#).ok();
    core.apply_node_class(selecting);
    core.set_instance_types("default", in_group(Some("pg-1")));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_as_and_register(&mut core, &claim, launched_in(&claim, "pg-1"));
    // the class's types before its group is resolved again (a restart): no answer, no drift
    core.set_instance_types("default", in_group(None));
    run_until(&mut core, 4, 40);
    let c = &core.cluster().nodeclaims()[&claim];
    assert_eq!(c.drifted, None, "an unresolved group is no reason");
    // resolved to another group: drifted
    core.set_instance_types("default", in_group(Some("pg-2")));
    run_until(&mut core, 41, 60);
    let c = &core.cluster().nodeclaims()[&claim];
    assert_eq!(c.drifted, Some(DriftReason::PlacementGroupDrift));
}

#[test]
fn a_failed_status_check_ends_the_node_without_waiting_and_is_counted_once() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    run_until(&mut core, 4, 20);
    assert_eq!(
        core.cluster().nodeclaims()[&claim]
            .launched
            .as_ref()
            .map(|l| l.instance_id().to_string()),
        Some(claim.clone())
    );
    core.notice(&status_check_failed(&claim), secs(21));
    let written: Vec<BTreeMap<String, Option<String>>> = run_until(&mut core, 21, 21)
        .into_iter()
        .filter_map(|a| match a {
            Action::AnnotateNodeClaim { annotations, .. } => Some(annotations),
            _ => None,
        })
        .collect();
    assert_eq!(
        written,
        [BTreeMap::from([(
            kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP.to_string(),
            Some("1970-01-01T00:00:21.000Z".to_string())
        )])],
        "the deadline is written for a restart to read"
    );
    core.notice(&status_check_failed(&claim), secs(81));
    let c = &core.cluster().nodeclaims()[&claim];
    assert!(c.deleting.is_some(), "its NodeClaim is deleted");
    assert_eq!(
        c.terminate_at,
        Some(secs(21)),
        "its pods go without waiting on budgets or grace periods"
    );
    let text = core.render_metrics(secs(82), &[]);
    let line = text
        .lines()
        .find(|l| l.starts_with("karpenter_interruption_instance_status_unhealthy_total{"))
        .unwrap_or_default();
    assert!(
        line.contains(r#"category="InstanceStatus""#) && line.ends_with(" 1"),
        "{line}"
    );
}

/// With `PodDeletionCostManagement` on, each minute the nodes are ranked as consolidation
/// would take them (savings ratio: price over 1 plus the pods' eviction costs, which no
/// longer read the annotation) and their ReplicaSet pods get `-n + i`; a node pinned by a bare
/// pod has the annotation removed; a node tainted disrupted goes first of all.
#[test]
fn replicaset_pods_get_their_nodes_rank_as_pod_deletion_cost() {
    let settings = Settings {
        pod_deletion_cost: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "100%"}])).expect("budgets");
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "1500m"), secs(0));
    }
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 3, "{claims:?}");
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    // a: one pod of cost 1, ratio 0.1/2 (its annotation, were it read, would make it 0.1/11
    // and put a last); b: a pod of cost 2 (priority 2^25) and one of cost 1, ratio 0.1/4;
    // c: pinned by a bare pod
    let rs = Some("rs");
    let pods = [
        bound_pod("a", &claims[0], "1500m", 0, rs, Some("2147483647")),
        bound_pod("b", &claims[1], "1500m", 33_554_432, rs, None),
        bound_pod("b2", &claims[1], "100m", 0, rs, None),
        bound_pod("c", &claims[2], "1500m", 0, None, None),
        bound_pod("d", &claims[2], "100m", 0, rs, Some("5")),
    ];
    for p in pods {
        core.apply_pod(p, secs(5));
    }
    let first = deletion_costs(&run_until(&mut core, 5, 70));
    let want = |pairs: &[(&str, Option<i32>)]| -> BTreeMap<String, Option<i32>> {
        (pairs.iter())
            .map(|(k, v)| (format!("default/{k}"), *v))
            .collect()
    };
    assert_eq!(
        first,
        want(&[
            ("a", Some(-2)),
            ("b", Some(-1)),
            ("b2", Some(-1)),
            ("d", None),
        ])
    );
    // the API server stores them; a minute on nothing is asked again
    for (name, node, cpu, priority, cost) in [
        ("a", 0, "1500m", 0, "-2"),
        ("b", 1, "1500m", 33_554_432, "-1"),
        ("b2", 1, "100m", 0, "-1"),
    ] {
        let pod = bound_pod(name, &claims[node], cpu, priority, rs, Some(cost));
        core.apply_pod(pod, secs(71));
    }
    core.delete_pod("default/d", secs(71));
    assert_eq!(deletion_costs(&run_until(&mut core, 71, 130)), want(&[]));
    // b's node is tainted for disruption: its pods go first; a is ranked alone
    store_taint(
        &mut core,
        &claims[1],
        &kerf_core::cluster::disrupted_taint(),
        131,
    );
    assert_eq!(
        deletion_costs(&run_until(&mut core, 131, 190)),
        want(&[
            ("a", Some(-1)),
            ("b", Some(i32::MIN)),
            ("b2", Some(i32::MIN))
        ])
    );
}

/// A node its NodePool will not consolidate is told so as Karpenter's disruption methods
/// tell it (`Unconsolidatable`, on the Node and NodeClaim, once per 15 minutes), and a pod's
/// timed do-not-disrupt is told on the pod while it holds and once it has elapsed.
#[test]
fn candidates_are_told_unconsolidatable_and_their_pods_do_not_disrupt_times() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.disruption.consolidate_after = kerf_api::duration::NillableDuration::Never;
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut pod = bound_pod("x", &claim, "1", 0, Some("rs"), None);
    pod.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_string(),
        "2m".to_string(),
    )]));
    pod.status.as_mut().unwrap().start_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(5).unwrap(),
        ));
    core.apply_pod(pod, secs(5));
    let actions = run_until(&mut core, 5, 1200);
    let unconsolidatable = events(&actions, "Unconsolidatable");
    let said = format!("{claim}: NodePool \"default\" has consolidation disabled");
    // on the Node (named as the claim here) and the NodeClaim; not again while nothing
    // changes (a pass whose inputs did not change is not run)
    assert_eq!(
        unconsolidatable,
        [said.clone(), said],
        "{unconsolidatable:?}"
    );
    let until = events(&actions, "DoNotDisruptUntil");
    assert!(!until.is_empty());
    assert!(until.iter().all(|e| e
        == "default/x: The karpenter.sh/do-not-disrupt grace period will elapse at \
            1970-01-01T00:02:05Z"));
    let elapsed = events(&actions, "DoNotDisruptGracePeriodElapsed");
    assert!(!elapsed.is_empty());
}

/// A consolidation command's candidates are told so on their Node and NodeClaim when it is
/// decided (`ConsolidationCandidate`), and, when validation turns a one-node move down,
/// why (`ConsolidationRejected`: budget, scheduling or churn), with Karpenter's messages.
#[test]
fn consolidation_candidates_are_told_when_decided_and_when_rejected() {
    let (_, claim, _, decided) = consolidation_decided();
    let candidate = format!("Consolidation candidate: delete: [{claim}] (savings: $0.10)");
    // the Node and the NodeClaim share the name here: both are told
    assert_eq!(
        events(&decided, "ConsolidationCandidate"),
        [
            format!("{claim}: {candidate}"),
            format!("{claim}: {candidate}")
        ]
    );
    let kinds: Vec<_> = (decided.iter())
        .filter_map(|a| match a {
            Action::Event(e) if e.reason == "ConsolidationCandidate" => Some((e.kind, e.warning)),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [(EventObject::Node, false), (EventObject::NodeClaim, false)]
    );

    // the NodePool's budget closes during the validation wait
    let (mut core, claim, t, _) = consolidation_decided();
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "0"}])).expect("budgets");
    core.apply_node_pool(np);
    let after = run_until(&mut core, t + 1, t + 60);
    assert_eq!(
        events(&after, "ConsolidationRejected"),
        vec![
            format!(
                "{claim}: Consolidation rejected: delete: [{claim}], reason: budget (savings: $0.10)"
            );
            2
        ]
    );
    assert!(
        !(after.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "{after:#?}"
    );

    // the node Kerf does not manage goes during the wait: nowhere to move, so scheduling
    let (mut core, claim, t, _) = consolidation_decided();
    let (kind, key) = ("Node".into(), "/mng-1".to_string());
    core.observe(Observation::Deleted { kind, key }, secs(t + 1));
    let after = run_until(&mut core, t + 1, t + 60);
    let rejected = format!(
        "{claim}: Consolidation rejected: delete: [{claim}], reason: scheduling (savings: $0.10)"
    );
    assert_eq!(events(&after, "ConsolidationRejected"), vec![rejected; 2]);
}

/// Under the Balanced policy a decided one-node move's score is told on its Node and
/// NodeClaim (`ConsolidationApproved`, with Karpenter's message); under the others nothing
/// is.
#[test]
fn a_balanced_move_is_told_approved_with_its_score() {
    let (_, _, _, decided) = consolidation_decided();
    assert!(events(&decided, "ConsolidationApproved").is_empty());
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    let mut np = pool();
    np.spec.disruption.consolidation_policy = kerf_api::nodepool::ConsolidationPolicy::Balanced;
    core.apply_node_pool(np);
    unmanaged_node(&mut core, "us-east-1a");
    let told: Vec<String> = (5..120)
        .flat_map(|t| events(&poll_stored(&mut core, t), "ConsolidationApproved"))
        .collect();
    // the pool's one node: all of its cost saved, all of its disruption cost disrupted
    let message = "score 1.00 >= threshold 0.50 (k: 2, savings 100.0%, disruption 100.0%)";
    assert_eq!(
        told,
        [format!("{claim}: {message}"), format!("{claim}: {message}")]
    );
}

/// The default class resolving to `reservations`.
fn class_reserving(reservations: &[&str]) -> kerf_api::EC2NodeClass {
    let mut class = node_class(&["ami-1"]);
    let listed: Vec<serde_json::Value> = (reservations.iter())
        .map(|id| {
            serde_json::json!({"id": id, "instanceType": "m5.large", "availabilityZone": "us-east-1a",
                "ownerID": "123456789012", "instanceMatchCriteria": "open",
                "reservationType": "default", "state": "active"})
        })
        .collect();
    class.status.as_mut().expect("status").capacity_reservations =
        serde_json::from_value(serde_json::Value::Array(listed)).expect("reservations");
    class
}

#[test]
fn a_node_whose_reservation_ended_is_relabelled_on_demand_and_one_still_in_a_dropped_one_drifts() {
    let mut core = with_pool();
    core.apply_node_class(class_reserving(&["cr-1", "cr-2"]));
    // too big to share a node
    core.apply_pod(unschedulable("x", "1500m"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2, "{claims:?}");
    let reserved_in = |claim: &str, id: &str| kerf_core::cluster::Launched {
        capacity_type: kerf_core::cluster::CapacityType::Reserved,
        labels: BTreeMap::from([
            (
                kerf_api::labels::CAPACITY_RESERVATION_ID.to_string(),
                id.to_string(),
            ),
            (
                kerf_api::labels::CAPACITY_RESERVATION_TYPE.to_string(),
                "default".to_string(),
            ),
        ]),
        ..instance(claim)
    };
    let (ended, dropped) = (
        claims[0].clone(),
        claims.get(1).cloned().unwrap_or_default(),
    );
    launch_as_and_register(&mut core, &ended, reserved_in(&ended, "cr-1"));
    if !dropped.is_empty() {
        launch_as_and_register(&mut core, &dropped, reserved_in(&dropped, "cr-2"));
    }
    let listed = |claim: &str, reservation: Option<&str>| kerf_core::cluster::CloudInstance {
        provider_id: format!("kwok://{claim}"),
        nodeclaim: claim.to_string(),
        image_id: None,
        network: None,
        reservation: Some(reservation.map(str::to_string)),
    };
    let both = |a: Option<&str>, b: Option<&str>| vec![listed(&ended, a), listed(&dropped, b)];
    core.garbage_collect(&both(Some("cr-1"), Some("cr-2")), secs(10));
    run_until(&mut core, 10, 20);
    // both reservations leave the class before the cloud lists the instances again: no
    // drift yet (an instance may have left its reservation with it)
    core.apply_node_class(class_reserving(&[]));
    run_until(&mut core, 21, 30);
    let drift = |core: &Controllers, c: &str| core.cluster().nodeclaims()[c].drifted;
    assert_eq!(drift(&core, &ended), None, "drifted before the cloud said");
    assert_eq!(
        drift(&core, &dropped),
        None,
        "drifted before the cloud said"
    );
    // the listing: the first instance runs on out of any reservation, the other still in one
    core.garbage_collect(&both(None, Some("cr-2")), secs(31));
    let actions = run_until(&mut core, 31, 40);
    assert_eq!(
        drift(&core, &ended),
        None,
        "an ended reservation's node drifted"
    );
    assert_eq!(logged(&actions, "updated capacity type for nodeclaims"), 1);
    let relabelled: Vec<(String, BTreeMap<String, Option<String>>)> = (actions.iter())
        .filter_map(|a| match a {
            Action::RelabelNodeClaim { nodeclaim, labels } => {
                Some((nodeclaim.clone(), labels.clone()))
            }
            Action::RelabelNode { node, labels } => Some((node.clone(), labels.clone())),
            _ => None,
        })
        .collect();
    let expected = BTreeMap::from([
        (
            "karpenter.sh/capacity-type".to_string(),
            Some("on-demand".to_string()),
        ),
        (kerf_api::labels::CAPACITY_RESERVATION_ID.to_string(), None),
        (
            kerf_api::labels::CAPACITY_RESERVATION_TYPE.to_string(),
            None,
        ),
    ]);
    // the NodeClaim, then its Node (named as the NodeClaim here)
    assert_eq!(
        relabelled,
        [(ended.clone(), expected.clone()), (ended.clone(), expected)]
    );
    let launched = core.cluster().nodeclaims()[&ended]
        .launched
        .clone()
        .expect("launched");
    assert_eq!(
        launched.capacity_type,
        kerf_core::cluster::CapacityType::OnDemand
    );
    if !dropped.is_empty() {
        assert_eq!(
            drift(&core, &dropped),
            Some(DriftReason::CapacityReservationDrift)
        );
    }
}

/// `kerf explain` tells a node's move as the disruption pass chose it, and when, while it
/// is carried out, even once a pass now would choose nothing (its budget closed during the
/// validation wait); other nodes are told that no pass decides meanwhile; with no move under
/// way, what a pass now would do is told as a dry run.
#[test]
fn explain_tells_the_move_the_pass_chose_while_it_is_carried_out() {
    let (mut core, claim, t, _) = consolidation_decided();
    let dry = |core: &mut Controllers, at: u64| {
        let e = core.explain_node(&claim, secs(at)).expect("explained");
        e.decision.unwrap_or_default()
    };
    let chosen = dry(&mut core, t + 2);
    assert!(
        chosen.starts_with("the disruption pass 2s ago chose to delete it (Underutilized, ")
            && chosen.ends_with("consolidation, saving $0.1000/hour)"),
        "{chosen}"
    );
    // while the command is validated no pass decides: another node is told so, not given a
    // dry run of a pass that would not run
    let other = core.explain_node("mng-1", secs(t + 2)).expect("explained");
    assert_eq!(other.decision, None);
    assert!(
        (other.notes.iter()).any(|n| n.kind == "pass-waits"),
        "{:?}",
        other.notes
    );
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "0"}])).expect("budgets");
    core.apply_node_pool(np);
    assert_eq!(dry(&mut core, t + 3), chosen.replace("2s ago", "3s ago"));
    // rejected once validated: nothing is under way, and a pass now would do nothing
    let _ = run_until(&mut core, t + 1, t + 60);
    assert_eq!(dry(&mut core, t + 60), "");
}

/// A node whose drain is done and whose instance Kerf asked the cloud to end keeps counting
/// toward its NodePool's disruption budget until the API server holds its NodeClaim's
/// `InstanceTerminating` condition: Karpenter's budgets read the NodeClaim as its informer
/// has it, so a status write still on its way (held up by an outage) frees no room.
#[test]
fn a_terminating_instance_leaves_the_budget_once_its_condition_is_stored() {
    let mut core = two_half_empty_nodes();
    let claims: Vec<String> = core.cluster().nodeclaims().keys().cloned().collect();
    let (gone, kept) = (&claims[0], &claims[1]);
    let pod_on = |core: &Controllers, claim: &str| {
        (core.cluster().pods().iter())
            .find(|(_, p)| p.node.as_deref() == Some(claim))
            .map(|(k, _)| k.clone())
            .expect("a pod on the node")
    };
    let moved = pod_on(&core, gone);
    core.delete_pod(&moved, secs(36));
    core.delete_nodeclaim(gone, secs(36));
    let actions = run_until(&mut core, 36, 40);
    let status = last_status(&actions, gone).expect("the terminated NodeClaim's status written");
    assert!(
        (status.conditions.iter()).any(|c| c.type_ == "InstanceTerminating" && c.status == "True"),
        "{status:?}"
    );
    // two nodes of a `nodes: 10%` budget allow one disruption, which the going node takes
    let budget_blocked = |core: &mut Controllers, at: u64| {
        let explained = core.explain_node(kept, secs(at)).expect("the kept node");
        explained.blockers.iter().any(|b| b.kind == "budget")
    };
    assert!(budget_blocked(&mut core, 41), "the write is not stored yet");
    // the API server holds the condition: the node no longer counts, and its room is free
    let mut stored: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": gone,
            "deletionTimestamp": "2026-01-01T00:00:36Z",
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        },
    }))
    .unwrap();
    stored.status = Some(status);
    core.observe(
        Observation::Applied(kerf_core::observe::Object::nodeclaim(stored)),
        secs(42),
    );
    assert!(
        !budget_blocked(&mut core, 43),
        "the stored condition frees the room"
    );
}

/// A node counts toward its NodePool's disruption budget once the API server holds its
/// `karpenter.sh/initialized` label, not when Kerf asks for it: Karpenter's budgets read the
/// Node as its informer has it, and a label write refused by a conflict lands only when it
/// is tried again (swarm seed 61538, where Kerf took a second node under `nodes: 10%`).
#[test]
fn a_node_counts_toward_the_budget_once_its_initialized_label_is_stored() {
    let mut core = two_half_empty_nodes();
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "100%"}])).expect("budgets");
    core.apply_node_pool(np);
    let claims: Vec<String> = core.cluster().nodeclaims().keys().cloned().collect();
    let (gone, kept) = (&claims[0], &claims[1]);
    let on_gone = (core.cluster().pods().iter())
        .find(|(_, p)| p.node.as_deref() == Some(gone.as_str()))
        .map(|(k, _)| k.clone())
        .expect("a pod on the node");
    core.delete_pod(&on_gone, secs(36));
    core.delete_nodeclaim(gone, secs(36));
    run_until(&mut core, 36, 40);
    // the kept node as the API server now holds it: its label's write has not landed
    let mut node = core.cluster().nodes()[kept].clone();
    std::sync::Arc::make_mut(&mut node.labels).remove("karpenter.sh/initialized");
    core.apply_node(kept.clone(), node, secs(41));
    let asked = core.poll(secs(42));
    assert!(
        asked
            .iter()
            .any(|a| matches!(a, Action::LabelNode { node, labels, .. }
            if node == kept && labels.contains_key("karpenter.sh/initialized"))),
        "the label is asked for again: {asked:?}"
    );
    let budget_blocked = |core: &mut Controllers, at: u64| {
        let explained = core.explain_node(kept, secs(at)).expect("the kept node");
        explained.blockers.iter().any(|b| b.kind == "budget")
    };
    // the going node alone counts: 100% of 1, which it takes
    assert!(
        budget_blocked(&mut core, 43),
        "counted before its label is stored"
    );
    // stored: 100% of 2, one left beside the going node
    let labels = BTreeMap::from([("karpenter.sh/initialized".to_string(), "true".to_string())]);
    store_labels(&mut core, kept, &labels, 44);
    assert!(!budget_blocked(&mut core, 45), "the stored label counts it");
}

/// Polls `core` from `from` to `until`, storing the taints and labels it asks for as
/// [`poll_stored`] does, except a disruption command's marks: `refuse` says, of each mark
/// and the second it is asked at, whether the API server refuses it (and
/// [`Observation::MarkRefused`] comes back). The actions, with each mark's second and due
/// instant.
fn run_refusing_marks(
    core: &mut Controllers,
    from: u64,
    until: u64,
    mut refuse: impl FnMut(&str, u64) -> bool,
) -> (Vec<Action>, Vec<(u64, Duration)>) {
    let (mut all, mut marks) = (Vec::new(), Vec::new());
    for t in from..=until {
        let actions = core.poll(secs(t));
        for a in &actions {
            match a {
                Action::Taint {
                    node,
                    taint,
                    by: Some(by),
                } => {
                    marks.push((t, *by));
                    if refuse(node, t) {
                        let refused = Observation::MarkRefused {
                            node: node.clone(),
                            by: *by,
                        };
                        core.observe(refused, secs(t));
                    } else {
                        store_taint(core, node, taint, t);
                    }
                }
                Action::Taint { node, taint, .. } => store_taint(core, node, taint, t),
                Action::LabelNode { node, labels, .. } => store_labels(core, node, labels, t),
                _ => {}
            }
        }
        all.extend(actions);
    }
    (all, marks)
}

/// A disruption command's mark is written at once or not at all: a mark the API server
/// refused (here, an outage) gives its command up, the candidate is untainted and not
/// deleted, and nothing of the command is written later, after the budgets that allowed it
/// may have changed (the CI soak, seed 1: a consolidation decided during an API-server outage
/// had its taints and deletions land after it, inside a budget window allowing none). The
/// next pass decides again; with its mark stored, the node goes.
#[test]
fn a_refused_mark_gives_its_command_up_and_is_not_written_later() {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    unmanaged_node(&mut core, "us-east-1a");
    let mut refused_at = None;
    let (actions, marks) = run_refusing_marks(&mut core, 5, 300, |node, t| {
        assert_eq!(node, claim, "the candidate's node is marked");
        refused_at.get_or_insert(t) == &t
    });
    let refused_at = refused_at.expect("the command marked its candidate");
    let stored_at = (marks.iter())
        .map(|(t, _)| *t)
        .find(|t| *t > refused_at)
        .expect("the next pass marked it again");
    for (t, by) in &marks {
        assert!(
            secs(*t) < *by && *by <= secs(t + 10),
            "a mark asked at {t} s is due within 10 s, not at {by:?}"
        );
    }
    let first_mark = (actions.iter())
        .position(|a| matches!(a, Action::Taint { by: Some(_), .. }))
        .expect("marked");
    let after = &actions[first_mark + 1..];
    let rollback = (after.iter())
        .position(|a| matches!(a, Action::RemoveTaint { node, .. } if *node == claim))
        .expect("the refused mark's node is untainted");
    let deletion = (after.iter())
        .position(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim))
        .expect("the node goes once its mark is stored");
    let remark = (after.iter())
        .position(|a| matches!(a, Action::Taint { by: Some(_), .. }))
        .expect("marked again");
    assert!(
        rollback < remark && remark < deletion,
        "untainted, marked again, then deleted: {after:#?}"
    );
    assert!(
        !(actions[..first_mark].iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "nothing was deleted before the first mark"
    );
    assert!(stored_at > refused_at);
    assert_eq!(logged(&actions, "failed disrupting node(s)"), 1);
    // the NodeClaim says why it is disrupted from its mark on, and no more once given up,
    // as Karpenter's queue writes and clears its `DisruptionReason` condition
    let reason = |actions: &[Action]| {
        let status = last_status(actions, &claim).expect("a status written");
        (status.conditions.iter())
            .find(|c| c.type_ == "DisruptionReason")
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let marked_batch = &actions[..first_mark + 1 + rollback];
    assert_eq!(
        reason(marked_batch),
        Some(("True".to_string(), "Underutilized".to_string()))
    );
    assert_eq!(reason(&after[..remark]), None, "cleared with the rollback");
}

/// A mark is due before a budget's schedule opens or closes a window: the budgets that
/// allowed its command must still be the ones that hold when it is stored. Here disruption
/// is allowed in odd minutes only (`nodes: "0"` from each even minute, for a minute), and a
/// consolidation decided at 1:55 must have its mark stored by 2:00, not 2:05.
#[test]
fn a_mark_is_due_before_a_budget_window_opens() {
    let (mut core, _) = one_node_with_a_replicaset_pod();
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_yaml::from_str("[{nodes: '0', schedule: '*/2 * * * *', duration: 1m}]").unwrap();
    core.apply_node_pool(np);
    let _ = run_refusing_marks(&mut core, 5, 90, |_, _| false);
    unmanaged_node(&mut core, "us-east-1a");
    let (_, marks) = run_refusing_marks(&mut core, 91, 300, |_, _| false);
    assert_eq!(marks, [(115, secs(120))], "decided at 1:55, due at 2:00");
}

/// A node still carrying a disrupted taint no command holds (left by an earlier command, or
/// by the operator before a restart) is no candidate until its removal is stored: a new
/// command's mark would otherwise be taken for stored on the old taint's strength, and its
/// deletion go out with a mark the API server may yet refuse.
#[test]
fn a_leftover_disrupted_taint_is_gone_before_its_node_is_marked_again() {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    store_taint(&mut core, &claim, &kerf_core::cluster::disrupted_taint(), 5);
    unmanaged_node(&mut core, "us-east-1a");
    let (held, marks) = run_refusing_marks(&mut core, 5, 119, |_, _| false);
    assert!(
        marks.is_empty(),
        "marked over the leftover taint: {marks:?}"
    );
    assert!(
        (held.iter()).any(|a| matches!(a, Action::RemoveTaint { node, .. } if *node == claim)),
        "the leftover taint is asked to go"
    );
    assert!(!deleted(&held, &claim));
    // the removal is stored: the node is a candidate again, marked, then deleted
    let mut n = core.cluster().nodes()[&claim].clone();
    n.taints.retain(|t| t.key != "karpenter.sh/disrupted");
    core.apply_node(claim.clone(), n, secs(120));
    let (after, marks) = run_refusing_marks(&mut core, 120, 300, |_, _| false);
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert!(deleted(&after, &claim));
}
