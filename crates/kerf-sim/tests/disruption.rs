//! Disruption scenarios in the simulator, one per behaviour, with every invariant checked.

use kerf_sim::{Report, RunOptions};
use serde_json::Value;

struct Setup<'a> {
    duration: &'a str,
    capacity_type: &'a str,
    disruption: &'a str,
    template_extra: &'a str,
    replicas: usize,
    pod_extra: &'a str,
    manifests: &'a str,
    cloud: &'a str,
    feature_gates: &'a str,
    events: &'a str,
    class_extra: &'a str,
}

const BASE: Setup<'static> = Setup {
    duration: "2h",
    capacity_type: "on-demand",
    disruption: "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}",
    template_extra: "",
    replicas: 4,
    pod_extra: "",
    manifests: "",
    cloud: "{}",
    feature_gates: "{}",
    events: "[]",
    class_extra: "",
};

fn run(s: &Setup<'_>) -> Report {
    let yaml = format!(
        r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {{name: t}}
spec:
  duration: {duration}
  cloud: {cloud}
  featureGates: {feature_gates}
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {{name: default}}
    spec:
      role: R
      amiSelectorTerms: [{{alias: al2023@latest}}]
      subnetSelectorTerms: [{{tags: {{k: v}}}}]
      securityGroupSelectorTerms: [{{tags: {{k: v}}}}]
{class_extra}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: default}}
    spec:
      disruption: {disruption}
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          requirements:
          - {{key: karpenter.sh/capacity-type, operator: In, values: [{ct}]}}
          - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}
          - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
{template_extra}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: app, namespace: default}}
    spec:
      replicas: {replicas}
      selector: {{matchLabels: {{app: app}}}}
      template:
        metadata:
          labels: {{app: app}}
{pod_extra}
        spec:
          containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
{manifests}
  events: {events}
"#,
        duration = s.duration,
        cloud = s.cloud,
        feature_gates = s.feature_gates,
        disruption = s.disruption,
        ct = s.capacity_type,
        template_extra = s.template_extra,
        replicas = s.replicas,
        pod_extra = s.pod_extra,
        manifests = s.manifests,
        events = s.events,
        class_extra = s.class_extra,
    );
    let scenario = kerf_sim::scenario::parse(&yaml, None).expect("scenario parses");
    kerf_sim::run(scenario, RunOptions::checked(), &mut |_, _, _| {})
        .expect("runs with invariants held")
}

fn minutes(e: &Value) -> f64 {
    let t = e["time"].as_str().unwrap();
    let (h, m, s): (f64, f64, f64) = (
        t[11..13].parse().unwrap(),
        t[14..16].parse().unwrap(),
        t[17..23].parse().unwrap(),
    );
    h * 60.0 + m + s / 60.0
}

fn disruptions(r: &Report) -> Vec<(f64, String)> {
    r.events
        .iter()
        .filter(|e| e["message"] == "disrupting node(s)")
        .map(|e| (minutes(e), e["command"].as_str().unwrap().to_string()))
        .collect()
}

fn scale(at: &str, n: usize) -> String {
    format!(
        "{{at: {at}, scale: {{kind: Deployment, name: app, namespace: default, replicas: {n}}}}}"
    )
}

#[test]
fn an_empty_node_is_deleted_after_consolidate_after() {
    let events = format!("[{}]", scale("10m", 0));
    let r = run(&Setup {
        disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: 5m}",
        events: &events,
        ..BASE
    });
    let d = disruptions(&r);
    assert!(!d.is_empty());
    assert!(d[0].1.starts_with("Empty/"), "{d:?}");
    assert!(d[0].0 >= 15.0, "deleted only after 5m of quiet: {d:?}");
    assert!(r.end.nodes.is_empty());
    let marked: Vec<f64> = r
        .events
        .iter()
        .filter(|e| e["message"] == "marking consolidatable")
        .map(minutes)
        .collect();
    assert!(
        marked.iter().any(|m| *m >= 15.0 && *m <= d[0].0),
        "marked once quiet for 5m, before the command: {marked:?} {d:?}"
    );
}

