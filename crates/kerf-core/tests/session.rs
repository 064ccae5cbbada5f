//! A scheduler session answers "what if this node were gone?" exactly as a fresh solve of
//! the cluster without it would, also after earlier removals were kept: the session is a
//! faster path to the same decisions, never a different one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kerf_core::benchmark::BenchCluster;
use kerf_scheduling::resources::pod_requests;
use kerf_scheduling::{BoundPod, Decision, ExistingNode, Problem, Session, SolveOptions, solve};

/// Where each pod went: pod name → node name (or the NodeClaim's index and pool).
fn placements(d: &Decision, pods: &[&Pod], nodes: &[&ExistingNode]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in &d.existing {
        for p in &e.pods {
            out.insert(pod_name(pods[*p]), nodes[e.node].name.clone());
        }
    }
    for (k, c) in d.nodeclaims.iter().enumerate() {
        for p in &c.pods {
            out.insert(
                pod_name(pods[*p]),
                format!("new-{k}:{}", c.launch.instance_type),
            );
        }
    }
    out
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

#[test]
fn session_answers_match_fresh_solves_across_kept_removals() {
    for seed in [1, 2, 3] {
        let cluster = BenchCluster::generate(40, seed);
        let view = cluster.view(40);
        let vp: &[&Pod] = &view.pods;
        let all_nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
        let bound = view.bound_pods();
        let pods: Vec<Pod> = view.pods.iter().map(|p| (*p).clone()).collect();
        let problem = Problem {
            nodes: &all_nodes,
            bound_pods: &bound,
            daemonsets: view.daemonsets,
            ..Problem::new(&view.node_pools, &[])
        };
        let mut session = Session::new(&problem, vp);

        // the cluster as the fresh solves see it, kept in step with kept removals
        let mut nodes = all_nodes.clone();
        let mut on: Vec<Vec<usize>> = view.nodes.iter().map(|n| n.pods.clone()).collect();
        let mut gone = vec![false; nodes.len()];
        let mut kept = 0;
        for i in 0..nodes.len() {
            let new_nodes = i % 3 == 2;
            let mut moving = on[i].clone();
            moving.sort_unstable();
            let answer = session.try_remove(&[i], &view.nodes[i].pods, new_nodes);

            let keep: Vec<usize> = (0..nodes.len()).filter(|k| !gone[*k] && *k != i).collect();
            let remaining: Vec<ExistingNode> = keep.iter().map(|k| nodes[*k].clone()).collect();
            let on_ref = &on;
            let fresh_bound: Vec<BoundPod<'_>> = keep
                .iter()
                .enumerate()
                .flat_map(|(pos, k)| {
                    on_ref[*k].iter().map(move |p| BoundPod {
                        node: pos,
                        pod: vp[*p],
                        terms: None,
                    })
                })
                .collect();
            let fresh_pods: Vec<Pod> = moving.iter().map(|p| pods[*p].clone()).collect();
            let expected = solve(&Problem {
                node_pools: &view.node_pools,
                nodes: &remaining,
                bound_pods: &fresh_bound,
                daemonsets: view.daemonsets,
                pods: &fresh_pods.iter().collect::<Vec<_>>(),
                requests: &[],
                terms: &[],
                options: SolveOptions {
                    new_nodeclaims: new_nodes,
                    ..SolveOptions::default()
                },
            });

            let all_refs: Vec<&Pod> = pods.iter().collect();
            let fresh_refs: Vec<&Pod> = fresh_pods.iter().collect();
            let node_refs: Vec<&ExistingNode> = all_nodes.iter().collect();
            let remaining_refs: Vec<&ExistingNode> = remaining.iter().collect();
            assert_eq!(
                placements(&answer, &all_refs, &node_refs),
                placements(&expected, &fresh_refs, &remaining_refs),
                "seed {seed}, node {i}"
            );
            assert_eq!(
                answer.unschedulable.len(),
                expected.unschedulable.len(),
                "seed {seed}, node {i}"
            );

            if answer.unschedulable.is_empty() && answer.nodeclaims.is_empty() {
                session.keep();
                kept += 1;
                gone[i] = true;
                on[i].clear();
                for e in &answer.existing {
                    for p in &e.pods {
                        nodes[e.node].requested.add(&pod_requests(&pods[*p]));
                        on[e.node].push(*p);
                    }
                }
            }
        }
        assert!(kept > 3, "seed {seed}: only {kept} removals kept");
    }
}

/// A catalog kept from pass to pass (as disruption keeps one) answers as a fresh one while
/// nodes are relabeled: a node's compiled labels are reused only for the same labels.
#[test]
fn a_kept_catalog_answers_as_a_fresh_one_while_nodes_are_relabeled() {
    use kerf_scheduling::Catalog;
    let zone_key = || kerf_api::labels::ZONE;
    let mut catalog = Catalog::default();
    for seed in [1, 2] {
        let cluster = BenchCluster::generate(40, seed);
        let view = cluster.view(40);
        let vp: &[&Pod] = &view.pods;
        let mut nodes: Vec<ExistingNode> = view.nodes.iter().map(|n| n.node.clone()).collect();
        let bound = view.bound_pods();
        for round in 0..3 {
            if round > 0 {
                // every other node moves to the first node's zone, in a new label map
                let first = nodes[0].labels.get(zone_key()).cloned().unwrap_or_default();
                for n in nodes.iter_mut().skip(round).step_by(2) {
                    let mut labels = (*n.labels).clone();
                    labels.insert(zone_key().to_string(), first.clone());
                    n.labels = std::sync::Arc::new(labels);
                }
            }
            let problem = Problem {
                nodes: &nodes,
                bound_pods: &bound,
                daemonsets: view.daemonsets,
                ..Problem::new(&view.node_pools, &[])
            };
            let mut kept = Session::with_catalog(&problem, vp, &mut catalog);
            let mut fresh = Session::new(&problem, vp);
            for (i, n) in view.nodes.iter().enumerate() {
                let new_nodes = i % 2 == 0;
                assert_eq!(
                    kept.try_remove(&[i], &n.pods, new_nodes),
                    fresh.try_remove(&[i], &n.pods, new_nodes),
                    "seed {seed}, round {round}, node {i}"
                );
            }
        }
    }
}
