//! Provisioning: pending pods, nominations, batches, limits, reservations and what pods are told.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::{Object, Observation};
use kerf_core::workloads::VolumeObject;
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, Offering};

use super::support::*;

/// kube-scheduler gives a node's room to another pod: the pod nominated there gets capacity
/// again as soon as the watch shows the node full, not when the nomination window ends.
#[test]
fn a_nominated_pod_whose_node_kube_scheduler_filled_gets_capacity_at_once() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = created(&run_until(&mut core, 0, 2));
    assert_eq!(first.len(), 1, "one NodeClaim for the pending pod");
    let claim = first[0].clone();
    launch_and_register(&mut core, &claim);
    let _ = core.poll(secs(4));
    assert!(core.cluster().nodeclaims()[&claim].initialized);
    // kube-scheduler gives the room to another pod; x stays pending, nominated
    let mut other = unschedulable("y", "1500m");
    other.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(other, secs(5));
    // the batch window (1 s idle) and no more: x gets a NodeClaim of its own
    let again = created(&run_until(&mut core, 5, 7));
    assert_eq!(again.len(), 1, "the pod was left nominated to a full node");
    assert_ne!(again[0], claim);
}

/// A nomination holds while its node can still take the pod: another pod bound there that
/// leaves room makes no NodeClaim, then a taint the pod does not tolerate ends it at once.
#[test]
fn a_nomination_holds_while_its_node_has_room_and_ends_with_an_untolerated_taint() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let _ = core.poll(secs(4));
    let mut other = unschedulable("y", "500m");
    other.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(other, secs(5));
    assert!(created(&run_until(&mut core, 5, 12)).is_empty());
    assert_eq!(
        core.cluster().pods()["default/x"].nominated.as_deref(),
        Some(claim.as_str())
    );
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints.push(kerf_api::Taint {
        key: "example.com/maintenance".into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    });
    core.apply_node(claim.clone(), node, secs(13));
    let again = created(&run_until(&mut core, 13, 15));
    assert_eq!(
        again.len(),
        1,
        "x stayed nominated to a node it cannot go to"
    );
}

#[test]
fn a_pod_that_fits_on_a_node_kerf_does_not_manage_gets_no_nodeclaim() {
    let mut core = with_pool();
    unmanaged_node(&mut core, "us-east-1a");
    core.apply_pod(unschedulable("x", "1"), secs(0));
    assert!(created(&run_until(&mut core, 0, 30)).is_empty());
}

/// One NodePool whose type is offered in us-east-1a and, dearer, in us-east-1b.
fn two_zones() -> Controllers {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let mut two_zones = instance_type();
    two_zones.offerings.push(Offering {
        zone: "us-east-1b".into(),
        capacity_type: "on-demand".into(),
        price_per_hour: 0.2,
        available: true,
        reservation: None,
    });
    core.set_instance_types("default", Arc::from(vec![two_zones]));
    core
}

/// A pod of `app: web`, spread over zones with maxSkew 1, bound to `node` or pending.
fn web(name: &str, node: Option<&str>) -> Pod {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
        },
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .unwrap();
    p.spec.as_mut().unwrap().node_name = node.map(str::to_string);
    p
}

/// The zone each NodeClaim created among `actions` is pinned to.
fn zones_created(actions: &[Action]) -> Vec<Option<Vec<String>>> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::CreateNodeClaim(c) => Some(c),
            _ => None,
        })
        .map(|c| {
            (c.spec.requirements.iter())
                .find(|r| r.key == "topology.kubernetes.io/zone")
                .map(|r| r.values.clone())
        })
        .collect()
}

#[test]
fn pods_bound_on_a_node_kerf_does_not_manage_count_in_zone_spread() {
    let mut core = two_zones();
    unmanaged_node(&mut core, "us-east-1a");
    core.apply_pod(web("web-0", Some("mng-1")), secs(0));
    core.apply_pod(web("web-1", None), secs(0));
    // us-east-1a is cheaper, but it already has web-0: the spread puts web-1 in us-east-1b
    assert_eq!(
        zones_created(&run_until(&mut core, 0, 15)),
        [Some(vec!["us-east-1b".to_string()])]
    );
}