#[test]
fn scaling_12_5_1_consolidates_to_fewer_then_one_cheaper_node() {
    let events = format!("[{}, {}]", scale("20m", 5), scale("50m", 1));
    let r = run(&Setup {
        replicas: 12,
        events: &events,
        ..BASE
    });
    assert!(r.end.pending_pods.is_empty());
    assert_eq!(r.end.nodes.len(), 1);
    let end_price = r.end.nodes[0].price_per_hour;
    let peak = r
        .timeline
        .iter()
        .map(|s| s.cost_per_hour)
        .fold(0.0, f64::max);
    assert!(
        end_price < peak,
        "one cheaper node at the end: {end_price} vs peak {peak}"
    );
    let after_five = r
        .timeline
        .iter()
        .filter(|s| (2400.0..2900.0).contains(&s.t))
        .map(|s| s.cost_per_hour)
        .fold(f64::MAX, f64::min);
    assert!(after_five < peak, "fewer or cheaper nodes after 12 → 5");
}

#[test]
fn a_do_not_disrupt_pod_keeps_its_node() {
    let pod = r#"
  - apiVersion: v1
    kind: Pod
    metadata: {name: precious, namespace: default, annotations: {karpenter.sh/do-not-disrupt: "true"}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]"#;
    let events = format!("[{}]", scale("10m", 0));
    let r = run(&Setup {
        replicas: 3,
        manifests: pod,
        events: &events,
        ..BASE
    });
    let holder = r
        .end
        .nodes
        .iter()
        .find(|n| n.pods.contains(&"default/precious".to_string()));
    assert!(
        holder.is_some(),
        "the node with the do-not-disrupt pod stays: {:?}",
        r.end.nodes
    );
    assert!(r.events.iter().all(|e| e["Pod"] != "default/precious"));
}

#[test]
fn a_pdb_without_allowed_disruptions_keeps_its_node() {
    let pdb = r#"
  - apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: app, namespace: default}
    spec:
      minAvailable: 2
      selector: {matchLabels: {app: app}}"#;
    // two pods on what becomes an oversized node: consolidation would move them, the PDB says no
    let events = format!("[{}]", scale("10m", 2));
    let r = run(&Setup {
        replicas: 8,
        manifests: pdb,
        events: &events,
        ..BASE
    });
    assert!(r.end.pending_pods.is_empty());
    let replaced = disruptions(&r).iter().filter(|(t, _)| *t > 10.0).count();
    assert_eq!(replaced, 0, "{:?}", disruptions(&r));
}

#[test]
fn a_zero_budget_blocks_every_disruption() {
    let events = format!("[{}]", scale("10m", 0));
    let r = run(&Setup {
        disruption: r#"{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m, budgets: [{nodes: "0"}]}"#,
        events: &events,
        ..BASE
    });
    assert!(disruptions(&r).is_empty());
    assert!(!r.end.nodes.is_empty());
}

#[test]
fn a_budget_window_blocks_only_inside_its_schedule() {
    // no disruption from 00:00 to 01:00 UTC each day; the node empties at 10m
    let events = format!("[{}]", scale("10m", 0));
    let r = run(&Setup {
        disruption: r#"{consolidationPolicy: WhenEmpty, consolidateAfter: 1m, budgets: [{nodes: "0", schedule: "0 0 * * *", duration: 1h}]}"#,
        events: &events,
        ..BASE
    });
    let d = disruptions(&r);
    assert!(!d.is_empty());
    assert!(d[0].0 >= 60.0, "waited for the window to close: {d:?}");
    assert!(r.end.nodes.is_empty());
}

#[test]
fn expire_after_replaces_nodes() {
    let r = run(&Setup {
        template_extra: "          expireAfter: 30m",
        ..BASE
    });
    let expired: Vec<f64> = r
        .events
        .iter()
        .filter(|e| e["message"] == "deleting expired nodeclaim")
        .map(minutes)
        .collect();
    assert!(!expired.is_empty() && expired[0] >= 30.0, "{expired:?}");
    assert!(r.totals.nodes_launched >= 2);
    assert!(r.end.pending_pods.is_empty());
}

#[test]
fn changing_a_requirement_drifts_and_replaces_the_nodes() {
    let apply = r#"[{at: 20m, apply: {apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: default}, spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}, {key: karpenter.k8s.aws/instance-category, operator: In, values: [r]}, {key: kubernetes.io/arch, operator: In, values: [amd64]}]}}}}}]"#;
    let r = run(&Setup {
        events: apply,
        ..BASE
    });
    assert!(
        r.events
            .iter()
            .any(|e| { e["message"] == "marking drifted" && e["reason"] == "RequirementsDrifted" })
    );
    assert!(
        disruptions(&r)
            .iter()
            .any(|(_, c)| c.starts_with("Drifted/"))
    );
    assert!(!r.end.nodes.is_empty());
    for n in &r.end.nodes {
        assert!(
            n.instance_type.starts_with('r'),
            "replaced onto the new requirement: {}",
            n.instance_type
        );
    }
    assert!(r.end.pending_pods.is_empty());
}

