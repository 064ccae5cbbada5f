//! The NodeClaim lifecycle: launch, registration, initialization, restarts, garbage collection and consistency.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kerf_core::cluster::{CloudInstance, DriftReason, Launched};
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::{Object, Observation};
use kerf_scheduling::resources::Resources;

use super::support::*;

#[test]
fn a_restarted_controller_learns_an_instances_network_from_the_cloud_listing() {
    let mut core = with_pool();
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-a"], &["sg-2"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    // as read back from its NodeClaim after a restart: no network, so nothing to compare
    launch_into_and_register(&mut core, &claim, Some("ami-1"), None);
    run_until(&mut core, 4, 20);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    let listed = |groups: &[&str]| CloudInstance {
        provider_id: format!("kwok://{claim}"),
        nodeclaim: claim.clone(),
        image_id: Some("ami-1".into()),
        network: Some(network("subnet-a", groups)),
        reservation: None,
    };
    // a listing without the groups says nothing about them
    core.garbage_collect(&[listed(&[])], secs(21));
    run_until(&mut core, 21, 25);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    core.garbage_collect(&[listed(&["sg-1"])], secs(26));
    run_until(&mut core, 26, 30);
    assert_eq!(
        core.cluster().nodeclaims()[&claim].drifted,
        Some(DriftReason::SecurityGroupDrift)
    );
}

#[test]
fn an_instance_named_apart_from_its_nodeclaim_is_not_an_orphan() {
    // Karpenter kwok names a node `kwok-<nodeclaim>-…`: the cloud listing cannot tell its
    // NodeClaim by name, but the NodeClaim's provider id does
    let (mut core, claim, provider_id) = one_node_up();
    let listed = CloudInstance {
        provider_id,
        nodeclaim: format!("kwok-{claim}-silly-name-1"),
        image_id: None,
        network: None,
        reservation: None,
    };
    core.garbage_collect(&[listed], secs(21));
    let actions = run_until(&mut core, 21, 25);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNode { .. } | Action::DeleteInstance { .. })),
        "{actions:?}"
    );
    assert!(core.cluster().nodeclaims().contains_key(&claim));
}

/// One NodeClaim made for a pending pod, launched and registered by 20 s: the controllers,
/// the NodeClaim's name and its instance's provider id.
fn one_node_up() -> (Controllers, String, String) {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    run_until(&mut core, 4, 20);
    let provider_id = (core.cluster().nodeclaims()[&claim].launched.as_ref())
        .expect("launched")
        .provider_id
        .clone();
    (core, claim, provider_id)
}

/// An instance whose termination Kerf asked for is no orphan while it goes: its NodeClaim's
/// finalizer may go first, and a listing asked for before the instance went still has it.
/// Listed five minutes after the ask, it is collected as any orphan.
#[test]
fn an_instance_kerf_terminated_is_not_collected_again_while_it_goes() {
    let (mut core, claim, provider_id) = one_node_up();
    core.delete_nodeclaim(&claim, secs(21));
    let terminated = run_until(&mut core, 21, 40);
    let asked = |actions: &[Action]| {
        (actions.iter())
            .filter(
                |a| matches!(a, Action::DeleteInstance { provider_id: p, .. } if *p == provider_id),
            )
            .count()
    };
    assert_eq!(asked(&terminated), 1, "{terminated:?}");
    core.nodeclaim_gone(&claim);
    let listed = CloudInstance {
        provider_id: provider_id.clone(),
        nodeclaim: claim.clone(),
        image_id: None,
        network: None,
        reservation: None,
    };
    core.garbage_collect(std::slice::from_ref(&listed), secs(41));
    let while_going = run_until(&mut core, 41, 45);
    assert_eq!(asked(&while_going), 0, "{while_going:?}");
    assert_eq!(
        logged(
            &while_going,
            "garbage collecting instance without nodeclaim"
        ),
        0
    );
    core.garbage_collect(&[listed], secs(340));
    assert_eq!(asked(&run_until(&mut core, 340, 341)), 1);
}

#[test]
fn a_nodeclaim_read_before_its_instance_types_is_priced_when_they_come() {
    // another autoscaler's NodeClaim, listed before the node class's types are known
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let object: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-k8rpt", "labels": {
            "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
            "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []},
        "status": {"providerID": "kwok://default-k8rpt"},
    }))
    .unwrap();
    core.observe(
        Observation::Applied(Object::nodeclaim(object.clone())),
        secs(0),
    );
    let price = |core: &Controllers| {
        core.cluster().nodeclaims()["default-k8rpt"]
            .launched
            .as_ref()
            .map(|l| l.price_per_hour)
    };
    assert_eq!(price(&core), Some(0.0));
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    assert_eq!(price(&core), Some(0.1));
}

