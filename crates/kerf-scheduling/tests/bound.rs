//! The cost lower bound on small problems whose optimum is known by hand, and kept bounds
//! given again only while their inputs are the same.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{NodeSelectorRequirementWithMinValues, Operator, labels};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{
    Catalog, CostBound, InstanceTypeOption, NodePoolInput, NodeSize, Offering, Problem, cost_bound,
    solve,
};
use serde_json::json;

/// A type with `cpu` cores and `gib` GiB, offered on demand at `on_demand` and as spot at
/// `spot` (when given), in one zone.
fn instance_type(
    name: &str,
    cpu: u32,
    gib: u32,
    on_demand: f64,
    spot: Option<f64>,
) -> InstanceTypeOption {
    let resources = Resources::from_quantities([
        (&"cpu".to_string(), cpu.to_string().as_str()),
        (&"memory".to_string(), format!("{gib}Gi").as_str()),
        (&"pods".to_string(), "110"),
    ]);
    let offering = |capacity_type: &str, price| Offering {
        zone: "zone-a".into(),
        capacity_type: capacity_type.into(),
        price_per_hour: price,
        available: true,
        reservation: None,
    };
    let mut offerings = vec![offering("on-demand", on_demand)];
    offerings.extend(spot.map(|p| offering("spot", p)));
    InstanceTypeOption {
        name: name.into(),
        labels: [(labels::INSTANCE_TYPE.to_string(), name.to_string())]
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
            .into(),
        capacity: resources.clone(),
        allocatable: resources,
        offerings,
    }
}

fn pool(
    name: &str,
    weight: i32,
    types: &Arc<[InstanceTypeOption]>,
    cpu_limit: Option<i64>,
) -> NodePoolInput {
    NodePoolInput {
        name: name.into(),
        weight,
        labels: Default::default(),
        requirements: vec![NodeSelectorRequirementWithMinValues {
            key: labels::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec!["on-demand".into(), "spot".into()],
            min_values: None,
        }],
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: cpu_limit
            .map(|c| [("cpu".to_string(), c * 1000)].into())
            .unwrap_or_default(),
        usage: Default::default(),
        nodes: 0,
        instance_types: types.clone(),
        largest: None,
    }
}

fn pods(n: usize, cpu: &str, memory: &str, selector: serde_json::Value) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("p{i}-{cpu}-{memory}"), "namespace": "default"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                         "nodeSelector": selector},
            }))
            .unwrap()
        })
        .collect()
}