#[test]
fn a_spot_interruption_replaces_the_node_and_leaves_nothing_pending() {
    let r = run(&Setup {
        capacity_type: "spot",
        cloud: "{spotInterruptions: [{at: 30m, count: 1}]}",
        ..BASE
    });
    assert_eq!(deleted_for(&r, "spot_interrupted").len(), 1);
    assert!(r.totals.pods_evicted > 0);
    assert!(r.end.pending_pods.is_empty());
    assert!(!r.end.nodes.is_empty());
    assert!(
        r.totals.max_pod_pending_seconds < 120.0,
        "replacement capacity came before the reclaim"
    );
}

#[test]
fn when_empty_never_removes_a_non_empty_node() {
    let events = format!("[{}]", scale("10m", 1));
    let r = run(&Setup {
        replicas: 8,
        disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: 1m}",
        events: &events,
        ..BASE
    });
    for (_, c) in disruptions(&r) {
        assert!(c.starts_with("Empty/"), "{c}");
    }
    assert!(!r.end.nodes.is_empty());
}

/// The node named by the `initiating delete from interruption message` line of a kind.
fn deleted_for(r: &Report, kind: &str) -> Vec<String> {
    r.events
        .iter()
        .filter(|e| {
            e["message"] == "initiating delete from interruption message"
                && e["messageKind"] == kind
        })
        .map(|e| e["Node"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The owner of an interruptible capacity reservation takes one instance's capacity back:
/// the node is drained and deleted at once (as Karpenter's AWS provider does, with its
/// `CapacityReservationInstanceInterrupted` event), and its pods land on on-demand capacity
/// rather than on the reservation that lost it.
#[test]
fn a_capacity_reservation_interruption_replaces_the_node_off_the_reservation() {
    let r = run(&Setup {
        capacity_type: "reserved, on-demand",
        class_extra: "      capacityReservationSelectorTerms: [{id: cr-0000000000000aaaa}]",
        cloud: "{reservations: [{id: cr-0000000000000aaaa, instanceType: m5.xlarge, zone: us-east-1a, count: 2, interruptible: true}], notices: [{at: 30m, kind: capacityReservationInterruption}]}",
        disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}",
        replicas: 6,
        ..BASE
    });
    let gone = deleted_for(&r, "capacity_reservation_interrupted");
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(r.end.nodes.iter().all(|n| n.name != gone[0]));
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);
    let reserved = (r.end.nodes.iter())
        .filter(|n| n.capacity_type == "reserved")
        .count();
    assert_eq!(reserved, 1, "{:?}", r.end.nodes);
    assert!(r.end.nodes.iter().any(|n| n.capacity_type == "on-demand"));
}

#[test]
fn scheduled_maintenance_replaces_the_node_before_it_goes() {
    let r = run(&Setup {
        cloud: "{notices: [{at: 30m, kind: scheduledChange}]}",
        disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}",
        ..BASE
    });
    let gone = deleted_for(&r, "scheduled_change");
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(r.end.nodes.iter().all(|n| n.name != gone[0]));
    assert!(!r.end.nodes.is_empty());
    assert!(r.end.pending_pods.is_empty());
    assert!(r.totals.pods_evicted > 0);
}

#[test]
fn stopped_and_terminated_instances_are_deleted_and_their_pods_rescheduled() {
    for (kind, message_kind) in [
        ("stopping", "instance_stopped"),
        ("terminated", "instance_terminated"),
    ] {
        let cloud = format!("{{notices: [{{at: 30m, kind: {kind}}}]}}");
        let r = run(&Setup {
            cloud: &cloud,
            ..BASE
        });
        let gone = deleted_for(&r, message_kind);
        assert_eq!(gone.len(), 1, "{kind}: {gone:?}");
        assert!(r.end.nodes.iter().all(|n| n.name != gone[0]), "{kind}");
        assert!(r.end.pending_pods.is_empty(), "{kind}");
    }
}

#[test]
fn rebalance_recommendations_are_logged_and_change_nothing() {
    let quiet = "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}";
    let with = run(&Setup {
        cloud: "{notices: [{at: 30m, kind: rebalance, count: 5}]}",
        disruption: quiet,
        ..BASE
    });
    let without = run(&Setup {
        disruption: quiet,
        ..BASE
    });
    assert!(with.events.iter().any(|e| {
        e["message"] == "received interruption message"
            && e["messageKind"] == "rebalance_recommendation"
    }));
    assert!(deleted_for(&with, "rebalance_recommendation").is_empty());
    assert_eq!(with.end.nodes.len(), without.end.nodes.len());
    assert_eq!(with.totals.pods_evicted, 0);
}

