//! Kerf crashing and starting again (`spec.operatorRestarts`): the new controllers learn the
//! cluster from its objects alone, and every launch, deadline and disruption carries on.

use std::time::Duration;

use kerf_api::duration::GoDuration;
use kerf_sim::{Report, RunOptions, Scenario};
use serde_json::Value;

fn getting_started(restarts: &[u64]) -> Scenario {
    let mut s = kerf_sim::load("getting-started").expect("built-in scenario loads");
    s.spec.operator_restarts = restarts
        .iter()
        .map(|secs| GoDuration(Duration::from_secs(*secs)))
        .collect();
    s
}

fn run(s: Scenario) -> Report {
    kerf_sim::run(s, RunOptions::checked(), &mut |_, _, _| {}).expect("runs with invariants held")
}

fn logged<'r>(r: &'r Report, message: &str) -> Vec<&'r Value> {
    r.events
        .iter()
        .filter(|e| e["message"] == message)
        .collect()
}

#[test]
fn a_restart_between_launch_and_registration_keeps_the_registration_deadline() {
    // the first NodeClaim launches at 00:01:01 and its instance never registers; Kerf restarts
    // at 00:01:10, before the node could have joined
    let mut s = getting_started(&[70]);
    s.spec.cloud.faults.never_register = 1.0;
    let r = run(s);
    assert_eq!(r.totals.operator_restarts, 1);
    let first = logged(&r, "launched nodeclaim")[0]["NodeClaim"]["name"].clone();
    let timed_out: Vec<&Value> = logged(&r, "deleted nodeclaim")
        .into_iter()
        .filter(|e| e["reason"] == "registration timeout")
        .collect();
    let deadline = timed_out
        .iter()
        .find(|e| e["NodeClaim"]["name"] == first)
        .unwrap_or_else(|| panic!("{first} was given up on after the restart"));
    assert_eq!(
        deadline["time"], "2026-01-01T00:16:01.000Z",
        "15 minutes from its creation, not from the restart"
    );
}

#[test]
fn a_restart_while_a_consolidation_waits_for_validation_decides_it_again() {
    // at 00:16:00 Kerf decides to remove the first node and validates the decision 15 s
    // later; the restart at 00:16:05 loses the decision, and the new controllers make it again
    let baseline = run(getting_started(&[]));
    let restarted = run(getting_started(&[965]));
    let disrupted = |r: &Report| -> Vec<String> {
        logged(r, "disrupting node(s)")
            .iter()
            .map(|e| e["command"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(disrupted(&baseline).len(), 2);
    assert_eq!(
        disrupted(&restarted).len(),
        2,
        "{:?}",
        disrupted(&restarted)
    );
    assert_eq!(
        restarted.totals.nodes_launched,
        baseline.totals.nodes_launched
    );
    assert_eq!(restarted.end.nodes.len(), 0);
    let decided = logged(&restarted, "disrupting node(s)")[0]["time"].clone();
    assert_ne!(
        decided,
        logged(&baseline, "disrupting node(s)")[0]["time"],
        "the restart cost the decision its validation wait"
    );
}

#[test]
fn a_restart_during_a_drain_finishes_it() {
    // a PodDisruptionBudget allowing no disruption keeps one node draining until the
    // NodePool's terminationGracePeriod (5m) runs out; Kerf restarts in the middle, and the
    // node still goes when the grace period that began before the restart ends
    let mut s = getting_started(&[]);
    let pool = s
        .spec
        .manifests
        .iter_mut()
        .find(|m| m["kind"] == "NodePool")
        .unwrap();
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "5m".into();
    pool["spec"]["template"]["spec"]["expireAfter"] = "20m".into();
    s.spec.manifests.push(serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "inflate"}}},
    }));
    s.spec
        .events
        .retain(|e| e.at.0 < Duration::from_secs(15 * 60));
    let expired_at = |r: &Report| {
        let claim = logged(r, "deleting expired nodeclaim")[0]["NodeClaim"]["name"].clone();
        let gone = logged(r, "deleted nodeclaim")
            .into_iter()
            .find(|e| e["NodeClaim"]["name"] == claim)
            .expect("the expired node goes")["time"]
            .clone();
        (claim, gone)
    };
    let baseline = expired_at(&run(s.clone()));
    // expiry at 00:21:01; the grace period ends at 00:26:01, when the pods (whose own grace
    // period is 0 s) are deleted, and the node goes with them
    s.spec.operator_restarts = vec![GoDuration(Duration::from_secs(23 * 60))];
    let restarted = expired_at(&run(s));
    assert_eq!(baseline.1, "2026-01-01T00:26:01.001Z");
    assert_eq!(restarted, baseline);
}