fn bound(pools: &[NodePoolInput], pods: &[Pod]) -> f64 {
    let pods: Vec<&Pod> = pods.iter().collect();
    let b = cost_bound(&Problem::new(pools, &pods), &mut Catalog::default()).unwrap();
    assert_eq!(b.unplaceable, 0);
    b.per_hour
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn pods_cost_at_least_their_resources_at_the_cheapest_rate_a_type_sells_them() {
    // 2 cpu for $0.10 beats 4 cpu for $0.30: four 1-cpu pods need at least two small nodes
    let types: Arc<[InstanceTypeOption]> = vec![
        instance_type("small", 2, 8, 0.10, None),
        instance_type("large", 4, 16, 0.30, None),
    ]
    .into();
    let b = bound(
        &[pool("default", 0, &types, None)],
        &pods(4, "1", "1Gi", json!({})),
    );
    assert!(close(b, 0.20), "{b}");
}

#[test]
fn cpu_and_memory_heavy_pods_share_a_balanced_type() {
    // cpu-heavy and memory-heavy pods fill a balanced type together: 2 × (2 cpu, 2 GiB)
    // + 2 × (0.5 cpu, 6 GiB) = 5 cpu, 16 GiB, on 4-cpu/16-GiB nodes at $0.20 and
    // 8-cpu/8-GiB ones at $0.20: memory needs one big-memory node, cpu 5/8 of another...
    let types: Arc<[InstanceTypeOption]> = vec![
        instance_type("balanced", 4, 16, 0.20, None),
        instance_type("compute", 8, 8, 0.20, None),
    ]
    .into();
    let mut all = pods(2, "2", "2Gi", json!({}));
    all.extend(pods(2, "500m", "6Gi", json!({})));
    let b = bound(&[pool("default", 0, &types, None)], &all);
    // the LP: x_b·4 + x_c·8 ≥ 5 cpu, x_b·16 + x_c·8 ≥ 16 GiB, min 0.2(x_b + x_c):
    // x_b = 11/12, x_c = 1/6 → $0.2167
    assert!(close(b, 0.2 * (11.0 / 12.0 + 1.0 / 6.0)), "{b}");
    // and the solver's decision is never below it
    let refs: Vec<&Pod> = all.iter().collect();
    let types_pool = [pool("default", 0, &types, None)];
    let d = solve(&Problem::new(&types_pool, &refs));
    assert!(d.cost_per_hour() >= b - 1e-9, "{} < {b}", d.cost_per_hour());
}

#[test]
fn a_pod_that_asks_for_on_demand_is_priced_on_demand() {
    let types: Arc<[InstanceTypeOption]> =
        vec![instance_type("small", 2, 8, 0.10, Some(0.03))].into();
    let pools = [pool("default", 0, &types, None)];
    let spot = bound(&pools, &pods(2, "1", "1Gi", json!({})));
    assert!(close(spot, 0.03), "{spot}");
    let on_demand = bound(
        &pools,
        &pods(2, "1", "1Gi", json!({labels::CAPACITY_TYPE: "on-demand"})),
    );
    assert!(close(on_demand, 0.10), "{on_demand}");
}

#[test]
fn weights_are_hard_unless_limits_can_send_pods_on() {
    let dear: Arc<[InstanceTypeOption]> = vec![instance_type("dear", 2, 8, 0.40, None)].into();
    let cheap: Arc<[InstanceTypeOption]> = vec![instance_type("cheap", 2, 8, 0.10, None)].into();
    let four = pods(4, "1", "1Gi", json!({}));
    // the heavier NodePool takes every pod it can: its price is the bound's
    let unlimited = [
        pool("first", 10, &dear, None),
        pool("second", 0, &cheap, None),
    ];
    assert!(close(bound(&unlimited, &four), 0.80));
    // with a limit the pods may go on to the cheaper one, and the bound prices them there
    let limited = [
        pool("first", 10, &dear, Some(2)),
        pool("second", 0, &cheap, None),
    ];
    let b = bound(&limited, &four);
    assert!(close(b, 0.20), "{b}");
}

#[test]
fn pods_kept_apart_by_hostname_pay_for_a_node_each() {
    let types: Arc<[InstanceTypeOption]> = vec![instance_type("small", 2, 8, 0.10, None)].into();
    // ten 100m pods would share one node, but each refuses a node with another of them
    let apart: Vec<Pod> = (0..10)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("web-{i}"), "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": labels::HOSTNAME},
                    ]}},
                },
            }))
            .unwrap()
        })
        .collect();
    let b = bound(&[pool("default", 0, &types, None)], &apart);
    assert!(close(b, 1.0), "{b}");
    // ten pods of a shape alike but that do not refuse each other share nodes
    let together = bound(
        &[pool("default", 0, &types, None)],
        &pods(10, "100m", "128Mi", json!({})),
    );
    assert!(together < 0.1, "{together}");
}