#[test]
fn a_requirement_the_nodes_still_meet_does_not_drift_them() {
    let apply = r#"[{at: 20m, apply: {apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: default}, spec: {disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}, template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}, {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}, {key: kubernetes.io/arch, operator: In, values: [amd64]}]}}}}}]"#;
    let r = run(&Setup {
        events: apply,
        ..BASE
    });
    assert!(!r.events.iter().any(|e| e["message"] == "marking drifted"));
    assert!(
        disruptions(&r)
            .iter()
            .all(|(_, c)| !c.starts_with("Drifted/"))
    );
}

#[test]
fn changing_the_node_class_drifts_and_replaces_its_nodes() {
    let apply = r#"[{at: 20m, apply: {apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: default}, spec: {role: R, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {k: v}}], securityGroupSelectorTerms: [{tags: {k: v}}], tags: {team: payments}}}}]"#;
    let r = run(&Setup {
        events: apply,
        ..BASE
    });
    let drifted: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e["message"] == "marking drifted")
        .collect();
    assert!(!drifted.is_empty());
    assert!(drifted.iter().all(|e| e["reason"] == "NodeClassDrift"));
    let replaced: Vec<String> = drifted
        .iter()
        .map(|e| e["NodeClaim"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(r.end.nodes.iter().all(|n| !replaced.contains(&n.nodeclaim)));
    assert!(!r.end.nodes.is_empty());
    assert!(r.end.pending_pods.is_empty());
}

#[test]
fn spot_nodes_are_replaced_by_cheaper_spot_only_behind_the_feature_gate() {
    // ten pods fill a spot node; at 10m one is left, and a much smaller spot node would do
    let events = format!("[{}]", scale("10m", 1));
    let replaced = |gates: &str| {
        let r = run(&Setup {
            capacity_type: "spot",
            replicas: 10,
            feature_gates: gates,
            events: &events,
            ..BASE
        });
        disruptions(&r)
            .iter()
            .any(|(_, c)| c.starts_with("Underutilized/") && c.contains("-> [1 replacement]"))
    };
    assert!(!replaced("{}"), "spot-to-spot is off by default");
    assert!(replaced("{SpotToSpotConsolidation: true}"));
}

#[test]
fn a_node_whose_replacement_keeps_failing_waits_longer_each_time() {
    // spot runs out for two hours: the pods land on on-demand, and consolidation keeps
    // wanting the cheaper spot node whose launch fails
    let r = run(&Setup {
        duration: "4h",
        capacity_type: "spot, on-demand",
        cloud: "{insufficientCapacity: [{capacityType: spot, from: 0s, until: 2h}]}",
        ..BASE
    });
    let failed: Vec<f64> = (r.events.iter())
        .filter(|e| e["message"] == "failed disrupting node(s)")
        .map(minutes)
        .collect();
    // without the backoff: one failure every few minutes (the unavailable-offerings memory)
    assert!(
        (2..=6).contains(&failed.len()),
        "failed replacements at minutes {failed:?}"
    );
    for pair in failed.windows(3) {
        let (first, second) = (pair[1] - pair[0], pair[2] - pair[1]);
        assert!(
            second >= 1.5 * first,
            "waits do not grow: failures at minutes {failed:?}"
        );
    }
    // spot back, the node is replaced in the end
    assert!(
        (r.end.nodes.iter()).all(|n| n.capacity_type == "spot"),
        "{:?}",
        r.end.nodes
    );
}

/// Drifted nodes holding every slot of a reserved-only NodePool's capacity reservation: no
/// replacement can launch beside them, so with `TerminateFirstDrift` each is deleted first
/// (Karpenter's `no-reserved-capacity`) and provisioning launches into the slot it frees;
/// without the gate they stay drifted. The reservation is never overfilled (an invariant of
/// every checked run).
#[test]
fn drifted_nodes_in_a_full_capacity_reservation_are_deleted_first_behind_the_gate() {
    let apply = r#"[{at: 20m, apply: {apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: default}, spec: {role: R, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {k: v}}], securityGroupSelectorTerms: [{tags: {k: v}}], capacityReservationSelectorTerms: [{id: cr-0000000000000aaaa}], tags: {team: payments}}}}]"#;
    let run_with = |gates: &str, capacity_type: &str| {
        run(&Setup {
            capacity_type,
            class_extra: "      capacityReservationSelectorTerms: [{id: cr-0000000000000aaaa}]",
            cloud: "{reservations: [{id: cr-0000000000000aaaa, instanceType: m5.xlarge, zone: us-east-1a, count: 2}]}",
            disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}",
            replicas: 6,
            feature_gates: gates,
            events: apply,
            ..BASE
        })
    };
    let drifted = |r: &Report| -> Vec<String> {
        (r.events.iter())
            .filter(|e| e["message"] == "marking drifted")
            .map(|e| e["NodeClaim"]["name"].as_str().unwrap().to_string())
            .collect()
    };

    let r = run_with("{TerminateFirstDrift: true}", "reserved");
    let first = drifted(&r);
    assert_eq!(first.len(), 2, "{first:?}");
    let commands = disruptions(&r);
    let terminated: Vec<&(f64, String)> = (commands.iter())
        .filter(|(_, c)| c.starts_with("Drifted/") && c.contains(": terminate-first: "))
        .collect();
    assert_eq!(terminated.len(), 2, "{commands:?}");
    assert!(
        terminated.iter().all(|(_, c)| !c.contains("replacement")),
        "{terminated:?}"
    );
    // replaced on the reservation, one at a time, and nothing left waiting
    let reserved: Vec<&str> = (r.end.nodes.iter())
        .filter(|n| n.capacity_type == "reserved")
        .map(|n| n.nodeclaim.as_str())
        .collect();
    assert_eq!(reserved.len(), 2, "{:?}", r.end.nodes);
    assert!(
        reserved.iter().all(|c| !first.contains(&c.to_string())),
        "{reserved:?}"
    );
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);

    // where on-demand may take the pods, the nodes are replaced first, gate or not
    let r = run_with("{TerminateFirstDrift: true}", "reserved, on-demand");
    let commands = disruptions(&r);
    assert!(
        commands
            .iter()
            .any(|(_, c)| c.starts_with("Drifted/") && c.contains(": replace: ")),
        "{commands:?}"
    );
    assert!(
        commands.iter().all(|(_, c)| !c.contains("terminate-first")),
        "{commands:?}"
    );

    // without the gate nothing can replace them: they stay, drifted
    let r = run_with("{}", "reserved");
    let held = drifted(&r);
    assert!(
        disruptions(&r)
            .iter()
            .all(|(_, c)| !c.starts_with("Drifted/")),
        "{:?}",
        disruptions(&r)
    );
    let left: Vec<&str> = r.end.nodes.iter().map(|n| n.nodeclaim.as_str()).collect();
    assert!(
        held.iter().all(|c| left.contains(&c.as_str())),
        "{held:?} {left:?}"
    );
}

