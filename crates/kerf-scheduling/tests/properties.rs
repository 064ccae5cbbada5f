//! Properties of every solve: for random pods and NodePools, each placement respects every
//! hard constraint, no node is over-committed, limits hold, every pod is accounted for once,
//! and the same input always gives the same decision.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{NodeSelectorRequirementWithMinValues, Operator, Taint, TaintEffect, labels};
use kerf_scheduling::resources::pod_requests;
use kerf_scheduling::taints::first_untolerated;
use kerf_scheduling::{
    Catalog, InstanceTypeOption, NodePoolInput, Problem, benchmark, cost_bound, solve,
};
use proptest::prelude::*;
use serde_json::json;

const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// Forty of the benchmark's types, with zones varied so zone choices matter.
fn types() -> Arc<[InstanceTypeOption]> {
    benchmark::instance_types()
        .into_iter()
        .step_by(10)
        .enumerate()
        .map(|(i, mut t)| {
            t.offerings
                .retain(|o| i % 3 != 0 || o.zone != "test-zone-3");
            t
        })
        .collect::<Vec<_>>()
        .into()
}

#[derive(Clone, Debug)]
struct PoolSpec {
    weight: i32,
    zones: Vec<usize>,
    spot_only: bool,
    tainted: bool,
    team: Option<u8>,
    cpu_limit: Option<i64>,
}

#[derive(Clone, Debug)]
struct PodSpec {
    cpu_millis: i64,
    memory_mib: i64,
    zone: Option<usize>,
    team: Option<u8>,
    tolerates: bool,
    anti_host: bool,
    spread_zone: bool,
}

fn pool_strategy() -> impl Strategy<Value = PoolSpec> {
    (
        0..5i32,
        proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3),
        any::<bool>(),
        proptest::bool::weighted(0.3),
        proptest::option::weighted(0.4, 0..2u8),
        proptest::option::weighted(0.4, 4..40i64),
    )
        .prop_map(
            |(weight, zones, spot_only, tainted, team, cpu_limit)| PoolSpec {
                weight,
                zones,
                spot_only,
                tainted,
                team,
                cpu_limit,
            },
        )
}

fn pod_strategy() -> impl Strategy<Value = PodSpec> {
    (
        prop_oneof![Just(100i64), Just(500), Just(1000), Just(3500), Just(9000)],
        prop_oneof![Just(128i64), Just(1024), Just(4096), Just(30000)],
        proptest::option::weighted(0.2, 0..3usize),
        proptest::option::weighted(0.3, 0..2u8),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.2),
    )
        .prop_map(
            |(cpu_millis, memory_mib, zone, team, tolerates, anti_host, spread_zone)| PodSpec {
                cpu_millis,
                memory_mib,
                zone,
                team,
                tolerates,
                anti_host,
                spread_zone,
            },
        )
}

fn node_pool(i: usize, p: &PoolSpec, types: &Arc<[InstanceTypeOption]>) -> NodePoolInput {
    let mut requirements = vec![NodeSelectorRequirementWithMinValues {
        key: labels::ZONE.into(),
        operator: Operator::In,
        values: p.zones.iter().map(|z| ZONES[*z].to_string()).collect(),
        min_values: None,
    }];
    if p.spot_only {
        requirements.push(NodeSelectorRequirementWithMinValues {
            key: labels::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec!["spot".into()],
            min_values: None,
        });
    }
    NodePoolInput {
        name: format!("pool-{i}"),
        weight: p.weight,
        labels: p
            .team
            .map(|t| [("team".to_string(), format!("t{t}"))].into())
            .unwrap_or_default(),
        requirements,
        taints: if p.tainted {
            vec![Taint {
                key: "dedicated".into(),
                value: Some("x".into()),
                effect: TaintEffect::NoSchedule,
                time_added: None,
            }]
        } else {
            Vec::new()
        },
        startup_taints: Vec::new(),
        limits: p
            .cpu_limit
            .map(|c| [("cpu".to_string(), c * 1000)].into())
            .unwrap_or_default(),
        usage: Default::default(),
        nodes: 0,
        instance_types: types.clone(),
        largest: None,
    }
}

fn pod(i: usize, p: &PodSpec) -> Pod {
    let mut selector = serde_json::Map::new();
    if let Some(z) = p.zone {
        selector.insert(labels::ZONE.into(), ZONES[z].into());
    }
    if let Some(t) = p.team {
        selector.insert("team".into(), format!("t{t}").into());
    }
    let mut spec = json!({
        "containers": [{"name": "c", "resources": {"requests": {
            "cpu": format!("{}m", p.cpu_millis), "memory": format!("{}Mi", p.memory_mib)}}}],
        "nodeSelector": selector,
    });
    if p.tolerates {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    if p.anti_host {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": labels::HOSTNAME, "labelSelector": {"matchLabels": {"anti": "yes"}}}]}});
    }
    if p.spread_zone {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": labels::ZONE,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"spread": "yes"}}}]);
    }
    let mut labels = serde_json::Map::new();
    if p.anti_host {
        labels.insert("anti".into(), "yes".into());
    }
    if p.spread_zone {
        labels.insert("spread".into(), "yes".into());
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("p{i}"), "namespace": "default", "labels": labels},
        "spec": spec,
    }))
    .expect("valid pod")
}