/// A pod nominated to a NodeClaim whose launch has not answered counts in a later solve's
/// zone spread where the NodeClaim's requirements put it (swarm seed 140683: left out, the
/// second pod went to the same zone, and both nominations were ended as the nodes came up).
#[test]
fn pods_nominated_to_a_nodeclaim_not_launched_yet_count_in_zone_spread() {
    let mut core = two_zones();
    core.apply_pod(web("web-0", None), secs(0));
    let first = run_until(&mut core, 0, 5);
    assert_eq!(
        zones_created(&first),
        [Some(vec!["us-east-1a".to_string()])]
    );
    let claim = created(&first)[0].clone();
    assert!(core.cluster().nodeclaims()[&claim].launched.is_none());
    core.apply_pod(web("web-1", None), secs(10));
    assert_eq!(
        zones_created(&run_until(&mut core, 10, 25)),
        [Some(vec!["us-east-1b".to_string()])],
        "web-1 went to the zone web-0 is nominated to"
    );
}

#[test]
fn pods_get_karpenters_events_and_a_failure_is_told_once_per_five_minutes() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("fits", "1"), secs(0));
    core.apply_pod(unschedulable("huge", "64"), secs(0));
    let first = run_until(&mut core, 0, 299);
    let claim = created(&first)[0].clone();
    assert_eq!(
        events(&first, "Nominated"),
        [format!(
            "default/fits: Pod should schedule on: nodeclaim/{claim}"
        )]
    );
    // retried every 10 s, told once
    let failed = events(&first, "FailedScheduling");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].starts_with("default/huge: Failed to schedule pod, "));
    assert_eq!(
        events(&run_until(&mut core, 300, 320), "FailedScheduling").len(),
        1
    );
}

#[test]
fn a_nodepool_whose_requirements_leave_no_type_is_told_so_once_a_minute_while_pods_wait() {
    let mut core = with_pool();
    let mut typo = pool();
    typo.metadata.name = Some("typo".into());
    typo.spec.template.spec.requirements = serde_yaml::from_str(
        "[{key: node.kubernetes.io/instance-type, operator: In, values: [m5.lrage]}]",
    )
    .unwrap();
    core.apply_node_pool(typo);
    // nothing pending: no scheduling simulation, nothing told
    assert!(events(&run_until(&mut core, 0, 30), "NoCompatibleInstanceTypes").is_empty());
    core.apply_pod(unschedulable("waits", "64"), secs(31));
    let actions = run_until(&mut core, 31, 150);
    let message = "NodePool requirements filtered out all compatible available instance types";
    // retried every 10 s, told on the NodePool once a minute; the default NodePool is fine
    assert_eq!(
        events(&actions, "NoCompatibleInstanceTypes"),
        [format!("typo: {message}"), format!("typo: {message}")]
    );
    let logged = (actions.iter())
        .filter(|a| {
            matches!(a, Action::Log(l) if l.message
                == "skipping, nodepool requirements filtered out all instance types"
                && l.fields["NodePool"]["name"] == "typo")
        })
        .count();
    assert!(logged >= 10, "told {logged} times");
}

/// A NodeClaim that found no capacity tells the pods it was for, as Karpenter does.
#[test]
fn pods_waiting_on_a_nodeclaim_without_capacity_are_told() {
    use kerf_core::controllers::lifecycle::InsufficientOffering as Refused;
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    let short = Refused {
        capacity_type: "on-demand".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
    };
    core.launch_failed(&claim, &[short], secs(3));
    let told = events(&core.poll(secs(3)), "InsufficientCapacityError");
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(
        told.contains(&format!(
            "default/x: NodeClaim {claim} nominated for this pod failed to launch: creating instance, insufficient capacity, all requested instance types were unavailable during launch (1 offerings)"
        )),
        "{told:?}"
    );
}