/// A NodeClaim another autoscaler created and then launched while these controllers only
/// watched (a Karpenter holding the Lease): read first without an instance, then with one.
/// Its instance is taken as it is: never launched a second time, its node joined to it.
#[test]
fn a_nodeclaim_launched_by_another_writer_after_it_was_read_is_not_launched_again() {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let mut object: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-k8rpt", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []},
    }))
    .unwrap();
    core.observe(
        Observation::Applied(Object::nodeclaim(object.clone())),
        secs(0),
    );
    let labels = object.metadata.labels.get_or_insert_default();
    for (k, v) in [
        ("node.kubernetes.io/instance-type", "m5.large"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("topology.kubernetes.io/zone", "us-east-1a"),
    ] {
        labels.insert(k.into(), v.into());
    }
    object.status =
        Some(serde_json::from_value(serde_json::json!({"providerID": "kwok://other"})).unwrap());
    core.observe(Observation::Applied(Object::nodeclaim(object)), secs(1));
    let actions = run_until(&mut core, 1, 30);
    assert_eq!(launches(&actions, "default-k8rpt"), 0, "{actions:?}");
    let claim = &core.cluster().nodeclaims()["default-k8rpt"];
    assert_eq!(
        claim.launched.as_ref().map(|l| l.provider_id.as_str()),
        Some("kwok://other")
    );
}

#[test]
fn a_launch_that_failed_for_a_passing_reason_is_tried_again_with_a_backoff_and_not_given_up() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 2);
    let claim = created(&first).remove(0);
    assert_eq!(launches(&first, &claim), 1);
    // the API server went away under the launch: nothing is marked, the NodeClaim stays
    core.launch_retry(
        &claim,
        "cloud provider API: client error (Connect)",
        secs(3),
    );
    let waited = run_until(&mut core, 3, 3);
    assert_eq!(launches(&waited, &claim), 0, "{waited:?}");
    assert!(!deleted(&waited, &claim));
    assert!(!core.unavailable_offerings().is_unavailable(
        "on-demand",
        "m5.large",
        "us-east-1a",
        secs(3)
    ));
    // 1 s later it is launched again; the next failure waits 2 s
    assert_eq!(launches(&run_until(&mut core, 4, 4), &claim), 1);
    core.launch_retry(&claim, "still unreachable", secs(4));
    assert_eq!(launches(&run_until(&mut core, 5, 5), &claim), 0);
    assert_eq!(launches(&run_until(&mut core, 6, 6), &claim), 1);
    // the API server is back: it launches and registers, and no other NodeClaim was made
    launch_and_register(&mut core, &claim);
    let after = run_until(&mut core, 7, 60);
    assert!(created(&after).is_empty(), "{after:?}");
    assert!(core.cluster().nodeclaims()[&claim].registered);
}

#[test]
fn a_nodeclaim_whose_launch_keeps_failing_is_deleted_five_minutes_after_its_creation() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    core.launch_retry(&claim, "unreachable", secs(2));
    let mut all = Vec::new();
    for t in 3..=299 {
        let actions = core.poll(secs(t));
        if launches(&actions, &claim) > 0 {
            core.launch_retry(&claim, "unreachable", secs(t));
        }
        all.extend(actions);
    }
    assert!(
        launches(&all, &claim) >= 25,
        "tried again all along: {}",
        launches(&all, &claim)
    );
    assert!(!deleted(&all, &claim), "not before its launch timeout");
    let at_timeout = run_until(&mut core, 300, 305);
    assert!(deleted(&at_timeout, &claim), "{at_timeout:?}");
}

