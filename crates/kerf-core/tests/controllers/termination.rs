//! Termination: drains, evictions, termination deadlines and volumes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::Observation;

use super::support::*;

/// A NodePool whose terminationGracePeriod is `grace` seconds, and one node of it launched and
/// registered for the pending pod `default/x`; the node's NodeClaim's name.
fn node_with_grace_period(grace: u64) -> (Controllers, String) {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.termination_grace_period =
        Some(kerf_api::duration::GoDuration(Duration::from_secs(grace)));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    (core, claim)
}

/// A NodeClaim given a deadline for its pods says when they all go. Karpenter keys this
/// event on the bare name of the object, so its Node, named as the NodeClaim here (as kwok
/// names them), is told nothing more within the repeat window.
#[test]
fn a_termination_deadline_is_told_once_for_a_nodeclaim_and_its_node_of_one_name() {
    let (mut core, claim) = node_with_grace_period(3600);
    run_until(&mut core, 5, 6);
    core.delete_nodeclaim(&claim, secs(6));
    let told = events(
        &run_until(&mut core, 7, 8),
        "TerminationGracePeriodExpiring",
    );
    let by = format!("All pods will be deleted by {}", "1970-01-01T01:00:06Z");
    assert_eq!(told, [format!("{claim}: {by}")], "{told:?}");
}

#[test]
fn an_eviction_that_did_not_happen_is_asked_again_by_the_drain() {
    let mut core = with_pool();
    drained_with_pod(&mut core, |p| p);
    let first = evicted(&run_until(&mut core, 6, 8));
    assert_eq!(first, ["default/x"]);
    // asked once: while the pod is on its way out, it is not asked again
    assert!(evicted(&run_until(&mut core, 9, 20)).is_empty());
    // the eviction never happened (the API server was down): asked again
    core.eviction_refused("default/x", Some(500));
    assert_eq!(evicted(&run_until(&mut core, 21, 30)), ["default/x"]);
}

/// The `Evicted` Event on a pod, as Karpenter publishes it: once the API server took the
/// eviction, and once per pod however often a refused eviction is asked again.
#[test]
fn a_pod_is_told_of_its_eviction_once_the_api_server_took_it() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    let told = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Event(e) if e.reason == "Evicted"))
            .count()
    };
    let first = run_until(&mut core, 6, 8);
    assert_eq!(evicted(&first), ["default/x"]);
    assert_eq!(told(&first), 0, "announced before the API server answered");
    core.eviction_refused("default/x", Some(429));
    let again = run_until(&mut core, 9, 20);
    assert_eq!(evicted(&again), ["default/x"]);
    assert_eq!(told(&again), 0);
    // the drain's wait is said on the node once: the budget's refusal after it is held back
    // for two minutes, as Karpenter's recorder dedupes a failed drain on its node alone
    assert_eq!(
        events(&first, "FailedDraining"),
        [format!(
            "{claim}: Failed to drain node, 1 pods are waiting to be evicted"
        )]
    );
    assert!(events(&again, "FailedDraining").is_empty());
    core.evicted("default/x");
    let after = run_until(&mut core, 21, 22);
    assert_eq!(told(&after), 1);
    let Some(Action::Event(e)) = after.iter().find(|a| matches!(a, Action::Event(_))) else {
        unreachable!()
    };
    assert_eq!(e.name, "default/x");
    assert!(e.message.starts_with("Evicted pod: "), "{}", e.message);
    let text = core.render_metrics(secs(22), &[]);
    for line in [
        "karpenter_pods_eviction_requests_total{code=\"429\"} 1",
        "karpenter_pods_eviction_requests_total{code=\"200\"} 1",
    ] {
        assert!(text.contains(line), "no {line} in:\n{text}");
    }
    assert!(core.cluster().nodeclaims().contains_key(&claim));
}

/// A pod already on its way out when its node drains (evicted by an operator that was
/// then restarted, or deleted by its owner) is waited for, not evicted again (Karpenter
/// evicts no terminating pod).
#[test]
fn a_terminating_pod_on_a_draining_node_is_waited_for_not_evicted() {
    let mut core = with_pool();
    drained_with_pod(&mut core, |mut p| {
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(4).unwrap(),
        ));
        p
    });
    let actions = run_until(&mut core, 6, 20);
    assert!(evicted(&actions).is_empty(), "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNode { .. })),
        "the node went with a pod still on it"
    );
}

