//! Criterion bench of one solve on Karpenter's scheduling benchmark workload.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kerf_scheduling::{Preferences, Problem, SolveOptions, benchmark, solve};

fn diverse(c: &mut Criterion) {
    let pools = [benchmark::node_pool()];
    let mut group = c.benchmark_group("solve/diverse");
    group.sample_size(10);
    for n in [1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000] {
        let pods = benchmark::diverse_pods(n, 42);
        let pods: Vec<_> = pods.iter().collect();
        let problem = Problem::new(&pools, &pods);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &problem, |b, p| {
            b.iter(|| solve(p))
        });
    }
    group.finish();
}

fn preferences(c: &mut Criterion) {
    let pools = [benchmark::node_pool()];
    let pods = benchmark::preference_pods(4000, 42);
    let pods: Vec<_> = pods.iter().collect();
    let mut group = c.benchmark_group("solve/preferences");
    group.sample_size(10);
    group.throughput(Throughput::Elements(4000));
    for (name, preferences) in [
        ("respect", Preferences::Respect),
        ("ignore", Preferences::Ignore),
    ] {
        let problem = Problem {
            options: SolveOptions {
                preferences,
                ..SolveOptions::default()
            },
            ..Problem::new(&pools, &pods)
        };
        group.bench_with_input(BenchmarkId::from_parameter(name), &problem, |b, p| {
            b.iter(|| solve(p))
        });
    }
    group.finish();
}

criterion_group!(benches, diverse, preferences);
criterion_main!(benches);