/// A create that waited its turn behind a busy API server (at 50,000 pods, creates took a
/// minute and more) does not eat into the launch's five minutes: they count from when the API
/// server stored the NodeClaim, as its watch shows it, as Karpenter's liveness counts from the
/// condition it writes on the stored object.
#[test]
fn a_nodeclaim_stored_late_counts_its_launch_timeout_from_when_it_was_stored() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let decided = run_until(&mut core, 0, 2);
    let mut object = (decided.iter())
        .find_map(|a| match a {
            Action::CreateNodeClaim(c) => Some((**c).clone()),
            _ => None,
        })
        .expect("a NodeClaim");
    let claim = object.metadata.name.clone().unwrap_or_default();
    // its launch fails for a passing reason all along, so it is never an unanswered launch
    core.launch_retry(&claim, "unreachable", secs(2));
    // the API server stored it two minutes after it was decided
    let stored = k8s_openapi::jiff::Timestamp::from_second(120).expect("a time");
    object.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(stored));
    core.observe(Observation::Applied(Object::nodeclaim(object)), secs(121));
    let mut all = Vec::new();
    for t in 3..=419 {
        let actions = core.poll(secs(t));
        if launches(&actions, &claim) > 0 {
            core.launch_retry(&claim, "unreachable", secs(t));
        }
        all.extend(actions);
    }
    assert!(
        !deleted(&all, &claim),
        "deleted within five minutes of being stored: {all:?}"
    );
    let at_timeout = run_until(&mut core, 420, 425);
    assert!(deleted(&at_timeout, &claim), "{at_timeout:?}");
}

#[test]
fn a_nodeclaim_whose_first_launch_is_still_unanswered_waits_for_it_past_the_timeout() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2);
    // both launches wait their turn behind the client's rate limit for six minutes
    let waiting = run_until(&mut core, 3, 360);
    assert!(claims.iter().all(|c| !deleted(&waiting, c)), "{waiting:?}");
    // one is answered and stays; the other's answer never comes, and it goes at ten minutes
    launch_and_register(&mut core, &claims[0]);
    let after = run_until(&mut core, 361, 610);
    assert!(!deleted(&after, &claims[0]));
    assert!(deleted(&after, &claims[1]), "{after:?}");
    assert_eq!(launches(&after, &claims[1]), 0, "never asked twice");
}

/// Garbage collection is the controllers' own timer: they ask for the cloud's instances at
/// once and every 30 seconds after, whatever shell runs them.
#[test]
fn garbage_collection_asks_for_the_instances_every_thirty_seconds() {
    let mut core = with_pool();
    let asked = |actions: &[Action]| {
        (actions.iter())
            .filter(|a| matches!(a, Action::ListInstances))
            .count()
    };
    assert_eq!(asked(&core.poll(secs(0))), 1);
    assert_eq!(asked(&run_until(&mut core, 1, 29)), 0);
    assert_eq!(asked(&run_until(&mut core, 30, 30)), 1);
    assert_eq!(asked(&run_until(&mut core, 31, 90)), 2);
}

/// A node registers with its NodeClaim's startup taints and is initialized once those are
/// gone, whatever its NodePool says by then: a NodePool changed after the NodeClaim was made
/// neither holds the node back nor lets it through early.
#[test]
fn a_node_is_initialized_by_its_nodeclaims_startup_taints_not_its_nodepools_current_ones() {
    let startup = |key: &str| kerf_api::Taint {
        key: key.into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    };
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.startup_taints = vec![startup("example.com/agent-a")];
    core.apply_node_pool(np.clone());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("web-1", "500m"), Duration::ZERO);
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(
        core.cluster().nodeclaims()[claim].registration_taints(),
        vec![
            startup("example.com/agent-a"),
            kerf_core::cluster::unregistered_taint()
        ]
    );
    // the NodePool now names another agent's taint
    np.spec.template.spec.startup_taints = vec![startup("example.com/agent-b")];
    core.apply_node_pool(np);
    launch_and_register(&mut core, claim);
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints = vec![startup("example.com/agent-a")];
    core.apply_node(claim.clone(), node.clone(), secs(5));
    run_until(&mut core, 5, 8);
    assert!(
        !core.cluster().nodeclaims()[claim].initialized,
        "initialized with its startup taint still on"
    );
    node.taints.clear();
    core.apply_node(claim.clone(), node, secs(9));
    run_until(&mut core, 9, 12);
    assert!(core.cluster().nodeclaims()[claim].initialized);
}