/// Karpenter's termination taints a node, then drains it: no pod is evicted while the
/// taint is only asked for (a write refused or not yet seen would let the evicted pods'
/// replacements be bound right back).
#[test]
fn the_drain_evicts_only_once_the_disrupted_taint_is_stored() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut bound = unschedulable("x", "1");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(4));
    let _ = core.poll(secs(5));
    core.delete_nodeclaim(&claim, secs(5));
    // the taint's write never lands: polled without storing it, nothing is evicted
    let asked: Vec<Action> = (6..=20).flat_map(|t| core.poll(secs(t))).collect();
    let taints = asked
        .iter()
        .filter(|a| matches!(a, Action::Taint { .. }))
        .count();
    assert_eq!(taints, 1, "asked once: {asked:?}");
    assert!(evicted(&asked).is_empty(), "{asked:?}");
    // once stored, the drain goes on
    store_taint(
        &mut core,
        &claim,
        &kerf_core::cluster::disrupted_taint(),
        21,
    );
    assert_eq!(evicted(&run_until(&mut core, 21, 23)), ["default/x"]);
}

/// A StatefulSet makes an evicted pod again under the same name at once: when that new pod's
/// node is drained later, it is evicted too (it is not the pod asked to leave before).
#[test]
fn a_pod_made_again_under_an_evicted_pods_name_is_evicted_when_its_node_drains() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("db-0", "1"), secs(0));
    let first = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &first);
    let on = |node: &str, uid: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "default", "uid": uid, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s",
                 "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    };
    core.apply_pod(on(&first, "a"), secs(4));
    let _ = core.poll(secs(5));
    core.delete_nodeclaim(&first, secs(5));
    assert_eq!(evicted(&run_until(&mut core, 6, 8)), ["default/db-0"]);
    // the StatefulSet controller makes db-0 again, on a second node
    core.delete_pod("default/db-0", secs(9));
    core.apply_pod(unschedulable("db-0", "1"), secs(9));
    let second = created(&run_until(&mut core, 9, 12))
        .into_iter()
        .find(|c| *c != first)
        .expect("a second nodeclaim");
    launch_and_register(&mut core, &second);
    core.apply_pod(on(&second, "b"), secs(14));
    let _ = core.poll(secs(15));
    core.delete_nodeclaim(&second, secs(15));
    assert_eq!(evicted(&run_until(&mut core, 16, 20)), ["default/db-0"]);
}

/// The last status a NodeClaim gets before its finalizer goes says `Drained` True (Karpenter
/// writes it before the volumes and the instance), though the instance goes in the same poll.
#[test]
fn a_drained_nodeclaims_last_status_says_drained() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let actions = run_until(&mut core, 9, 20);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ReleaseNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "the NodeClaim's finalizer goes"
    );
    let last = last_status(&actions, &claim).expect("a status written");
    let drained = last.conditions.iter().find(|c| c.type_ == "Drained");
    assert_eq!(
        drained.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("True", "Drained")),
        "{last:?}"
    );
}

/// A registering node is given Karpenter's termination finalizer; when someone deletes the
/// Node (`kubectl delete node`), which the finalizer holds, its NodeClaim is deleted and the
/// node drained, and only then is the Node deleted (the finalizer released with it).
#[test]
fn a_deleted_node_is_held_by_its_finalizer_while_it_drains() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let registered = run_until(&mut core, 4, 5);
    assert!(
        (registered.iter()).any(|a| matches!(a,
            Action::LabelNode { node, finalizer: true, .. } if *node == claim)),
        "{registered:?}"
    );
    let mut bound = unschedulable("x", "1");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(5));
    // the API server marks the Node deleted; its finalizer keeps it
    let mut node = core.cluster().nodes()[&claim].clone();
    node.finalizer = true;
    node.deleting = true;
    core.apply_node(claim.clone(), node, secs(6));
    let draining = run_until(&mut core, 6, 10);
    assert!(
        (draining.iter())
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "{draining:?}"
    );
    assert_eq!(evicted(&draining), ["default/x"]);
    assert!(
        !(draining.iter()).any(|a| matches!(a, Action::DeleteNode { .. })),
        "the node went before its pods: {draining:?}"
    );
    core.evicted("default/x");
    core.delete_pod("default/x", secs(11));
    let done = run_until(&mut core, 11, 13);
    assert!(
        (done.iter()).any(|a| matches!(a, Action::DeleteNode { node } if *node == claim)),
        "{done:?}"
    );
}

