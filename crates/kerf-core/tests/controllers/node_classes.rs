//! Node classes: their instance types asked for, their status resolved, their deletion.

use std::sync::Arc;

use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::Observation;

use super::support::*;

#[test]
fn a_node_classs_instance_types_are_asked_for_once_and_their_answer_lets_its_pools_provision() {
    let mut core = Controllers::new(Settings::default(), 7);
    // a NodePool seen twice, its class's types not known: one question, and no launch
    core.apply_node_pool(pool());
    let mut edited = pool();
    edited.spec.weight = Some(5);
    core.apply_node_pool(edited);
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 15);
    assert_eq!(types_asked(&first), ["default"]);
    assert!(created(&first).is_empty(), "{first:?}");
    // the cloud answers: the pod gets its NodeClaim, and nothing is asked again
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let then = run_until(&mut core, 16, 30);
    assert_eq!(created(&then).len(), 1, "{then:?}");
    assert!(types_asked(&then).is_empty(), "{then:?}");
    // the class changes: its types are asked for again, with the class as it is now
    core.apply_node_class(node_class(&["ami-1"]));
    let changed = core.poll(secs(31));
    let spec = changed.iter().find_map(|a| match a {
        Action::ListInstanceTypes { spec, .. } => spec.as_deref(),
        _ => None,
    });
    let name = spec.and_then(|c| c.metadata.name.as_deref());
    assert_eq!(name, Some("default"), "{changed:?}");
}

#[test]
fn an_answer_for_a_class_that_changed_since_it_was_asked_is_left_for_the_fresh_one() {
    let mut core = Controllers::new(Settings::default(), 7);
    // the class is seen before its status is resolved: asked for with no subnets
    core.apply_node_class(node_class(&[]));
    core.apply_node_pool(pool());
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let asked = core.poll(secs(0));
    let stale = asked.iter().find_map(|a| match a {
        Action::ListInstanceTypes { spec, .. } => Some(spec.clone()),
        _ => None,
    });
    let stale = stale.expect("the class's types asked for");
    // its status is written (subnets resolved) while the cloud works the first answer out
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-1"], &[]));
    let answer = Observation::InstanceTypes {
        node_class: "default".into(),
        spec: stale,
        types: Arc::from(Vec::new()),
    };
    core.observe(answer, secs(1));
    // the stale answer (nothing offered in no subnet) is not taken, and the fresh ask stands
    let then = run_until(&mut core, 1, 15);
    assert_eq!(types_asked(&then), ["default"], "{then:?}");
    assert!(core.cluster().instance_types().get("default").is_none());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let launched = run_until(&mut core, 16, 30);
    assert_eq!(created(&launched).len(), 1, "{launched:?}");
}

#[test]
fn node_classes_are_resolved_on_change_and_every_minute_and_deleted_once_no_nodeclaim_uses_them() {
    let settings = Settings {
        node_class_status: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let mut class = node_class(&["ami-1"]);
    class.metadata.generation = Some(1);
    core.apply_node_class(class.clone());
    // a new class gets the finalizer and a resolution at once
    assert_eq!(
        node_class_work(&core.poll(secs(1))),
        ["finalizer default", "resolve default"]
    );
    // the cloud's answer is written with the class's generation, once
    let ready: kerf_api::ec2nodeclass::EC2NodeClassStatus = serde_json::from_value(
        serde_json::json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}),
    )
    .unwrap();
    let answer = |status| Observation::NodeClassResolved {
        node_class: "default".into(),
        status,
    };
    core.observe(answer(Ok(ready.clone())), secs(2));
    let written = core.poll(secs(2));
    assert_eq!(node_class_work(&written), ["status default Ready@Some(1)"]);
    let status = written.iter().find_map(|a| match a {
        Action::PatchNodeClassStatus { status, .. } => Some((**status).clone()),
        _ => None,
    });
    class.status = status;
    class.metadata.finalizers = Some(vec!["karpenter.k8s.aws/termination".into()]);
    core.apply_node_class(class.clone());
    // resolved for its generation: nothing until the next round, a minute after the first
    assert!(node_class_work(&run_until(&mut core, 3, 59)).is_empty());
    assert_eq!(
        node_class_work(&run_until(&mut core, 60, 61)),
        ["resolve default"]
    );
    // the same answer again writes nothing; an error is logged, not written
    core.observe(answer(Ok(ready)), secs(62));
    core.observe(answer(Err("throttled".into())), secs(62));
    let quiet = core.poll(secs(62));
    assert!(node_class_work(&quiet).is_empty(), "{quiet:?}");
    assert!(
        quiet
            .iter()
            .any(|a| matches!(a, Action::Log(r) if r.message == "failed resolving ec2nodeclass")),
        "{quiet:?}"
    );
    // deleted while a NodeClaim uses it: the class waits, and is finalized once it is gone
    core.apply_pod(unschedulable("x", "1"), secs(63));
    let claim = created(&run_until(&mut core, 63, 70))[0].clone();
    class.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    core.apply_node_class(class);
    let waiting = run_until(&mut core, 71, 100);
    assert!(node_class_work(&waiting).is_empty(), "{waiting:?}");
    assert_eq!(
        events(&waiting, "WaitingOnNodeClaimTermination"),
        [format!(
            "default: Waiting on NodeClaim termination for {claim}"
        )]
    );
    assert!(
        waiting.iter().any(
            |a| matches!(a, Action::Log(r) if r.message == "waiting on nodeclaim termination")
        )
    );
    core.delete_pod("default/x", secs(101));
    core.nodeclaim_gone(&claim);
    let gone = run_until(&mut core, 101, 115);
    assert_eq!(node_class_work(&gone), ["finalize default"], "{gone:?}");
}

#[test]
fn a_nodepools_readiness_follows_its_class_and_one_no_controller_resolves_counts_as_ready() {
    let held = |s: &str, r: &str| Some((s.to_string(), r.to_string()));
    for (resolves, want) in [
        (false, held("True", "NodeClassReady")),
        (true, held("False", "NodeClassReadinessUnknown")),
    ] {
        let settings = Settings {
            node_class_status: resolves,
            ..Settings::default()
        };
        let mut core = Controllers::new(settings, 7);
        core.apply_node_pool(pool());
        let missing = run_until(&mut core, 0, 1);
        assert_eq!(
            pool_condition(&missing, "NodeClassReady"),
            held("False", "NodeClassNotFound")
        );
        assert_eq!(
            pool_condition(&missing, "Ready"),
            held("False", "UnhealthyDependents")
        );
        // a class with no Ready yet: ready only where no controller would resolve it
        core.apply_node_class(node_class(&["ami-1"]));
        let unresolved = run_until(&mut core, 2, 3);
        assert_eq!(
            pool_condition(&unresolved, "NodeClassReady"),
            want,
            "{resolves}"
        );
        // its own Ready False, reason and all
        let mut broken = node_class(&["ami-1"]);
        broken.metadata.generation = Some(2);
        broken.status.get_or_insert_default().conditions = vec![kerf_api::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "SubnetsNotFound".into(),
            message: "no subnet".into(),
            last_transition_time: None,
            observed_generation: None,
        }];
        core.apply_node_class(broken);
        let refused = run_until(&mut core, 4, 5);
        assert_eq!(
            pool_condition(&refused, "NodeClassReady"),
            held("False", "SubnetsNotFound")
        );
    }
}
