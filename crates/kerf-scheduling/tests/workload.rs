//! The benchmark workload schedules completely, and the same input gives the same output.

use kerf_scheduling::{Preferences, Problem, SolveOptions, benchmark, solve};

fn problem<'a>(
    pools: &'a [kerf_scheduling::NodePoolInput],
    pods: &'a [k8s_openapi::api::core::v1::Pod],
    preferences: Preferences,
) -> Problem<'a> {
    Problem {
        options: SolveOptions {
            preferences,
            ..SolveOptions::default()
        },
        ..Problem::new(pools, pods)
    }
}

#[test]
fn every_benchmark_pod_schedules() {
    let pools = [benchmark::node_pool()];
    for n in [1, 50, 500, 2000] {
        let pods = benchmark::diverse_pods(n, 42);
        let d = solve(&problem(&pools, &pods, Preferences::Respect));
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
        let d = solve(&problem(&pools, &pods, p));
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
    let a = solve(&problem(&pools, &pods, Preferences::Respect));
    let b = solve(&problem(&pools, &pods, Preferences::Respect));
    assert_eq!(a, b);
}