#[test]
fn a_request_with_no_spot_capacity_anywhere_marks_spot_short_in_its_zones() {
    use kerf_core::controllers::lifecycle::InsufficientOffering as Refused;
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    let refused = |ct: &str, it: &str, zone: &str| Refused {
        capacity_type: ct.into(),
        instance_type: it.into(),
        zone: zone.into(),
    };
    core.launch_failed(
        &claim,
        &[
            refused("spot", "m5.large", "us-east-1a"),
            refused("spot", "c5.large", "us-east-1b"),
        ],
        secs(3),
    );
    let unavailable = |ct: &str, it: &str, zone: &str| {
        core.unavailable_offerings()
            .is_unavailable(ct, it, zone, secs(4))
    };
    assert!(
        unavailable("spot", "r5.large", "us-east-1a"),
        "every spot type in the zone"
    );
    assert!(unavailable("spot", "r5.large", "us-east-1b"));
    assert!(
        !unavailable("spot", "r5.large", "us-east-1c"),
        "only the zones asked"
    );
    assert!(!unavailable("on-demand", "m5.large", "us-east-1a"));

    // a failure that refused on-demand offerings too says nothing of spot elsewhere
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    core.launch_failed(
        &claim,
        &[
            refused("spot", "m5.large", "us-east-1a"),
            refused("on-demand", "m5.large", "us-east-1a"),
        ],
        secs(3),
    );
    assert!(!core.unavailable_offerings().is_unavailable(
        "spot",
        "r5.large",
        "us-east-1a",
        secs(4)
    ));
}

#[test]
fn a_reservation_takes_no_more_nodeclaims_than_its_room_and_the_rest_say_why() {
    // a NodePool that may only use a reservation with room for one m5.large
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.requirements = serde_yaml::from_str(
        "- {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
    )
    .unwrap();
    core.apply_node_pool(np);
    let mut reserved = instance_type();
    reserved.offerings.push(Offering {
        zone: "us-east-1a".into(),
        capacity_type: "reserved".into(),
        price_per_hour: 0.1 / 1e7,
        available: true,
        reservation: Some(kerf_scheduling::Reservation {
            id: "cr-0abc".into(),
            capacity: 1,
        }),
    });
    core.set_instance_types("default", Arc::from(vec![reserved.clone()]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "1500m"), secs(0));
    }
    let solved = core.dry_run(secs(0));
    let claims = &solved.decision.nodeclaims;
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0].launch.capacity_type, "reserved");
    assert_eq!(claims[0].launch.reservation.as_deref(), Some("cr-0abc"));
    let pinned = |key: &str| {
        claims[0]
            .requirements
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.values.clone())
    };
    assert_eq!(
        pinned("karpenter.k8s.aws/capacity-reservation-id"),
        Some(vec!["cr-0abc".to_string()])
    );
    // the other two pods are not dropped: they are pending, with the reason
    let pending = &solved.decision.unschedulable;
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(pending.iter().all(|u| !u.reasons.is_empty()), "{pending:?}");

    // once the reservation is full (its room 0), no NodeClaim is planned into it at all
    reserved.offerings[1].reservation = Some(kerf_scheduling::Reservation {
        id: "cr-0abc".into(),
        capacity: 0,
    });
    core.set_instance_types("default", Arc::from(vec![reserved]));
    let solved = core.dry_run(secs(0));
    assert!(solved.decision.nodeclaims.is_empty());
    assert_eq!(solved.decision.unschedulable.len(), 3);
}

/// As Karpenter provisions with reserved capacity (its strict mode): a NodeClaim that can
/// launch into a reservation does not take the pod that would leave it none. Three 1-cpu
/// pods, a reserved 2-cpu type with room for two and a 4-cpu on-demand type: two reserved
/// NodeClaims (one pod each beside the other's), not one on-demand NodeClaim for all three.
#[test]
fn a_nodeclaim_that_can_use_a_reservation_keeps_it() {
    let mut core = with_pool();
    let mut small = instance_type();
    small.offerings.push(Offering {
        zone: "us-east-1a".into(),
        capacity_type: "reserved".into(),
        price_per_hour: 0.1 / 1e7,
        available: true,
        reservation: Some(kerf_scheduling::Reservation {
            id: "cr-0abc".into(),
            capacity: 2,
        }),
    });
    let mut big = instance_type();
    big.name = "m5.xlarge".into();
    big.labels = BTreeMap::from([(
        "node.kubernetes.io/instance-type".into(),
        "m5.xlarge".into(),
    )])
    .into();
    big.capacity.cpu_millis = 4000;
    big.allocatable.cpu_millis = 4000;
    big.offerings[0].price_per_hour = 0.15;
    core.set_instance_types("default", Arc::from(vec![small, big]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "900m"), secs(0));
    }
    let solved = core.dry_run(secs(0));
    let claims = &solved.decision.nodeclaims;
    let reserved = (claims.iter())
        .filter(|c| c.launch.capacity_type == "reserved")
        .count();
    assert_eq!(reserved, 2, "{claims:#?}");
    assert!(solved.decision.unschedulable.is_empty());
}