/// A node that registers without the `karpenter.sh/unregistered` taint (user data that does
/// not add it) is registered all the same, and its NodeClaim is told why that is a risk, in
/// Karpenter's words; one that registers with it is told nothing.
#[test]
fn a_node_registered_without_the_unregistered_taint_is_told_on_its_nodeclaim() {
    for tainted in [false, true] {
        let mut core = with_pool();
        core.apply_pod(unschedulable("x", "1"), secs(0));
        let claim = created(&run_until(&mut core, 0, 2))[0].clone();
        let taints = if tainted {
            vec![kerf_core::cluster::unregistered_taint()]
        } else {
            Vec::new()
        };
        launch_as_and_register_tainted(&mut core, &claim, instance(&claim), taints);
        let actions = run_until(&mut core, 4, 10);
        assert!(core.cluster().nodeclaims()[&claim].registered);
        let told = events(&actions, "UnregisteredTaintMissing");
        let logged = (actions.iter())
            .filter(|a| matches!(a, Action::Log(l) if l.message == "node claim registration error"))
            .count();
        if tainted {
            assert!(told.is_empty() && logged == 0, "{told:?}");
        } else {
            assert_eq!(
                told,
                [format!(
                    "{claim}: Missing karpenter.sh/unregistered taint which prevents \
                     registration related race conditions on Karpenter-managed nodes"
                )]
            );
            assert_eq!(logged, 1);
        }
    }
}

/// A Ready node still tainted `node.kubernetes.io/not-ready:NoSchedule` (the node lifecycle
/// controller has not caught up, as after an API-server restart) is not initialized: its
/// nominated pods keep it, and no NodeClaim is made for them every nomination window.
#[test]
fn a_node_still_tainted_not_ready_is_not_initialized_and_keeps_its_pods() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints = vec![kerf_api::Taint {
        key: "node.kubernetes.io/not-ready".into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    }];
    core.apply_node(claim.clone(), node.clone(), secs(4));
    let more = created(&run_until(&mut core, 4, 45));
    assert!(!core.cluster().nodeclaims()[&claim].initialized);
    assert!(
        more.is_empty(),
        "a NodeClaim while the node comes up: {more:?}"
    );
    node.taints.clear();
    core.apply_node(claim.clone(), node, secs(46));
    run_until(&mut core, 46, 48);
    assert!(core.cluster().nodeclaims()[&claim].initialized);
}

/// A launch carries what the cloud needs (the NodeClaim, its NodePool) and the offerings the
/// controllers know unavailable when they ask, so no shell reads their state back.
#[test]
fn a_launch_carries_its_nodeclaim_and_the_offerings_known_unavailable() {
    use kerf_core::controllers::lifecycle::InsufficientOffering as Refused;
    let request = |actions: &[Action]| {
        actions.iter().find_map(|a| match a {
            Action::Launch { request, .. } => Some(request.clone()),
            _ => None,
        })
    };
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 2);
    let claim = created(&first).remove(0);
    let asked = request(&first).expect("a launch");
    assert_eq!(asked.claim.instance_types, ["m5.large"]);
    assert_eq!(asked.node_pool.metadata.name.as_deref(), Some("default"));
    assert!(asked.available("on-demand", "m5.large", "us-east-1b"));
    // the cloud had none in us-east-1b: the next launch knows it
    core.launch_failed(
        &claim,
        &[Refused {
            capacity_type: "on-demand".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1b".into(),
        }],
        secs(3),
    );
    // the NodeClaim is gone, and kube-scheduler finds no node for the pod again
    run_until(&mut core, 3, 3);
    core.nodeclaim_gone(&claim);
    let mut pod = core.cluster().pods()["default/x"].object("default/x");
    kerf_core::cluster::set_pod_scheduled(&mut pod, "False", Some("Unschedulable"));
    core.apply_pod(pod, secs(4));
    let again = request(&run_until(&mut core, 4, 60)).expect("a second launch");
    assert_eq!(again.claim.instance_types, ["m5.large"]);
    assert!(!again.available("on-demand", "m5.large", "us-east-1b"));
    assert!(again.available("on-demand", "m5.large", "us-east-1a"));
}

