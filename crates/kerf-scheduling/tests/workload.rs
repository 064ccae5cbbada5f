//! The benchmark workload schedules completely, and the same input gives the same output.

use kerf_scheduling::{Preferences, Problem, SolveOptions, benchmark, solve};

fn solve_with(
    pools: &[kerf_scheduling::NodePoolInput],
    pods: &[k8s_openapi::api::core::v1::Pod],
    preferences: Preferences,
) -> kerf_scheduling::Decision {
    let pods: Vec<_> = pods.iter().collect();
    solve(&Problem {
        options: SolveOptions {
            preferences,
            ..SolveOptions::default()
        },
        ..Problem::new(pools, &pods)
    })
}

#[test]
fn every_benchmark_pod_schedules() {
    let pools = [benchmark::node_pool()];
    for n in [1, 50, 500, 2000] {
        let pods = benchmark::diverse_pods(n, 42);
        let d = solve_with(&pools, &pods, Preferences::Respect);
        let unplaced: Vec<String> = d
            .unschedulable
            .iter()
            .map(|u| {
                format!(
                    "{}: {:?}",
                    pods[u.pod].metadata.name.as_deref().unwrap_or(""),
                    u.reasons
                )
            })
            .collect();
        assert!(unplaced.is_empty(), "{n} pods: {unplaced:?}");
        let placed: usize = d.nodeclaims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(placed, n);
        eprintln!("{n} pods -> {} nodes", d.nodeclaims.len());
    }
}

#[test]
fn preference_workload_schedules_both_ways() {
    let pools = [benchmark::node_pool()];
    let pods = benchmark::preference_pods(400, 42);
    for p in [Preferences::Respect, Preferences::Ignore] {
        let d = solve_with(&pools, &pods, p);
        assert!(
            d.unschedulable.is_empty(),
            "{p:?}: {:?}",
            d.unschedulable.first()
        );
        eprintln!("{p:?}: {} nodes", d.nodeclaims.len());
    }
}

#[test]
fn same_input_same_decision() {
    let pools = [benchmark::node_pool()];
    let pods = benchmark::diverse_pods(300, 7);
    let a = solve_with(&pools, &pods, Preferences::Respect);
    let b = solve_with(&pools, &pods, Preferences::Respect);
    assert_eq!(a, b);
}

/// A planned NodeClaim counts against its NodePool's limits only what it can launch as
/// (the largest of its cheapest `max_instance_types` types), not the largest type that
/// would fit: under a tight limit many small NodeClaims fit, and the launch options of all
/// of them together still stay within the limit.
#[test]
fn limits_count_what_a_nodeclaim_can_launch_as() {
    let mut pool = benchmark::node_pool();
    // 10,000 cores: 25 NodeClaims if each held the 400-core type back, about 160 at 60
    pool.limits = [("cpu".to_string(), 10_000 * 1000)].into();
    let cores: std::collections::HashMap<String, i64> = benchmark::instance_types()
        .into_iter()
        .map(|t| (t.name, t.capacity.cpu_millis))
        .collect();
    let pools = [pool];
    for (n, all_fit) in [(500, true), (1500, false)] {
        // one pod per node: the benchmark's hostname anti-affinity group
        let pods: Vec<_> = benchmark::diverse_pods(n, 42)
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .map(String::as_str)
                    == Some("nginx")
            })
            .collect();
        let d = solve_with(&pools, &pods, Preferences::Respect);
        assert_eq!(d.unschedulable.is_empty(), all_fit, "{} pods", pods.len());
        for u in &d.unschedulable {
            assert!(
                u.reasons
                    .iter()
                    .all(|r| format!("{:?}", r.why).starts_with("LimitReached")),
                "{:?}",
                u.reasons
            );
        }
        assert!(d.nodeclaims.len() > 25, "{} NodeClaims", d.nodeclaims.len());
        let reserved: i64 = d
            .nodeclaims
            .iter()
            .map(|c| {
                c.instance_types
                    .iter()
                    .map(|o| cores[&o.name])
                    .max()
                    .unwrap_or(0)
            })
            .sum();
        assert!(
            reserved <= 10_000 * 1000,
            "launch options reserve {reserved} millicores"
        );
    }
}

/// A catalog kept between solves (as the controllers keep one) decides as a fresh one does,
/// whatever it compiled before: other requirements, a changed type list, other pods.
#[test]
fn a_kept_catalog_decides_as_a_fresh_one() {
    use kerf_scheduling::{Catalog, solve_with as solve_kept};
    let mut arm = benchmark::node_pool();
    arm.requirements = vec![kerf_api::NodeSelectorRequirementWithMinValues {
        key: "kubernetes.io/arch".into(),
        operator: kerf_api::Operator::In,
        values: vec!["arm64".into()],
        min_values: None,
    }];
    // the same type list as the arm64 NodePool's, without its requirement
    let mut all = benchmark::node_pool();
    all.instance_types = arm.instance_types.clone();
    let mut fewer = benchmark::node_pool();
    let mut types = benchmark::instance_types();
    types.retain(|t| t.capacity.cpu_millis <= 16_000);
    types[0].offerings[0].available = false;
    fewer.instance_types = std::sync::Arc::from(types);
    let mut catalog = Catalog::default();
    for (round, pools) in [
        vec![arm.clone()],
        vec![all.clone()],
        vec![fewer, arm],
        vec![all],
    ]
    .into_iter()
    .enumerate()
    {
        for pods in [
            benchmark::diverse_pods(200, round as u64),
            benchmark::preference_pods(100, round as u64),
        ] {
            let pods: Vec<_> = pods.iter().collect();
            let problem = Problem::new(&pools, &pods);
            let kept = solve_kept(&problem, &mut catalog);
            assert_eq!(kept, solve(&problem), "round {round}");
        }
    }
}