/// Two small pods (1 cpu), then two large (3 cpu), onto 4-cpu nodes: the solver packs two
/// nodes (a large with a small on each), but the nodes turn Ready one after the other and
/// kube-scheduler binds in queue order: both smalls onto the first, one large onto the second,
/// and the other large is left nowhere. The batch rehearses that placement and launches the
/// third node at once, not in a second wave.
#[test]
fn a_batch_kube_scheduler_would_place_otherwise_gets_its_last_node_in_the_same_batch() {
    let four = Resources::from_quantities([
        (&"cpu".to_string(), "4"),
        (&"memory".to_string(), "16Gi"),
        (&"pods".to_string(), "110"),
    ]);
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let xlarge = InstanceTypeOption {
        name: "m5.xlarge".into(),
        capacity: four.clone(),
        allocatable: four,
        ..instance_type()
    };
    core.set_instance_types("default", Arc::from(vec![xlarge]));
    for i in 0..2 {
        core.apply_pod(unschedulable(&format!("small-{i}"), "1"), secs(0));
    }
    for i in 0..2 {
        core.apply_pod(unschedulable(&format!("large-{i}"), "3"), secs(1));
    }
    let actions = run_until(&mut core, 0, 3);
    let claims = created(&actions);
    assert_eq!(claims.len(), 3, "{claims:?}");
    assert_eq!(
        logged(
            &actions,
            "kube-scheduler would leave pod(s) without a node, provisioning again"
        ),
        1
    );
    // every pod is nominated where kube-scheduler's placement has room for it
    let pods = core.cluster().pods();
    let mut on: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, p) in pods {
        let claim = p.nominated.as_deref().unwrap_or_else(|| panic!("{key}"));
        *on.entry(claim).or_default() += p.requests.cpu_millis;
    }
    assert!(on.values().all(|m| *m <= 4000), "{on:?}");
}

/// A pod whose volume is in us-east-1b, pending beside a node in us-east-1a with room for it:
/// kube-scheduler's VolumeBinding never binds it there, so the batch's rehearsal must not move
/// its nomination there either (it once did, and the pod waited, nominated, for good: swarm
/// seed 60027). It keeps the new NodeClaim in us-east-1b the solve planned for it.
#[test]
fn the_rehearsal_keeps_a_pod_on_a_node_its_volume_can_reach() {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let zone = |z: &str| Offering {
        zone: z.into(),
        ..instance_type().offerings[0].clone()
    };
    let two_zones = InstanceTypeOption {
        offerings: vec![zone("us-east-1a"), zone("us-east-1b")],
        ..instance_type()
    };
    core.set_instance_types("default", Arc::from(vec![two_zones]));
    core.apply_pod(unschedulable("web", "1"), secs(0));
    let first = created(&run_until(&mut core, 0, 2));
    assert_eq!(first.len(), 1);
    // the cloud launches it in us-east-1a: a Ready node there with a cpu to spare
    launch_and_register_zoned(&mut core, &first[0]);
    let volume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-db"},
        "spec": {
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]},
            ]}]}},
        },
    }))
    .unwrap();
    let claim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data-db", "namespace": "default"},
        "spec": {"volumeName": "pv-db", "storageClassName": "gp3"},
    }))
    .unwrap();
    for object in [
        VolumeObject::Volume(Box::new(volume)),
        VolumeObject::Claim(Box::new(claim)),
    ] {
        core.observe(Observation::Applied(Object::Volume(object)), secs(5));
    }
    let mut db = unschedulable("db", "500m");
    db.spec.as_mut().unwrap().volumes = Some(vec![
        serde_json::from_value(
            serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-db"}}),
        )
        .unwrap(),
    ]);
    core.apply_pod(db, secs(5));
    let second = created(&run_until(&mut core, 5, 8));
    assert_eq!(second.len(), 1, "a NodeClaim in us-east-1b for the pod");
    let nominated = core.cluster().pods()["default/db"].nominated.clone();
    assert_eq!(
        nominated.as_ref(),
        Some(&second[0]),
        "nominated where its volume is not"
    );
}