#[test]
fn two_nodeclaims_that_never_register_make_the_nodepool_registration_unhealthy() {
    let mut core = with_pool();
    // registration health is kept for a NodePool whose class is there
    core.apply_node_class(node_class(&["ami-1"]));
    core.apply_pod(unschedulable("a", "1500m"), secs(0));
    let unknown = Some(("Unknown".to_string(), "AwaitingReconciliation".to_string()));
    let unhealthy = Some(("False".to_string(), "RegistrationFailed".to_string()));
    // each NodeClaim is launched and its node never registers: the registration timeout
    // deletes it and the pod gets another
    let mut at = 0;
    let mut seen = Vec::new();
    let mut last = None;
    for _ in 0..2 {
        let actions = run_until(&mut core, at, at + 2);
        last = registration_health(&actions).or(last);
        let claim = created(&actions).pop().expect("a NodeClaim for the pod");
        core.launched(&claim, instance(&claim), secs(at + 3));
        let waited = run_until(&mut core, at + 3, at + 16 * 60);
        let timed_out = waited.iter().any(|a| {
            matches!(a, Action::Log(r) if r.message == "deleted nodeclaim"
                && r.fields["reason"] == "registration timeout"
                && r.fields["NodeClaim"]["name"] == claim.as_str())
        });
        assert!(timed_out, "the registration timeout deleted it: {waited:?}");
        core.observe(
            Observation::Deleted {
                kind: "NodeClaim".into(),
                key: claim.clone(),
            },
            secs(at + 16 * 60),
        );
        last = registration_health(&waited).or(last);
        seen.push(last.clone());
        at += 16 * 60 + 1;
    }
    assert_eq!(
        seen[0], unknown,
        "one failure of the last four changes nothing"
    );
    assert_eq!(seen[1], unhealthy, "two do");
    // one registers: two of the last four still failed
    let actions = run_until(&mut core, at, at + 2);
    let claim = created(&actions).pop().expect("a NodeClaim for the pod");
    launch_and_register(&mut core, &claim);
    let after = run_until(&mut core, at + 3, at + 10);
    assert_eq!(registration_health(&after).or(seen[1].clone()), unhealthy);
    // the NodePool changes: Unknown until the next outcome
    let mut changed = pool();
    changed.metadata.generation = Some(2);
    changed.spec.weight = Some(10);
    core.apply_node_pool(changed);
    let reset = run_until(&mut core, at + 11, at + 12);
    assert_eq!(registration_health(&reset), unknown);
}

#[test]
fn a_registering_node_gets_its_nodeclaims_annotations_once() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut annotated = pool();
    annotated.spec.template.metadata.annotations =
        BTreeMap::from([("example.com/owner".to_string(), "payments".to_string())]);
    core.apply_node_pool(annotated);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    let labelled: Vec<BTreeMap<String, String>> = run_until(&mut core, 4, 20)
        .into_iter()
        .filter_map(|a| match a {
            Action::LabelNode { annotations, .. } => Some(annotations),
            _ => None,
        })
        .collect();
    let first = labelled
        .first()
        .expect("the node is labelled at registration");
    assert_eq!(
        first.get("example.com/owner").map(String::as_str),
        Some("payments"),
        "{first:?}"
    );
    assert!(
        first.contains_key(kerf_api::labels::NODEPOOL_HASH),
        "Karpenter's own annotations go too: {first:?}"
    );
    assert!(
        labelled[1..].iter().all(BTreeMap::is_empty),
        "copied once, at registration: {labelled:?}"
    );
}

/// The node's `karpenter.sh/initialized` label is asked for before the NodeClaim's status that
/// says `Initialized` (both go in the NodeClaim's lane, in order), as Karpenter writes them:
/// a restart between the two finds the NodeClaim not initialized and initializes it again.
#[test]
fn the_initialized_label_is_asked_before_the_status_that_says_so() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let actions = run_until(&mut core, 4, 6);
    let labelled = actions.iter().position(|a| {
        matches!(a, Action::LabelNode { labels, .. }
            if labels.get(kerf_api::labels::INITIALIZED).map(String::as_str) == Some("true"))
    });
    let initialized = actions.iter().rposition(|a| {
        matches!(a, Action::PatchNodeClaimStatus { status, .. } if status.conditions.iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True"))
    });
    assert!(
        labelled.is_some() && initialized.is_some() && labelled < initialized,
        "label at {labelled:?}, status at {initialized:?}"
    );
}

