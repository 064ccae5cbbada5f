//! CapacityBuffers (Karpenter's `CapacityBuffer` gate): spare room provisioned, kept from
//! consolidation, given to real pods and refilled, and let go with the buffer.

use std::sync::Arc;

use kerf_api::capacitybuffer::{CapacityBufferStatus, LocalObjectRef};
use kerf_api::cluster_read::{Gaps, Read};
use kerf_api::{CapacityBuffer, CapacityBufferSpec};
use kerf_core::buffers::Template;
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::{Object, Observation};

use crate::support::*;

/// A buffer `team/spare` of `replicas` chunks shaped as PodTemplate `team/chunk` (1 cpu).
fn buffer(core: &mut Controllers, replicas: i32, at: u64) {
    let template = serde_json::from_value(serde_json::json!({
        "metadata": {"labels": {"app": "spare"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }))
    .unwrap();
    let template = Box::new(Template {
        generation: 1,
        replicas: 0,
        template,
    });
    let key = "team/chunk".to_string();
    core.observe(
        Observation::Applied(Object::PodTemplate { key, template }),
        secs(at),
    );
    let mut b = CapacityBuffer::new(
        "spare",
        CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef {
                name: "chunk".into(),
            }),
            replicas: Some(replicas),
            ..CapacityBufferSpec::default()
        },
    );
    b.metadata.namespace = Some("team".into());
    b.metadata.uid = Some("u".into());
    b.metadata.generation = Some(1);
    let read = Read {
        object: Ok(b),
        gaps: Gaps::default(),
    };
    let object = Object::CapacityBuffer(Arc::new(read));
    core.observe(Observation::Applied(object), secs(at));
}

/// Each status written for the buffer: its replicas and (type, status, reason, message) of
/// each condition.
fn statuses(actions: &[Action]) -> Vec<CapacityBufferStatus> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::PatchCapacityBufferStatus { buffer, status } if buffer == "team/spare" => {
                Some((**status).clone())
            }
            _ => None,
        })
        .collect()
}

fn condition(status: &CapacityBufferStatus, kind: &str) -> Option<(String, String, String)> {
    (status.conditions.iter())
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn gate_on() -> Controllers {
    let settings = Settings {
        capacity_buffer: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core
}

#[test]
fn a_buffer_is_provisioned_kept_from_consolidation_refilled_and_let_go() {
    let mut core = gate_on();
    buffer(&mut core, 2, 0);
    let actions = run_until(&mut core, 0, 2);
    let written = statuses(&actions);
    let first = &written[0];
    assert_eq!(first.replicas, Some(2));
    assert_eq!(first.pod_template_ref.as_ref().unwrap().name, "chunk");
    assert_eq!(
        condition(first, "ReadyForProvisioning").unwrap(),
        (
            "True".into(),
            "Resolved".into(),
            "Pod template resolved successfully".into()
        )
    );
    // two chunks of 1 cpu take one 2-cpu node, made for them
    let claims = created(&actions);
    assert_eq!(claims.len(), 1, "{actions:?}");
    let last = written.last().unwrap();
    assert_eq!(
        condition(last, "Provisioning").unwrap(),
        (
            "False".into(),
            "RequiresNewCapacity".into(),
            "2/2 virtual pods required new capacity, 0 failed".into()
        )
    );
    let held = claims[0].clone();
    launch_and_register(&mut core, &held);
    // the regular look finds the chunks on the node; consolidation leaves the node, which
    // holds no real pod, and says why
    let actions = run_until(&mut core, 3, 120);
    assert!(created(&actions).is_empty(), "{actions:?}");
    assert_eq!(
        condition(statuses(&actions).last().unwrap(), "Provisioning").unwrap(),
        (
            "True".into(),
            "FitsExistingCapacity".into(),
            "All 2 virtual pods fit on existing capacity".into()
        )
    );
    assert!(
        !actions.iter().any(|a| matches!(
            a,
            Action::DeleteNodeClaim { .. } | Action::Disrupting { .. }
        )),
        "the buffer's node was disrupted: {actions:?}"
    );
    let said = format!("{held}: Node {held:?} has buffer pods");
    assert!(
        events(&actions, "Unconsolidatable").contains(&said),
        "{:?}",
        events(&actions, "Unconsolidatable")
    );
    // a real pod lands in the room: the buffer is placed again at once, on a new node
    core.apply_pod(bound_pod("x", &held, "1", 0, Some("rs"), None), secs(121));
    let actions = run_until(&mut core, 121, 125);
    assert_eq!(
        created(&actions).len(),
        1,
        "the buffer refilled: {actions:?}"
    );
    // the buffer goes: its node is the cluster's to consolidate again
    let refill = created(&actions)[0].clone();
    launch_and_register(&mut core, &refill);
    core.observe(
        Observation::Deleted {
            kind: "CapacityBuffer".into(),
            key: "team/spare".into(),
        },
        secs(130),
    );
    let actions = run_until(&mut core, 130, 400);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == refill)),
        "the empty node stays after its buffer went: {actions:?}"
    );
}

#[test]
fn real_pods_take_the_room_first_and_a_buffer_that_fits_nowhere_says_so() {
    let mut core = gate_on();
    let mut np = pool();
    np.spec.limits = serde_json::from_value(serde_json::json!({"cpu": "2"})).unwrap();
    core.apply_node_pool(np);
    // a pending 1-cpu pod and a buffer of three chunks within a NodePool limit of 2 cpu: the
    // real pod's node is made, one chunk takes the room left, two fit nowhere
    core.apply_pod(unschedulable("x", "1"), secs(0));
    buffer(&mut core, 3, 0);
    let actions = run_until(&mut core, 0, 2);
    let claims = created(&actions);
    assert_eq!(claims.len(), 1, "{actions:?}");
    let nominated = events(&actions, "Nominated");
    assert!(
        nominated.iter().any(|e| e.starts_with("default/x:")),
        "{nominated:?}"
    );
    launch_and_register(&mut core, &claims[0]);
    let actions = run_until(&mut core, 3, 40);
    assert!(created(&actions).is_empty(), "{actions:?}");
    let last = statuses(&actions).last().cloned().unwrap();
    assert_eq!(
        condition(&last, "Provisioning").unwrap().2,
        "0/3 virtual pods required new capacity, 2 failed"
    );
}