/// A drained node whose persistent volume is still attached waits for it, as Karpenter's
/// termination waits: the Node is told `AwaitingVolumeDetachment` (once, whatever the
/// retries), `VolumesDetached` is Unknown, and neither the Node nor the instance goes until
/// the VolumeAttachment does; an inline volume's attachment is not waited for. Then
/// `VolumesDetached` is True and the node, the instance and the NodeClaim go.
#[test]
fn a_drained_node_waits_for_its_volumes_to_be_detached() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    core.observe(attachment(&claim, "csi-data", Some("pv-data")), secs(5));
    core.observe(attachment(&claim, "csi-inline", None), secs(5));
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let waiting = run_until(&mut core, 9, 30);
    assert!(!termination_ended(&waiting), "{waiting:?}");
    assert_eq!(
        events(&waiting, "AwaitingVolumeDetachment"),
        [format!(
            "{claim}: Awaiting deletion of bound volumeattachments (csi-data)"
        )],
        "{waiting:?}"
    );
    let awaiting = ("Unknown".into(), "AwaitingVolumeDetachment".into());
    assert_eq!(volumes_detached(&waiting, &claim), Some(awaiting));
    let (kind, key) = ("VolumeAttachment".to_string(), "/csi-data".to_string());
    core.observe(Observation::Deleted { kind, key }, secs(31));
    let done = run_until(&mut core, 31, 33);
    assert!(termination_ended(&done), "{done:?}");
    let detached = ("True".into(), "VolumesDetached".into());
    assert_eq!(volumes_detached(&done, &claim), Some(detached));
}

/// At the NodeClaim's termination time its instance goes though a volume is still
/// attached, and `VolumesDetached` says False: `TerminationGracePeriodElapsed`.
#[test]
fn at_the_termination_time_the_instance_goes_with_volumes_still_attached() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.termination_grace_period =
        Some(kerf_api::duration::GoDuration(Duration::from_secs(60)));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let claim = drained_with_pod(&mut core, |p| p);
    core.observe(attachment(&claim, "csi-data", Some("pv-data")), secs(5));
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let waiting = run_until(&mut core, 9, 60);
    assert!(!termination_ended(&waiting), "{waiting:?}");
    let done = run_until(&mut core, 61, 70);
    assert!(termination_ended(&done), "{done:?}");
    let elapsed = ("False".into(), "TerminationGracePeriodElapsed".into());
    assert_eq!(volumes_detached(&done, &claim), Some(elapsed));
}

/// A pod whose own grace period would outlast its node's termination time is deleted when
/// what is left of the node's time equals it, whatever holds it (here do-not-disrupt), with
/// that time as its grace period, and told `Disrupted`, as Karpenter's drain does.
#[test]
fn a_pod_whose_grace_period_would_outlast_the_node_is_deleted_in_time() {
    let (mut core, _) = outlasting_pod_on_deleted_node(|pod| {
        pod.metadata.annotations = Some(BTreeMap::from([(
            "karpenter.sh/do-not-disrupt".to_string(),
            "true".to_string(),
        )]));
    });
    let deletes = |actions: &[Action]| -> Vec<(String, Option<i64>)> {
        (actions.iter())
            .filter_map(|a| match a {
                Action::DeletePod { pod, grace_seconds } => Some((pod.clone(), *grace_seconds)),
                Action::Evict { pod } => Some((pod.clone(), None)),
                _ => None,
            })
            .collect()
    };
    // the node goes at 306 s: until 186 s the pod keeps its do-not-disrupt
    let before = run_until(&mut core, 7, 186);
    assert!(deletes(&before).is_empty(), "{:?}", deletes(&before));
    let after = run_until(&mut core, 187, 190);
    assert_eq!(deletes(&after), [("default/x".to_string(), Some(119))]);
    assert_eq!(
        events(&after, "Disrupted"),
        [
            "default/x: Deleting the pod to accommodate the terminationTime 1970-01-01 00:05:06 \
          +0000 UTC of the node. The pod was granted 119 seconds of grace-period of its 120 \
          terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
          do-not-disrupt annotation."
        ]
    );
}