/// A NodePool being deleted (held while a foreground deletion takes its NodeClaims first) gets
/// no new node for a pending pod, as Karpenter's provisioner leaves such a NodePool out; the
/// same NodePool not being deleted does.
#[test]
fn a_nodepool_being_deleted_gets_no_new_node() {
    let mut going = pool();
    going.metadata = serde_yaml::from_str(
        "{name: default, deletionTimestamp: '2026-12-01T00:00:00Z', finalizers: [foregroundDeletion]}",
    )
    .expect("metadata");
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(going);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let actions = run_until(&mut core, 0, 30);
    assert!(created(&actions).is_empty(), "{actions:#?}");

    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    assert_eq!(created(&run_until(&mut core, 0, 30)).len(), 1);
}

/// A batch's NodeClaim whose launch has not answered (its create held up by a throttling API
/// server) keeps its pod: the next batch, for another pod, rehearses kube-scheduler with that
/// NodeClaim's node among the seats and makes one NodeClaim, not a second for the first pod.
#[test]
fn the_pod_of_a_nodeclaim_not_yet_launched_is_not_provisioned_for_again() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("a", "1500m"), secs(0));
    let first = created(&run_until(&mut core, 0, 2));
    assert_eq!(first.len(), 1, "one NodeClaim for the first pod");
    // no launch answers; a second pod comes, in a batch of its own
    core.apply_pod(unschedulable("b", "1500m"), secs(3));
    let second = created(&run_until(&mut core, 3, 6));
    assert_eq!(
        second.len(),
        1,
        "the first pod was provisioned for again: {second:?}"
    );
    assert!(core.cluster().nodeclaims()[&first[0]].launched.is_none());
}

#[test]
fn limits_nodes_counts_launched_and_in_flight_nodeclaims_whose_deletion_is_not_stored() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec
        .limits
        .insert("nodes".into(), kerf_api::Quantity::parse("2").unwrap());
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    // six pods that each need a node of their own (1.5 of the type's 2 cpus)
    for i in 0..6 {
        core.apply_pod(unschedulable(&format!("p{i}"), "1500m"), secs(0));
    }
    let first = run_until(&mut core, 0, 3);
    let claims = created(&first);
    assert_eq!(claims.len(), 2, "{first:?}");
    let stored = (first.into_iter())
        .find_map(|a| match a {
            Action::CreateNodeClaim(o) if o.metadata.name.as_ref() == Some(&claims[0]) => Some(*o),
            _ => None,
        })
        .expect("the first NodeClaim's object");
    // the two are in flight (not launched): still counted, so nothing more is made
    assert!(created(&run_until(&mut core, 4, 30)).is_empty());
    // launched and registered, they still count; another pod gets no node either
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    core.apply_pod(unschedulable("late", "1500m"), secs(31));
    assert!(created(&run_until(&mut core, 31, 60)).is_empty());
    // and explain names the limit
    let why = core
        .explain_pod("default/late", secs(60))
        .expect("explained")
        .to_string();
    assert!(why.contains("limit nodes=2 reached"), "{why}");
    // a deletion only asked for (its write refused, say by an outage) still counts:
    // Karpenter frees a node's share once the write that marks it has succeeded
    core.delete_nodeclaim(&claims[0], secs(60));
    let asked = run_until(&mut core, 61, 90);
    let going = core.cluster().nodeclaims().get(&claims[0]);
    assert!(going.is_some_and(|c| c.deleting.is_some()), "{asked:?}");
    assert!(created(&asked).is_empty(), "{asked:?}");
    // stored, it counts no more, as Karpenter's scheduler counts only active nodes: its
    // instance is still there, and one more NodeClaim is made at once
    store_deletion(&mut core, stored, 91);
    let after = run_until(&mut core, 91, 120);
    assert_eq!(created(&after).len(), 1, "{after:?}");
}