/// A catalog keeps the bounds it worked out over pods alone and gives them again only while
/// what they read is the same: each change below moves the bound, and the catalog that saw
/// the step before answers as a fresh one.
#[test]
fn a_kept_bound_answers_as_a_fresh_one_as_its_inputs_change() {
    let cheap_large: Arc<[InstanceTypeOption]> = vec![
        instance_type("small", 2, 4, 0.10, None),
        instance_type("large", 8, 16, 0.30, None),
    ]
    .into();
    let dear_large: Arc<[InstanceTypeOption]> = vec![
        instance_type("small", 2, 4, 0.10, None),
        instance_type("large", 8, 16, 0.90, None),
    ]
    .into();
    let agent_pods = pods(1, "500m", "64Mi", json!(null));
    let (none, agent): (&[Pod], &[Pod]) = (&[], &agent_pods);
    let unlimited = pool("p", 0, &cheap_large, None);
    let limited = pool("p", 0, &cheap_large, Some(6));
    let used = NodePoolInput {
        usage: Resources::from_quantities([(&"cpu".to_string(), "2")]),
        ..limited.clone()
    };
    let repriced = pool("p", 0, &dear_large, None);
    let capped = NodePoolInput {
        largest: Some(NodeSize {
            cpu_millis: 2000,
            memory_bytes: 4 << 30,
        }),
        ..repriced.clone()
    };
    let on_small = json!({labels::INSTANCE_TYPE: "small"});
    let any = json!(null);
    // (step, NodePool, pods, their cpu, their node selector, DaemonSets)
    let steps = [
        ("three pods", unlimited.clone(), 3, "1", &any, none),
        ("larger requests", unlimited.clone(), 3, "2", &any, none),
        ("one pod more", unlimited.clone(), 4, "2", &any, none),
        (
            "a node selector",
            unlimited.clone(),
            4,
            "2",
            &on_small,
            none,
        ),
        ("a daemonset", unlimited, 4, "2", &any, agent),
        ("a cpu limit", limited, 4, "2", &any, agent),
        ("usage under it", used, 4, "2", &any, agent),
        ("repriced types", repriced, 4, "2", &any, agent),
        ("a size cap", capped, 4, "2", &any, agent),
    ];
    let mut kept = Catalog::default();
    let mut last: Option<CostBound> = None;
    for (step, pool, count, cpu, selector, daemonsets) in steps {
        let pools = [pool];
        let pods = pods(count, cpu, "1Gi", selector.clone());
        let pods: Vec<&Pod> = pods.iter().collect();
        let problem = Problem {
            daemonsets,
            ..Problem::new(&pools, &pods)
        };
        let fresh = cost_bound(&problem, &mut Catalog::default()).unwrap();
        assert_ne!(last.as_ref(), Some(&fresh), "{step}: the bound moves");
        for _ in 0..2 {
            let again = cost_bound(&problem, &mut kept).unwrap();
            assert_eq!(again, fresh, "{step}: the kept catalog's answer");
        }
        last = Some(fresh);
    }
}

/// A catalog does not keep a type list alive for its kept bounds once no one else holds it
/// (nor for the list without spot it made from it): else every list the cloud's offerings
/// ever made would stay in memory.
#[test]
fn kept_bounds_let_go_of_type_lists_no_one_else_holds() {
    let mut kept = Catalog::default();
    let bound_for = |pools: &[NodePoolInput], n: usize, kept: &mut Catalog| {
        let some = pods(n, "1", "1Gi", json!(null));
        let some: Vec<&Pod> = some.iter().collect();
        cost_bound(&Problem::new(pools, &some), kept).unwrap();
    };
    let old: Arc<[InstanceTypeOption]> =
        vec![instance_type("small", 2, 4, 0.10, Some(0.05))].into();
    let gone = Arc::downgrade(&old);
    bound_for(&[pool("p", 0, &old, None)], 1, &mut kept);
    kept.without_spot(&old);
    drop(old);
    // the cloud's offerings changed: passes ask with the new list from now on
    let new: Arc<[InstanceTypeOption]> =
        vec![instance_type("small", 2, 4, 0.12, Some(0.06))].into();
    for n in 1..=24 {
        bound_for(&[pool("p", 0, &new, None)], n, &mut kept);
        kept.without_spot(&new);
    }
    assert!(gone.upgrade().is_none(), "the old list is let go");
}