/// An on-demand capacity reservation ends: its instances run on as on-demand, so their
/// NodeClaims and Nodes are relabelled `on-demand` (the reservation's labels off), as
/// Karpenter's `capacitytype` controller does, and not drifted and replaced.
#[test]
fn nodes_of_an_ended_reservation_are_relabelled_on_demand_not_replaced() {
    let r = run(&Setup {
        capacity_type: "reserved, on-demand",
        class_extra: "      capacityReservationSelectorTerms: [{id: cr-0000000000000aaaa}]",
        cloud: "{reservations: [{id: cr-0000000000000aaaa, instanceType: m5.xlarge, zone: us-east-1a, count: 2, end: 30m}]}",
        disruption: "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}",
        replicas: 6,
        duration: "1h",
        ..BASE
    });
    let reserved_before: Vec<String> = (r.events.iter())
        .filter(|e| e["message"] == "launched nodeclaim" && e["capacity-type"] == "reserved")
        .map(|e| e["NodeClaim"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reserved_before.len(), 2, "{:?}", r.events);
    let relabelled: Vec<&Value> = (r.events.iter())
        .filter(|e| e["message"] == "updated capacity type for nodeclaims")
        .collect();
    assert!(!relabelled.is_empty(), "never relabelled");
    let at = minutes(relabelled[0]);
    assert!((30.0..31.5).contains(&at), "relabelled at {at} minutes");
    let drifted = (r.events.iter())
        .filter(|e| e["message"] == "marking drifted")
        .count();
    assert_eq!(drifted, 0, "drifted after the reservation ended");
    // the same nodes at the end, on-demand now
    for claim in &reserved_before {
        let node = r.end.nodes.iter().find(|n| n.nodeclaim == *claim);
        let node = node.unwrap_or_else(|| panic!("{claim} replaced: {:?}", r.end.nodes));
        assert_eq!(node.capacity_type, "on-demand", "{node:?}");
    }
}