/// A NodeClaim's status says `Initialized` but its node lacks the `karpenter.sh/initialized`
/// label (taken off, or its write failed for good): a restarted controller labels the node,
/// which then counts in its NodePool's budget, and, empty, is deleted.
#[test]
fn a_restart_labels_an_initialized_nodeclaims_node_that_lacks_the_label() {
    let (mut first, mut object) = first_nodeclaim();
    let name = object.metadata.name.clone().unwrap_or_default();
    launch_and_register(&mut first, &name);
    let written = run_until(&mut first, 4, 6);
    assert!(first.cluster().nodeclaims()[&name].initialized);
    let (status, labels) = (written.into_iter().rev())
        .find_map(|a| match a {
            Action::PatchNodeClaimStatus { status, labels, .. } => Some((*status, labels)),
            _ => None,
        })
        .expect("a status written");
    object.status = Some(status);
    object
        .metadata
        .labels
        .get_or_insert_default()
        .extend(labels);
    // the node as stored: registered, but not labelled initialized
    let mut node = first.cluster().nodes()[&name].clone();
    std::sync::Arc::make_mut(&mut node.labels).remove(kerf_api::labels::INITIALIZED);
    node.nodeclaim = None;

    let mut restarted = with_pool();
    restarted.observe(Observation::Applied(Object::nodeclaim(object)), secs(10));
    restarted.apply_node(name.clone(), node, secs(10));
    let actions = run_until(&mut restarted, 10, 120);
    let labelled = actions.iter().any(|a| {
        matches!(a, Action::LabelNode { node, labels, .. } if *node == name
            && labels.get(kerf_api::labels::INITIALIZED).map(String::as_str) == Some("true"))
    });
    assert!(labelled, "{actions:#?}");
    assert!(
        (actions.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "the empty node was never deleted: {actions:#?}"
    );
}

#[test]
fn a_restart_reads_the_termination_deadline_back_from_the_nodeclaim() {
    let (_, mut object) = first_nodeclaim();
    let name = object.metadata.name.clone().unwrap_or_default();
    (object.metadata.annotations.get_or_insert_default()).insert(
        kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP.into(),
        "1970-01-01T00:10:00Z".into(),
    );
    let mut restarted = with_pool();
    restarted.observe(Observation::Applied(Object::nodeclaim(object)), secs(30));
    assert_eq!(
        restarted.cluster().nodeclaims()[&name].terminate_at,
        Some(secs(600))
    );
}

/// A node that comes up with under 90 % of a resource its NodeClaim requests, against what the
/// launch promised, is said as Karpenter's consistency check says it: a warning on the
/// NodeClaim, a log line and `ConsistentStateFound` false; said again each scan period while it
/// lasts, and true once the node reports what was promised.
#[test]
fn a_node_short_of_its_launch_fails_the_consistency_check_until_it_is_not() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    let four = Resources::from_quantities([
        (&"cpu".to_string(), "4"),
        (&"memory".to_string(), "8Gi"),
        (&"pods".to_string(), "110"),
    ]);
    let promised = Launched {
        capacity: four.clone(),
        allocatable: four.clone(),
        ..instance(&claim)
    };
    launch_as_and_register(&mut core, &claim, promised);
    core.apply_pod(bound_pod("x", &claim, "1", 0, None, None), secs(5));
    let first = run_until(&mut core, 3, 10);
    assert_eq!(
        events(&first, "FailedConsistencyCheck"),
        [format!(
            "{claim}: expected 4 of resource cpu, but found 2 (50.0% of expected)"
        )]
    );
    assert_eq!(logged(&first, "failed consistency check"), 1);
    assert_eq!(
        consistent(&first),
        Some(("False".into(), "ConsistencyCheckFailed".into()))
    );
    // said again once per ten minutes while it lasts, and the status not written again
    let later = run_until(&mut core, 11, 700);
    assert_eq!(events(&later, "FailedConsistencyCheck").len(), 1);
    assert_eq!(consistent(&later), None);
    // the node reports the promised capacity: consistent again, and nothing more is said
    let mut node = core.cluster().nodes()[&claim].clone();
    node.capacity = four.clone();
    node.allocatable = four;
    core.apply_node(claim.clone(), node, secs(701));
    let after = run_until(&mut core, 701, 1400);
    assert_eq!(
        consistent(&after),
        Some(("True".into(), "ConsistentStateFound".into()))
    );
    assert!(events(&after, "FailedConsistencyCheck").is_empty());
    assert_eq!(core.cluster().nodeclaims().len(), 1);
}

/// While the shell's watches are listing, Karpenter's cluster-state gauges say the state is
/// not synced and for how long; once they have listed, synced.
#[test]
fn the_cluster_state_reads_unsynced_while_the_watches_list() {
    let mut core = Controllers::new(Settings::default(), 7);
    core.watches_unsynced_since(Some(secs(10)));
    let text = core.render_metrics(secs(25), &[]);
    assert_eq!(gauge(&text, "karpenter_cluster_state_synced"), Some(0.0));
    assert_eq!(
        gauge(&text, "karpenter_cluster_state_unsynced_time_seconds"),
        Some(15.0)
    );
    core.watches_unsynced_since(None);
    let text = core.render_metrics(secs(30), &[]);
    assert_eq!(gauge(&text, "karpenter_cluster_state_synced"), Some(1.0));
    assert_eq!(
        gauge(&text, "karpenter_cluster_state_unsynced_time_seconds"),
        Some(0.0)
    );
}
