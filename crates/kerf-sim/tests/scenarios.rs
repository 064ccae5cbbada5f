//! The built-in scenarios run with every invariant checked, and their outcomes are what a
//! Karpenter user expects; the same scenario and seed give the same bytes.

use std::time::Duration;

use kerf_sim::{Report, RunOptions};
use serde_json::Value;

fn run(name: &str) -> Report {
    let scenario = kerf_sim::load(name).expect("built-in scenario loads");
    kerf_sim::run(scenario, RunOptions::checked(), &mut |_, _, _| {})
        .expect("runs with invariants held")
}

fn minutes(record: &Value) -> f64 {
    // "2026-01-01THH:MM:SS.mmmZ" within the first day
    let t = record["time"].as_str().unwrap();
    let (h, m, s): (f64, f64, f64) = (
        t[11..13].parse().unwrap(),
        t[14..16].parse().unwrap(),
        t[17..23].parse().unwrap(),
    );
    h * 60.0 + m + s / 60.0
}

fn created_by_pool(report: &Report) -> Vec<(f64, String)> {
    report
        .events
        .iter()
        .filter(|e| e["message"] == "created nodeclaim")
        .map(|e| {
            (
                minutes(e),
                e["NodePool"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn spot_fallback_uses_on_demand_while_spot_is_out_and_spot_again_after() {
    let r = run("spot-fallback");
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    let launched: Vec<(f64, String)> = r
        .events
        .iter()
        .filter(|e| e["message"] == "launched nodeclaim")
        .map(|e| (minutes(e), e["capacity-type"].as_str().unwrap().to_string()))
        .collect();
    // before the crunch: spot; during it (20m–50m): only on-demand; after: spot again
    assert!(
        launched.iter().any(|(t, ct)| *t < 20.0 && ct == "spot"),
        "{launched:?}"
    );
    let during: Vec<_> = launched
        .iter()
        .filter(|(t, _)| (20.0..50.0).contains(t))
        .collect();
    assert!(
        !during.is_empty() && during.iter().all(|(_, ct)| ct == "on-demand"),
        "{during:?}"
    );
    assert!(
        launched.iter().any(|(t, ct)| *t >= 50.0 && ct == "spot"),
        "{launched:?}"
    );
    // the fallback pool served the crunch
    assert!(
        created_by_pool(&r)
            .iter()
            .any(|(t, p)| (20.0..50.0).contains(t) && p == "batch-fallback")
    );
    assert!(
        r.events
            .iter()
            .any(|e| e["message"] == "failed launching nodeclaim")
    );
    // once spot is back, consolidation moves the work off the on-demand fallback node
    assert!(
        r.end.nodes.iter().all(|n| n.nodepool == "batch"),
        "{:?}",
        r.end.nodes
    );
    assert!(
        r.end
            .nodes
            .iter()
            .all(|n| (n.nodepool == "batch") == (n.capacity_type == "spot"))
    );
}

#[test]
fn every_spot_request_refused_falls_back_within_seconds_as_on_aws() {
    // the numbers the AWS path is held to (crates/kerf-operator/tests/aws.rs, seed 000 with
    // every spot CreateFleet refused): the fallback within 15 s of the first refusal, after at
    // most 3 refused NodeClaims
    let r = run("spot-refused");
    let at = |message: &str, pool: Option<&str>| -> Vec<f64> {
        r.events
            .iter()
            .filter(|e| e["message"] == message)
            // a NodeClaim is named for its NodePool and a suffix
            .filter(|e| {
                let claim = e["NodeClaim"]["name"].as_str().unwrap_or_default();
                pool.is_none_or(|p| claim.rsplit_once('-').is_some_and(|(of, _)| of == p))
            })
            .map(|e| minutes(e) * 60.0)
            .collect()
    };
    let failed = at("failed launching nodeclaim", None);
    let fallback = at("launched nodeclaim", Some("batch-fallback"));
    let (first_failure, first_fallback) = (failed[0], fallback[0]);
    assert!(
        first_fallback - first_failure <= 15.0,
        "{first_failure} s, {first_fallback} s"
    );
    let before = failed.iter().filter(|t| **t <= first_fallback).count();
    assert!((1..=3).contains(&before), "{failed:?}");
    // spot is back at 8m; it is tried again once the refusals age out, and the pods end on it
    let spot = at("launched nodeclaim", Some("batch"));
    assert!(spot.iter().all(|t| *t >= 8.0 * 60.0), "{spot:?}");
    assert!(!spot.is_empty());
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    assert!(
        r.end
            .nodes
            .iter()
            .all(|n| n.nodepool == "batch" && n.capacity_type == "spot"),
        "{:?}",
        r.end.nodes
    );
}

#[test]
fn getting_started_inflate_gets_a_node_within_a_minute() {
    let r = run("getting-started");
    assert!(r.end.pending_pods.is_empty());
    assert!(
        r.totals.max_pod_pending_seconds < 60.0,
        "{}",
        r.totals.max_pod_pending_seconds
    );
    assert!(
        r.end
            .nodes
            .iter()
            .all(|n| n.capacity_type == "on-demand" && n.nodepool == "default")
    );
    let first = r
        .events
        .iter()
        .find(|e| e["message"] == "computed new nodeclaim(s) to fit pod(s)")
        .unwrap();
    assert_eq!(first["pods"], 5);
    assert_eq!(first["nodeclaims"], 1);
    // 5 and then 30 one-cpu pods: at least 35 vCPU launched
    let messages: Vec<&str> = r
        .events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    for m in [
        "found provisionable pod(s)",
        "created nodeclaim",
        "launched nodeclaim",
        "registered nodeclaim",
        "initialized nodeclaim",
    ] {
        assert!(messages.contains(&m), "{m} missing");
    }
}

#[test]
fn the_day_ends_with_every_pod_placed_and_batch_on_its_own_pools() {
    let r = run("day");
    assert!(r.end.pending_pods.is_empty());
    for n in &r.end.nodes {
        let batch = n.pods.iter().any(|p| p.starts_with("batch/"));
        let web = n.pods.iter().any(|p| p.starts_with("shop/"));
        assert!(
            !(batch && web),
            "{} mixes tainted batch and web pods",
            n.name
        );
        if batch {
            assert!(n.nodepool.starts_with("batch"));
        }
    }
    assert!(
        r.totals.pods_evicted > 0,
        "the interruptions reclaimed nodes with pods"
    );
    assert!(r.totals.spot_node_seconds_share > 0.0);
    assert_eq!(r.timeline.first().unwrap().t, 0.0);
    assert_eq!(
        r.timeline.last().unwrap().t,
        Duration::from_secs(24 * 3600).as_secs_f64()
    );
}

#[test]
fn same_scenario_and_seed_give_the_same_bytes() {
    let a = serde_json::to_string(&run("day")).unwrap();
    let b = serde_json::to_string(&run("day")).unwrap();
    assert_eq!(a, b);
    let mut other = kerf_sim::load("day").unwrap();
    other.spec.seed = 2;
    let c = kerf_sim::run(other, RunOptions::checked(), &mut |_, _, _| {}).unwrap();
    assert_ne!(
        a,
        serde_json::to_string(&c).unwrap(),
        "the seed changes names and choices"
    );
}

#[test]
fn every_built_in_costs_at_least_its_lower_bound() {
    for name in ["getting-started", "spot-fallback", "day"] {
        let r = run(name);
        let (cost, floor) = (r.totals.cost, r.totals.lower_bound_cost);
        assert!(
            floor > 0.0,
            "{name}: a workload that requests something has a floor"
        );
        assert!(
            floor <= cost,
            "{name}: cost ${cost:.2} below the floor ${floor:.2}"
        );
    }
}

#[test]
fn the_seed_drives_delays_and_injected_faults_not_just_names() {
    let totals = |seed: u64| {
        let mut s = kerf_sim::load("getting-started").unwrap();
        s.spec.seed = seed;
        s.spec.cloud.launch_jitter = kerf_api::duration::GoDuration(Duration::from_secs(20));
        s.spec.cloud.ready_jitter = kerf_api::duration::GoDuration(Duration::from_secs(10));
        s.spec.cloud.faults.never_register = 0.5;
        let r = kerf_sim::run(s, RunOptions::checked(), &mut |_, _, _| {}).unwrap();
        (
            r.totals.faults_injected,
            r.totals.max_pod_pending_seconds,
            r.totals.nodes_launched,
        )
    };
    let runs: Vec<_> = (1..=4).map(totals).collect();
    assert_eq!(runs[0], totals(1), "the same seed gives the same run");
    assert!(
        runs.iter().any(|r| r != &runs[0]),
        "other seeds draw other delays and faults: {runs:?}"
    );
    assert!(
        runs.iter().any(|r| r.0 > 0),
        "half the launches never register: {runs:?}"
    );
}

#[test]
fn node_repair_replaces_a_node_that_never_reports_ready_and_without_it_the_node_stays() {
    let run = |repair: bool| {
        let mut s = kerf_sim::load("getting-started").unwrap();
        s.spec.seed = 7;
        s.spec.cloud.faults.never_ready = 0.3;
        s.spec.feature_gates.node_repair = repair;
        kerf_sim::run(s, RunOptions::checked(), &mut |_, _, _| {}).unwrap()
    };
    let repaired = run(true);
    assert!(repaired.totals.faults_injected > 0, "seed 7 draws a fault");
    let repairs = |r: &Report| -> Vec<Value> {
        (r.events.iter())
            .filter(|e| e["message"] == "disrupting node(s)" && e["reason"] == "unhealthy")
            .cloned()
            .collect()
    };
    let deleted = repairs(&repaired);
    assert_eq!(
        deleted.len(),
        repaired.totals.faults_injected,
        "{deleted:?}"
    );
    let registered = |r: &Report, node: &Value| {
        r.events
            .iter()
            .find(|e| e["message"] == "registered nodeclaim" && &e["Node"]["name"] == node)
            .map(minutes)
            .expect("the node registered")
    };
    for d in &deleted {
        // Ready never came: the toleration counts from registration, and a pass follows
        // within ten seconds
        let node = &d["disrupted-nodes"][0]["Node"]["name"];
        let waited = minutes(d) - registered(&repaired, node);
        assert!((30.0..=30.0 + 10.0 / 60.0).contains(&waited), "{waited}");
    }
    assert!(repaired.end.pending_pods.is_empty());

    let kept = run(false);
    assert_eq!(kept.totals.faults_injected, repaired.totals.faults_injected);
    assert!(
        repairs(&kept).is_empty(),
        "NodeRepair is off by default, as in Karpenter"
    );
    assert!(kept.totals.nodes_terminated < repaired.totals.nodes_terminated);
}

/// A node monitoring agent's fault, as a scenario event: a fatal XID error is repaired after
/// ten minutes with a five-minute drain bound; a condition no policy watches is left alone.
#[test]
fn an_accelerator_fault_is_repaired_after_its_toleration_and_an_unwatched_condition_is_not() {
    let run = |kind: &str, reason: &str| {
        let mut s = kerf_sim::load("getting-started").unwrap();
        s.spec.feature_gates.node_repair = true;
        let event: kerf_sim::scenario::Event = serde_json::from_value(serde_json::json!({
            "at": "5m",
            "nodeCondition": {"type": kind, "status": "False", "reason": reason},
        }))
        .unwrap();
        s.spec.events.insert(0, event);
        kerf_sim::run(s, RunOptions::checked(), &mut |_, _, _| {}).unwrap()
    };
    let faulty = run("AcceleratedHardwareReady", "NvidiaXID79Error");
    assert_eq!(faulty.totals.faults_injected, 1);
    let selected: Vec<&Value> = (faulty.events.iter())
        .filter(|e| e["message"] == "selected repair policy")
        .collect();
    assert_eq!(selected.len(), 1, "{selected:?}");
    let s = selected[0];
    assert_eq!(s["condition"], "AcceleratedHardwareReady");
    assert_eq!(s["reason-regex"], ".*XID(64|74|79|119|120).*");
    assert_eq!(s["termination-grace-period"], "5m0s");
    let decided = (faulty.events.iter())
        .find(|e| e["message"] == "disrupting node(s)" && e["reason"] == "unhealthy")
        .expect("a repair command");
    // due ten minutes after the fault, and a pass follows within ten seconds
    assert!(
        (15.0..=15.0 + 10.0 / 60.0).contains(&minutes(decided)),
        "{decided}"
    );
    assert!(
        faulty.metrics.contains(
            "karpenter_nodeclaims_unhealthy_disrupted_total{capacity_type=\"on-demand\",condition=\"accelerated_hardware_ready\""
        ),
        "{}",
        faulty.metrics
    );
    assert!(faulty.end.pending_pods.is_empty());

    let pressure = run("DiskPressure", "KubeletHasDiskPressure");
    assert_eq!(pressure.totals.faults_injected, 1);
    assert!(
        !(pressure.events.iter()).any(|e| e["message"] == "selected repair policy"),
        "no repair policy watches DiskPressure"
    );
}

#[test]
fn api_server_outages_lose_no_nodeclaim_and_make_none_twice() {
    let r = run("api-outage");
    let at = |message: &str| -> Vec<(f64, String)> {
        r.events
            .iter()
            .filter(|e| e["message"] == message)
            .map(|e| {
                let claim = e["NodeClaim"]["name"].as_str().unwrap_or_default();
                (minutes(e) * 60.0, claim.to_string())
            })
            .collect()
    };
    // the NodeClaim for the 40 pods was created once, as the first outage began; the
    // instance was launched only after the API server stored it (after 81 s), within the
    // writes' backoff (at most 10 s between tries, a conflict or two on the way)
    let created = at("created nodeclaim");
    let first: Vec<_> = created.iter().filter(|(t, _)| *t < 300.0).collect();
    assert_eq!(first.len(), 1, "{created:?}");
    let launched = at("launched nodeclaim");
    let (t, claim) = &launched[0];
    assert_eq!(claim, &first[0].1);
    assert!((81.0..=120.0).contains(t), "launched at {t} s");
    // the consolidation caught by the second outage finished: one small node for the 2 pods,
    // and only its replacement was launched (the command the outage refused the marks of
    // deleted the replacement it had asked for, which the API server never stored)
    assert_eq!(launched.len(), 2, "{launched:?}");
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    assert_eq!(r.end.nodes.len(), 1, "{:?}", r.end.nodes);
    assert_eq!(r.end.nodes[0].nodeclaim, launched[1].1);
    assert!(r.totals.api_writes_failed > 0);
}

#[test]
fn reservations_fill_first_never_overfill_and_blocks_drain_forty_minutes_before_their_end() {
    let r = run("reservations");
    let launched: Vec<&Value> = (r.events.iter())
        .filter(|e| e["message"] == "launched nodeclaim")
        .collect();
    let reserved = |t: &str| {
        (launched.iter())
            .filter(|e| e["capacity-type"] == "reserved" && e["instance-type"] == t)
            .map(|e| minutes(e))
            .collect::<Vec<f64>>()
    };
    // the ODCR's two and the block's one, first of all, at the start; the other pods on spot
    assert_eq!(reserved("m5.2xlarge").len(), 2, "{launched:?}");
    assert_eq!(reserved("c5.4xlarge").len(), 1, "{launched:?}");
    assert!(reserved("m5.2xlarge").iter().all(|t| *t < 1.0));
    let first_spot = (launched.iter())
        .filter(|e| e["capacity-type"] == "spot")
        .map(|e| minutes(e))
        .fold(f64::MAX, f64::min);
    assert!(first_spot < 1.0, "{first_spot}");
    // the block's NodeClaim goes at 20m, 40 minutes before its end at 1h
    let expired: Vec<f64> = (r.events.iter())
        .filter(|e| e["message"] == "initiating delete for capacity block expiration")
        .map(minutes)
        .collect();
    assert_eq!(expired, [20.0], "{expired:?}");
    // the ODCR dropped from the class at 45m: its two nodes drift and are replaced
    let drifted = (r.events.iter())
        .filter(|e| e["message"] == "marking drifted" && e["reason"] == "CapacityReservationDrift")
        .count();
    assert_eq!(drifted, 2);
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    assert!(
        r.end.nodes.iter().all(|n| n.capacity_type != "reserved"),
        "{:?}",
        r.end.nodes
    );
}

#[test]
fn volumes_bring_their_pods_back_to_their_zone_and_attachments_size_the_nodes() {
    let r = run("volumes");
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    let zone_of = |pod: &str| {
        (r.end.nodes.iter())
            .find(|n| n.pods.iter().any(|p| p == pod))
            .map(|n| n.zone.clone())
    };
    // the cache's class provisions only in us-east-1c
    for i in 0..3 {
        assert_eq!(
            zone_of(&format!("default/cache-{i}")).as_deref(),
            Some("us-east-1c")
        );
    }
    // thirty collectors, 26 EBS attachments per m5.xlarge: two nodes, neither over 26
    let logs: Vec<usize> = (r.end.nodes.iter())
        .filter(|n| n.nodepool == "logs")
        .map(|n| n.pods.len())
        .collect();
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs.iter().all(|n| *n <= 26), "{logs:?}");
    // consolidation moved database pods, and each came back to its volume's zone: the
    // simulated kube-scheduler binds a pod only where its volume is (nothing is pending)
    assert!(r.totals.pods_evicted > 0);
}

/// Karpenter's perf-suite "Basic Deployment" mix (150 pods of 900m/3100Mi, 150 of
/// 3500m/28Gi) on on-demand c/m/r types under 32 cpu, bound by a kube-scheduler that ignores
/// Kerf's nominations, as the real one does.
const BASIC_DEPLOYMENT: &str = r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {name: basic-deployment}
spec:
  duration: 10m
  kubeScheduler: {ignoreNominations: true}
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      role: KarpenterNodeRole-demo
      amiSelectorTerms: [{alias: al2023@latest}]
      subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
      securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
          - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["32"]}
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: small, namespace: default}
    spec:
      replicas: 0
      selector: {matchLabels: {app: small}}
      template:
        metadata: {labels: {app: small}}
        spec:
          containers: [{name: c, image: pause, resources: {requests: {cpu: 900m, memory: 3100Mi}}}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: large, namespace: default}
    spec:
      replicas: 0
      selector: {matchLabels: {app: large}}
      template:
        metadata: {labels: {app: large}}
        spec:
          containers: [{name: c, image: pause, resources: {requests: {cpu: 3500m, memory: 28Gi}}}]
  events:
  - {at: 1m, scale: {kind: Deployment, name: small, namespace: default, replicas: 150}}
  - {at: 1m, scale: {kind: Deployment, name: large, namespace: default, replicas: 150}}
"#;

/// The Basic Deployment mix lands in one wave: every NodeClaim of the scale-out is created in
/// the one batch, though kube-scheduler places the pods its own way, and every pod is bound.
#[test]
fn the_basic_deployment_mix_lands_in_one_wave_under_a_kube_scheduler_of_its_own_mind() {
    let scenario = kerf_sim::scenario::parse(BASIC_DEPLOYMENT, None).expect("parses");
    let r = kerf_sim::run(scenario, RunOptions::checked(), &mut |_, _, _| {})
        .expect("runs with invariants held");
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    let waves: std::collections::BTreeSet<String> = (r.events.iter())
        .filter(|e| e["message"] == "created nodeclaim")
        .filter(|e| minutes(e) < 3.0)
        .map(|e| e["time"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(waves.len(), 1, "NodeClaims created at {waves:?}");
}