/// Once a drained NodeClaim's finalizer is released, a drain that comes due afterwards (here
/// the round kept for a pod's grace period) does nothing while the release waits behind other
/// writes: no second node deletion, instance termination or `deleted nodeclaim`. A NodeClaim
/// still there two minutes after its release is released again, and nothing else.
#[test]
fn a_released_nodeclaim_is_not_terminated_twice() {
    // the pod outlasts the node's 300 s unless evicted: a drain round is kept for 186 s
    let (mut core, claim) = outlasting_pod_on_deleted_node(|_| {});
    assert_eq!(evicted(&run_until(&mut core, 6, 8)), ["default/x"]);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let count = |actions: &[Action]| {
        let n = |f: &dyn Fn(&Action) -> bool| actions.iter().filter(|a| f(a)).count();
        (
            n(&|a| matches!(a, Action::Log(r) if r.message == "deleted nodeclaim")),
            n(&|a| matches!(a, Action::DeleteNode { .. })),
            n(&|a| matches!(a, Action::DeleteInstance { .. })),
            n(&|a| matches!(a, Action::ReleaseNodeClaim { .. })),
        )
    };
    assert_eq!(count(&run_until(&mut core, 9, 12)), (1, 1, 1, 1));
    // the release has not been seen yet: the round due at 186 s finds nothing to do
    assert_eq!(count(&run_until(&mut core, 13, 200)), (0, 0, 0, 1));
    core.observe(
        Observation::Deleted {
            kind: "NodeClaim".into(),
            key: claim.clone(),
        },
        secs(201),
    );
    assert_eq!(count(&run_until(&mut core, 201, 600)), (0, 0, 0, 0));
}

/// A NodeClaim released and then seen gone is not made anew by an older update of it (its
/// deletion under way, its finalizer still on) from a watch running behind: in a 50,000-pod
/// scale-in, 1,418 NodeClaims were terminated a second time so, 18 minutes after they went.
#[test]
fn a_nodeclaim_seen_gone_is_not_made_anew_by_an_older_update() {
    let (mut core, object) = first_nodeclaim();
    let claim = object.metadata.name.clone().unwrap();
    launch_and_register(&mut core, &claim);
    run_until(&mut core, 4, 5);
    core.delete_nodeclaim(&claim, secs(6));
    let done = run_until(&mut core, 6, 12);
    assert!(
        (done.iter())
            .any(|a| matches!(a, Action::ReleaseNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "{done:?}"
    );
    core.observe(
        Observation::Deleted {
            kind: "NodeClaim".into(),
            key: claim.clone(),
        },
        secs(13),
    );
    // the watch, behind, delivers the NodeClaim as it was while it was being deleted
    store_deletion(&mut core, object, 14);
    let again = run_until(&mut core, 14, 300);
    assert!(
        !(again.iter()).any(|a| matches!(
            a,
            Action::ReleaseNodeClaim { .. }
                | Action::DeleteNode { .. }
                | Action::DeleteInstance { .. }
                | Action::DeleteNodeClaim { .. }
        ) || matches!(a, Action::Log(r) if r.message == "deleted nodeclaim")),
        "{again:?}"
    );
    assert!(!core.cluster().nodeclaims().contains_key(&claim));
}

/// A NodePool with a 300 s terminationGracePeriod, one node of it with pod `default/x` bound
/// (a terminationGracePeriodSeconds of 120, then `edit`), and the node's NodeClaim deleted
/// at 6 s; the NodeClaim's name.
fn outlasting_pod_on_deleted_node(edit: impl FnOnce(&mut Pod)) -> (Controllers, String) {
    let (mut core, claim) = node_with_grace_period(300);
    let mut pod = bound_pod("x", &claim, "1", 0, Some("rs"), None);
    pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(120);
    edit(&mut pod);
    core.apply_pod(pod, secs(5));
    run_until(&mut core, 5, 6);
    core.delete_nodeclaim(&claim, secs(6));
    (core, claim)
}