/// Pods nominated to a registered node and not bound yet hold its room: a pod that comes
/// while they wait for kube-scheduler gets a NodeClaim of its own, not a nomination to room
/// already promised (it would wait out the nomination window for nothing).
#[test]
fn room_promised_to_nominated_pods_on_a_registered_node_is_not_promised_again() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let _ = core.poll(secs(4));
    assert!(core.cluster().nodeclaims()[&claim].initialized);
    // x is nominated to the Ready node (2 cpus) and not bound yet when y (1.5 cpus) comes
    core.apply_pod(unschedulable("y", "1500m"), secs(5));
    let more = created(&run_until(&mut core, 5, 10));
    assert_eq!(more.len(), 1, "y was promised x's room: {more:?}");
    assert_ne!(more[0], claim);
}

/// A NodePool that Karpenter's CRD lets through but its controller refuses (a label of the
/// AWS provider's domain): no node is launched for it, and its status says why, as
/// Karpenter's `nodepool.validation` does; fixed, it launches.
#[test]
fn a_nodepool_failing_runtime_validation_launches_nothing_and_says_why() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.metadata.labels =
        BTreeMap::from([("karpenter.k8s.aws/team".to_string(), "a".to_string())]);
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let actions = run_until(&mut core, 0, 3);
    assert!(
        created(&actions).is_empty(),
        "a NodeClaim from an invalid NodePool"
    );
    let status = actions
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::PatchNodePoolStatus { status, .. } => Some(status.clone()),
            _ => None,
        })
        .expect("the NodePool's status is written");
    let of = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .cloned()
            .unwrap()
    };
    let validation = of("ValidationSucceeded");
    assert_eq!(
        (validation.status.as_str(), validation.reason.as_str()),
        ("False", "NodePoolValidationFailed")
    );
    assert!(
        validation
            .message
            .contains("spec.template.metadata.labels[karpenter.k8s.aws/team]"),
        "{}",
        validation.message
    );
    assert_eq!(of("Ready").status, "False");
    core.apply_node_pool(pool());
    assert_eq!(created(&run_until(&mut core, 4, 30)).len(), 1);
}

/// `kerf explain` tells a waiting pod's place as the provisioning pass decided it, and when,
/// even once the cluster has changed since; a pod no pass has decided about yet gets a dry
/// run of one, labelled so.
#[test]
fn explain_tells_what_the_pass_decided_and_labels_a_dry_run() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec
        .limits
        .insert("cpu".into(), kerf_api::Quantity::parse("1").unwrap());
    core.apply_node_pool(np.clone());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("web", "500m"), secs(0));
    let early = core.explain_pod("default/web", secs(0)).expect("explained");
    assert!(early.decided.is_none(), "{early}");
    assert!(
        early.to_string().contains("this is a dry run of one now"),
        "{early}"
    );
    // the pass: the limit leaves the pod pending
    assert!(created(&run_until(&mut core, 0, 5)).is_empty());
    // the limit raised, and no pass since: the pass's decision stands, with its reason
    np.spec
        .limits
        .insert("cpu".into(), kerf_api::Quantity::parse("100").unwrap());
    core.apply_node_pool(np);
    let held = core.explain_pod("default/web", secs(6)).expect("explained");
    let text = held.to_string();
    assert!(
        matches!(
            held.placement,
            kerf_core::controllers::explain::Placement::Unschedulable
        ),
        "{text}"
    );
    let decided = held.decided.as_ref().expect("decided by the pass");
    assert!(decided.ago.ends_with(" ago"), "{text}");
    assert!(text.contains("decided by the provisioning pass"), "{text}");
    assert!(text.contains("limit cpu=1 reached"), "{text}");
    // the next pass launches for it, and that is what is told
    let claims = created(&run_until(&mut core, 6, 12));
    assert_eq!(claims.len(), 1);
    let placed = core
        .explain_pod("default/web", secs(12))
        .expect("explained");
    assert!(
        matches!(&placed.placement, kerf_core::controllers::explain::Placement::Nominated { nodeclaim } if *nodeclaim == claims[0]),
        "{placed}"
    );
    assert!(placed.decided.is_some(), "{placed}");
}