/// The NodePools and pods the specs stand for.
fn generated(pool_specs: &[PoolSpec], pod_specs: &[PodSpec]) -> (Vec<NodePoolInput>, Vec<Pod>) {
    let types = types();
    let pools = (pool_specs.iter().enumerate())
        .map(|(i, p)| node_pool(i, p, &types))
        .collect();
    let pods = pod_specs
        .iter()
        .enumerate()
        .map(|(i, p)| pod(i, p))
        .collect();
    (pools, pods)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn placements_respect_every_hard_constraint(
        pool_specs in proptest::collection::vec(pool_strategy(), 1..4),
        pod_specs in proptest::collection::vec(pod_strategy(), 1..40),
    ) {
        let (pools, pods) = generated(&pool_specs, &pod_specs);
        let pods: Vec<&Pod> = pods.iter().collect();
        let problem = Problem::new(&pools, &pods);
        let d = solve(&problem);
        prop_assert_eq!(&d, &solve(&problem), "same input, same decision");

        // every pod exactly once
        let mut seen = BTreeSet::new();
        for i in d.nodeclaims.iter().flat_map(|c| &c.pods).chain(d.unschedulable.iter().map(|u| &u.pod)) {
            prop_assert!(seen.insert(*i), "pod {} accounted twice", i);
        }
        prop_assert_eq!(seen.len(), pods.len());

        let mut planned_cpu: BTreeMap<usize, i64> = BTreeMap::new();
        for c in &d.nodeclaims {
            let np = &pools[c.node_pool];
            let spec = &pool_specs[c.node_pool];
            let t = pools[c.node_pool].instance_types.iter().find(|t| t.name == c.launch.instance_type).expect("a known type");
            // the launch is one of the type's available offerings, allowed by the pool
            prop_assert!(t.offerings.iter().any(|o| o.zone == c.launch.zone && o.capacity_type == c.launch.capacity_type));
            prop_assert!(spec.zones.iter().any(|z| ZONES[*z] == c.launch.zone));
            prop_assert!(!spec.spot_only || c.launch.capacity_type == "spot");
            // not over-committed
            let mut total = kerf_scheduling::resources::Resources::default();
            for i in &c.pods {
                total.add(&pod_requests(pods[*i]));
            }
            prop_assert!(total.fits(&t.allocatable), "{:?} over {:?}", total, t.allocatable);
            *planned_cpu.entry(c.node_pool).or_default() += t.capacity.cpu_millis;
            let mut anti = 0;
            for i in &c.pods {
                let p = &pod_specs[*i];
                prop_assert!(p.zone.is_none_or(|z| ZONES[z] == c.launch.zone));
                prop_assert!(p.team.is_none_or(|t| spec.team == Some(t)));
                let tolerations = pods[*i].spec.as_ref().unwrap().tolerations.clone().unwrap_or_default();
                prop_assert!(first_untolerated(&tolerations, &np.taints, false).is_none());
                anti += usize::from(p.anti_host);
            }
            prop_assert!(anti <= 1, "{} anti-affine pods share a node", anti);
        }
        for (pool, cpu) in planned_cpu {
            if let Some(limit) = pool_specs[pool].cpu_limit {
                prop_assert!(cpu <= limit * 1000, "pool {} planned {}m over its {} cpu limit", pool, cpu, limit);
            }
        }
    }

    #[test]
    fn zonal_spread_stays_within_max_skew(
        pod_specs in proptest::collection::vec(pod_strategy(), 1..60),
        pool_count in 1..3usize,
    ) {
        let types = types();
        let open = PoolSpec { weight: 0, zones: vec![0, 1, 2], spot_only: false, tainted: false, team: None, cpu_limit: None };
        let pools: Vec<NodePoolInput> = (0..pool_count).map(|i| node_pool(i, &open, &types)).collect();
        let pods: Vec<Pod> = pod_specs
            .iter()
            .enumerate()
            .map(|(i, p)| pod(i, &PodSpec { zone: None, team: None, spread_zone: true, ..p.clone() }))
            .collect();
        let pods: Vec<&Pod> = pods.iter().collect();
        let problem = Problem::new(&pools, &pods);
        let d = solve(&problem);
        prop_assert!(d.unschedulable.is_empty());
        let mut per_zone: BTreeMap<&str, usize> = ZONES.iter().map(|z| (*z, 0)).collect();
        for c in &d.nodeclaims {
            *per_zone.get_mut(c.launch.zone.as_str()).unwrap() += c.pods.len();
        }
        let (lo, hi) = (per_zone.values().min().unwrap(), per_zone.values().max().unwrap());
        prop_assert!(hi - lo <= 1, "{:?}", per_zone);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The cost bound is a lower bound: no decision that places every pod costs less.
    #[test]
    fn no_decision_placing_every_pod_costs_less_than_the_bound(
        pool_specs in proptest::collection::vec(pool_strategy(), 1..4),
        pod_specs in proptest::collection::vec(pod_strategy(), 1..40),
    ) {
        let (pools, pods) = generated(&pool_specs, &pod_specs);
        let pods: Vec<&Pod> = pods.iter().collect();
        let problem = Problem::new(&pools, &pods);
        let d = solve(&problem);
        let bound = cost_bound(&problem, &mut Catalog::default()).expect("the linear program solves");
        prop_assume!(d.unschedulable.is_empty());
        prop_assert_eq!(bound.unplaceable, 0);
        prop_assert!(
            bound.per_hour <= d.cost_per_hour() * (1.0 + 1e-6) + 1e-9,
            "bound {} over the decision's {}", bound.per_hour, d.cost_per_hour()
        );
    }
}
